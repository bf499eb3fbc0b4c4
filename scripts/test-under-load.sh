#!/usr/bin/env bash
# `make test` on a machine that is busy: first while one CPU burner per core runs beside it, then confined to a
# single core with `taskset`. Both must pass: no test may depend on how much work the machine gets through in a given
# time. Prints how long each run took.
#
# Usage: scripts/test-under-load.sh [RUNS]   (RUNS rounds of both, 1 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1}
cores=$(nproc)
make deps >/dev/null
swift build --build-tests >/dev/null

burners=()
stop_burners() {
    for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
    burners=()
}
trap stop_burners EXIT

for round in $(seq 1 "$runs"); do
    echo "round $round: make test with $cores CPU burners beside it"
    for _ in $(seq 1 "$cores"); do
        (while :; do :; done) &
        burners+=($!)
    done
    start=$(date +%s)
    make test >"/tmp/test-under-load-burners-$round.log" 2>&1 || {
        echo "FAILED with burners (log: /tmp/test-under-load-burners-$round.log)"
        grep -a '✘' "/tmp/test-under-load-burners-$round.log" | head -20
        exit 1
    }
    echo "  passed in $(($(date +%s) - start)) s ($(grep -a -o 'Test run with [0-9]* tests' "/tmp/test-under-load-burners-$round.log" | tail -1))"
    stop_burners

    echo "round $round: make test on one core (taskset -c 0)"
    start=$(date +%s)
    taskset -c 0 make test >"/tmp/test-under-load-one-core-$round.log" 2>&1 || {
        echo "FAILED on one core (log: /tmp/test-under-load-one-core-$round.log)"
        grep -a '✘' "/tmp/test-under-load-one-core-$round.log" | head -20
        exit 1
    }
    echo "  passed in $(($(date +%s) - start)) s"
done
