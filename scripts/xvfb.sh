# Sourced by the GTK example's scripts: a scratch directory ($work) and an X server without a screen (Xvfb) on a
# free display, both removed when the script exits. `start_xvfb WIDTHxHEIGHT` exports DISPLAY once the server
# accepts connections: Xvfb writes its display's number to the descriptor given (-displayfd), no sleep, no guess.
work=$(mktemp -d)
xvfb=""
cleanup() {
    if [ -n "$xvfb" ]; then kill "$xvfb" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

start_xvfb() {
    mkfifo "$work/display"
    Xvfb -displayfd 5 -screen 0 "$1x24" -nolisten tcp 5>"$work/display" 2>"$work/xvfb.log" &
    xvfb=$!
    read -r number < "$work/display"
    # The cairo renderer (Xvfb has no GPU), no accessibility bus (a desktop session's, absent here: GTK warns
    # without it).
    export DISPLAY=":$number" GTK_A11Y=none GSK_RENDERER=cairo
}
