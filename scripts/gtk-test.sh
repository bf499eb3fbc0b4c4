#!/usr/bin/env bash
# `make gtk-test`: the GTK example's scripted checks in a real X server (Xvfb), GTK's criticals and warnings fatal.
# The app checks, after every batch, that the rows its GtkListView shows and the rows of its model (read through
# GTK's own API) are a fresh fetch's: the seeds' batches, the window's buttons, a user's reorder, a shelf deleted with
# its books, a search refined and cleared, and SAVES saves of another process (1,000 by default). Then runs that
# dropping one splice of the adapter must fail, and that the screenshots taken on the way are not blank.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../Examples/GTKDemo"
saves=${SAVES:-1000}
swift build
app=.build/debug/entitystore-gtk
source "$here/xvfb.sh"
start_xvfb 1280x1600
export G_DEBUG=fatal-criticals,fatal-warnings

echo "gtk-test: the checks, with $saves saves of another process (display $DISPLAY)"
mkdir -p "$work/shots"
if ! "$app" --check --store "$work/store" --saves "$saves" --screenshots "$work/shots" 2>"$work/stderr"; then
    cat "$work/stderr"
    echo "gtk-test: the checks failed" >&2
    exit 1
fi
if grep -E "WARNING|CRITICAL|Gtk-|GLib-" "$work/stderr"; then
    echo "gtk-test: GTK printed the warnings above" >&2
    exit 1
fi

# The pictures: each a PNG of the window with more than a handful of colours (text drawn, not a blank frame).
mkdir -p .build/gtk-screenshots
for shot in 1-first-fetch 2-mixed-batch 3-user-reorder 4-after-other-process; do
    png="$work/shots/$shot.png"
    [ -s "$png" ] || { echo "gtk-test: no screenshot $shot" >&2; exit 1; }
    colours=$(identify -format '%k' "$png")
    if [ "$colours" -lt 16 ]; then
        echo "gtk-test: the screenshot $shot is blank ($colours colours)" >&2
        exit 1
    fi
    cp "$png" .build/gtk-screenshots/
done
echo "gtk-test: screenshots in Examples/GTKDemo/.build/gtk-screenshots"

# The checks can fail: an adapter that drops one splice (of the seeds' batches, of the other process's saves) is
# caught, by the checks or by GTK itself (a critical, fatal here).
for dropped in 2 9 60; do
    if "$app" --check --store "$work/store" --saves 60 --drop-splice "$dropped" 2>"$work/stderr"; then
        echo "gtk-test: dropping splice $dropped went unseen" >&2
        exit 1
    fi
    echo "gtk-test: dropping splice $dropped is caught: $(grep -m1 -E "check failed|CRITICAL" "$work/stderr" || echo "GTK aborted")"
done
echo "gtk-test: passed"
