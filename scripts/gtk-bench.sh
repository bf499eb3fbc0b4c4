#!/usr/bin/env bash
# `make gtk-bench`: the GTK example at BOOKS books (100,000 by default), release build, in Xvfb: the first frame's
# time after launch, and ROUNDS batches of 1% of the books saved by another process (applied to GTK, on screen).
# Figures, not checks (the machine is shared): they are recorded in Benchmarks/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../Examples/GTKDemo"
books=${BOOKS:-100000}
rounds=${ROUNDS:-7}
swift build -c release
app=.build/release/entitystore-gtk
source "$here/xvfb.sh"
"$app" seed --store "$work/store" --books "$books"
start_xvfb 1280x1024
# A first launch loads GTK's libraries and fonts from disk; the second is the one measured (as a user's second
# start of an app). Both are printed.
for launch in cold warm; do
    echo "gtk-bench: $launch launch"
    "$app" --bench --store "$work/store" --saves "$rounds" --launched-at "$(date +%s%N)"
done
