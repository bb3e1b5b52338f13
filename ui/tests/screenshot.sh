#!/usr/bin/env bash
# Starts the real app under Xvfb with an example graph, takes a screenshot to $1 and fails
# if the window did not render (a blank or near single-colour image). Then runs the graph
# as a person would, with the real keyboard (Ctrl+Enter, type the `name` input, Enter), and
# fails unless the run log holds that run, completed, with the greeting for that name.
# A second screenshot, of the finished run, goes beside the first (OUT-run.png), and a third
# of the quick-add search opened with Space (OUT-quick-add.png).
#
# Usage: ui/tests/screenshot.sh OUT.png
# Needs: Xvfb, xdotool, imagemagick (import, convert); a built target/debug/agentloom
# (or set AGENTLOOM_BIN).
set -euo pipefail

out=${1:?usage: screenshot.sh OUT.png}
root=$(cd "$(dirname "$0")/../.." && pwd)
graph=$root/assets/examples/hello.agentloom.json
bin=${AGENTLOOM_BIN:-$root/target/debug/agentloom}

for tool in Xvfb xdotool import convert; do
    command -v "$tool" >/dev/null || { echo "screenshot.sh: $tool is not installed" >&2; exit 2; }
done
[ -x "$bin" ] || { echo "screenshot.sh: $bin not found; build it first (cargo build -p agentloom)" >&2; exit 2; }

# A free display number.
display=99
while [ -e "/tmp/.X${display}-lock" ] || [ -e "/tmp/.X11-unix/X${display}" ]; do
    display=$((display + 1))
done

work=$(mktemp -d)
xvfb_pid=""
app_pid=""
cleanup() {
    [ -n "$app_pid" ] && kill "$app_pid" 2>/dev/null || true
    [ -n "$xvfb_pid" ] && kill "$xvfb_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# -noreset: by default the server resets when its last client leaves, so the app could
# knock during the reset that follows the readiness probe below and be turned away.
Xvfb ":$display" -screen 0 1280x800x24 -nolisten tcp -noreset >"$work/xvfb.log" 2>&1 &
xvfb_pid=$!
export DISPLAY=":$display"
unset WAYLAND_DISPLAY
export XDG_RUNTIME_DIR="$work/runtime"
mkdir -m 700 -p "$XDG_RUNTIME_DIR"
# Keep the user's data directory and run log untouched.
export HOME="$work/home" XDG_DATA_HOME="$work/home/.local/share"
mkdir -p "$HOME"

for _ in $(seq 1 50); do
    xdpyinfo >/dev/null 2>&1 && break
    sleep 0.1
done
if ! xdpyinfo >/dev/null 2>&1; then
    echo "screenshot.sh: Xvfb did not start on :$display" >&2
    cat "$work/xvfb.log" >&2
    exit 1
fi

start_app() {
    AGENTLOOM_LOG=info "$bin" open "$graph" --db "$work/runs.sqlite3" >"$work/app.log" 2>&1 &
    app_pid=$!
}
start_app

window=""
attempts=1
for _ in $(seq 1 200); do
    window=$(xdotool search --name Agentloom 2>/dev/null | head -n1 || true)
    [ -n "$window" ] && break
    if ! kill -0 "$app_pid" 2>/dev/null; then
        # A display that turns a client away is the X server's doing, not the app's: try again
        # a couple of times, and say so. Any other early exit is a failure at once.
        if [ "$attempts" -lt 3 ] && grep -q "connection to X server" "$work/app.log"; then
            echo "screenshot.sh: the X server refused the app (attempt $attempts); xdpyinfo says:" >&2
            xdpyinfo 2>&1 | head -n 3 >&2 || true
            attempts=$((attempts + 1))
            sleep 1
            start_app
            continue
        fi
        echo "screenshot.sh: the app exited early:" >&2
        cat "$work/app.log" >&2
        exit 1
    fi
    sleep 0.1
done
if [ -z "$window" ]; then
    echo "screenshot.sh: no Agentloom window appeared within 20 s" >&2
    cat "$work/app.log" >&2
    exit 1
fi
# Let it lay out and paint a few frames.
sleep 2
import -window root "$out"

colours=$(convert "$out" -format %k info:)
echo "screenshot.sh: $out has $colours colours"
grep -h "first frame" "$work/app.log" || true
if [ "$colours" -lt 50 ]; then
    echo "screenshot.sh: the window looks blank ($colours colours)" >&2
    exit 1
fi

# A run driven through the window. Without a window manager nobody gives the window the
# keyboard focus, so take it explicitly, as a click on a desktop would.
xdotool windowfocus --sync "$window"
xdotool key ctrl+Return
sleep 1
xdotool key ctrl+a
xdotool type --delay 20 "Ada Lovelace"
xdotool key Return
db="$work/runs.sqlite3"
status=""
for _ in $(seq 1 100); do
    status=$("$bin" runs --json --db "$db" 2>/dev/null |
        python3 -c 'import json, sys; runs = json.load(sys.stdin); print(runs[0]["status"] if runs else "")' ||
        true)
    [ "$status" = completed ] && break
    sleep 0.1
done
if [ "$status" != completed ]; then
    echo "screenshot.sh: the run started from the keyboard did not complete (status: '${status}')" >&2
    cat "$work/app.log" >&2
    exit 1
fi
run_id=$("$bin" runs --json --db "$db" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["id"])')
greeting=$("$bin" show --json --db "$db" "$run_id" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["outputs"]["greeting"])')
if [ "$greeting" != "Hello, Ada Lovelace!" ]; then
    echo "screenshot.sh: the run's output is '$greeting', not the greeting for the typed name" >&2
    exit 1
fi
sleep 0.5
run_shot="${out%.png}-run.png"
import -window root "$run_shot"
echo "screenshot.sh: a run from the keyboard completed with '$greeting'; $run_shot"

# Quick add: Space over empty canvas opens a search at the pointer; typing narrows it.
xdotool mousemove --window "$window" 640 620
sleep 0.3
xdotool key space
sleep 0.5
xdotool type --delay 20 "tmpl"
sleep 0.7
quick_shot="${out%.png}-quick-add.png"
import -window root "$quick_shot"
xdotool key Escape
echo "screenshot.sh: quick add; $quick_shot"
