#!/usr/bin/env bash
# Builds the libFuzzer targets against fuzzer-instrumented library modules and runs each, two at a time, for RUNS
# executions (default 1,000,000), or for FUZZ_SECONDS seconds each when that comes first (CI sets it, to stay in its
# time budget on a slow machine; unset, every target runs its RUNS). Crashing inputs land in Fuzz/crashers/TARGET/
# (commit them: the tests replay them); any new one fails the run, after every target ran. `scripts/fuzz.sh build`
# only builds the targets (CI builds them beside the benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-1000000}"
FUZZ_SECONDS="${FUZZ_SECONDS:-0}"
targets="RecordDecoder HistoryDecoder PredicateParser ArgumentParser"
scratch=.build-fuzz
swift build -c release --scratch-path "$scratch" --target StoreInspectCore \
    -Xswiftc -sanitize=fuzzer -Xswiftc -enable-testing
objects=$(ls "$scratch"/release/{LMDB,SectionedDiff,EntityStore,EntityStoreSync,StoreInspectCore}.build/*.o)
for target in $targets; do
    binary="$scratch/fuzz-$target"
    # Linked again only when a source or a library object is newer than the binary.
    if [ -e "$binary" ] && [ -z "$(find "Fuzz/$target.swift" $objects -newer "$binary" | head -n 1)" ]; then continue; fi
    swiftc -O -sanitize=fuzzer -parse-as-library -module-name "Fuzz$target" \
        -I "$scratch/release/Modules" -I Sources/CLMDB -Xcc -fmodule-map-file=Sources/CLMDB/module.modulemap \
        -I Sources/CLibPQ -Xcc -fmodule-map-file=Sources/CLibPQ/module.modulemap -Xcc -I"$(pkg-config --variable=includedir libpq)" \
        "Fuzz/$target.swift" $objects -llmdb -lpq -o "$binary"
done
if [ "${1:-}" = build ]; then exit 0; fi
export SWIFT_BACKTRACE=enable=no
# One target on each core: the targets run two at a time, each into its own log, printed in order afterwards.
fuzz_one() {
    local target=$1 binary="$scratch/fuzz-$1"
    mkdir -p "Fuzz/corpus/$target" "Fuzz/crashers/$target" "$scratch/corpus-$target"
    echo "fuzzing $target for $RUNS runs$([ "$FUZZ_SECONDS" = 0 ] || echo " or $FUZZ_SECONDS seconds")"
    "$binary" -runs="$RUNS" -max_total_time="$FUZZ_SECONDS" -max_len=4096 -timeout=10 -artifact_prefix="Fuzz/crashers/$target/" \
        "$scratch/corpus-$target" "Fuzz/corpus/$target" 2>&1 | grep -E "^(#[0-9]+.*DONE|Done|==|SUMMARY|INFO: -max)" || true
}
declare -A before
for target in $targets; do
    mkdir -p "Fuzz/crashers/$target"
    # Crashers found before (committed, replayed by the tests) are not this run's.
    before[$target]=$(ls "Fuzz/crashers/$target" | sort)
done
set -- $targets
while [ $# -gt 0 ]; do
    fuzz_one "$1" > "$scratch/fuzz-$1.log" &
    if [ $# -gt 1 ]; then fuzz_one "$2" > "$scratch/fuzz-$2.log" & fi
    wait
    shift $(( $# > 1 ? 2 : 1 ))
done
failed=0
for target in $targets; do
    cat "$scratch/fuzz-$target.log"
    # Any new crash-* or timeout-* file fails the run (one `ls` of both globs, before, failed whenever either
    # matched nothing, so no crash ever failed it).
    found=$(comm -13 <(echo "${before[$target]}") <(ls "Fuzz/crashers/$target" | sort) | grep -E '^(crash|timeout)-' || true)
    if [ -n "$found" ]; then
        echo "fuzz: $target found crashing inputs in Fuzz/crashers/$target" >&2
        failed=1
    fi
done
exit $failed
