#!/usr/bin/env bash
# store-inspect's streaming on a 100k-object store, beside mdb_dump on the same store: the time to the first line,
# the whole run and the peak RSS of each. Release builds; the figures are recorded in Benchmarks/README.md.
#   bash Benchmarks/cli-streaming.sh [OBJECTS]
set -euo pipefail
cd "$(dirname "$0")/.."
objects="${1:-100000}"
swift build -c release --product store-inspect >/dev/null
swift build -c release --product es-test-helper >/dev/null
store="$(mktemp -d)/books.store"
trap 'rm -rf "$(dirname "$store")"' EXIT
.build/release/es-test-helper library-store "$store" "$objects" >/dev/null
measure() {
    python3 - "$@" <<'PY'
import resource, subprocess, sys, time
start = time.monotonic()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
child.stdout.readline()
first = time.monotonic()
size = 0
while chunk := child.stdout.read(1 << 16):
    size += len(chunk)
child.wait()
end = time.monotonic()
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"{' '.join(sys.argv[1:])[-60:]:60}  first line {1000 * (first - start):6.1f} ms  "
      f"all {1000 * (end - start):7.1f} ms  peak RSS {rss:5.1f} MB  exit {child.returncode}")
PY
}
for format in ndjson json csv table; do
    measure .build/release/store-inspect export "$store" Book --format "$format"
done
measure .build/release/store-inspect ls "$store" Book
measure mdb_dump -a "$store"
