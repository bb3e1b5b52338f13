#!/usr/bin/env bash
# The debugger in the real app under Xvfb: a graph with a breakpoint before its template and
# one after its integer (kept in the app's data folder, as F9 and the node menu keep them),
# run with the real keyboard and mouse (Ctrl+Enter); the run pauses after the integer, whose
# output is typed over in the run panel, and F5 goes on to the next breakpoint; the
# screenshot ($1) shows the run paused before the template, its resolved inputs (the edit
# among them) ready to edit, the breakpoints and the paused node on the canvas. Fails unless
# the run log holds the run paused there with the edited value among its inputs.
#
# Usage: ui/tests/debugger-screenshot.sh OUT.png
# Needs: Xvfb, xdotool, imagemagick (import); a built target/debug/agentloom (or set
# AGENTLOOM_BIN), python3 (to read the run log).
set -euo pipefail

out=${1:?usage: debugger-screenshot.sh OUT.png}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${AGENTLOOM_BIN:-$root/target/debug/agentloom}

for tool in Xvfb xdotool import python3; do
    command -v "$tool" >/dev/null || { echo "debugger-screenshot.sh: $tool is not installed" >&2; exit 2; }
done
[ -x "$bin" ] || { echo "debugger-screenshot.sh: $bin not found; build it first (cargo build -p agentloom)" >&2; exit 2; }

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

Xvfb ":$display" -screen 0 1280x800x24 -nolisten tcp -noreset >"$work/xvfb.log" 2>&1 &
xvfb_pid=$!
export DISPLAY=":$display"
unset WAYLAND_DISPLAY
export XDG_RUNTIME_DIR="$work/runtime"
mkdir -m 700 -p "$XDG_RUNTIME_DIR"
export HOME="$work/home" XDG_DATA_HOME="$work/home/.local/share"
mkdir -p "$HOME"
for _ in $(seq 1 50); do
    xdpyinfo >/dev/null 2>&1 && break
    sleep 0.1
done

graph="$work/greeting.agentloom.json"
cat >"$graph" <<'JSON'
{"format":"agentloom.graph","version":1,"name":"Debugged greeting",
  "nodes":[
    {"id":"name","block":"data.constant","label":"Name","position":[0,0],"config":{"value":"world","type":"text"}},
    {"id":"times","block":"data.constant","label":"Times","position":[0,220],"config":{"value":2,"type":"integer"}},
    {"id":"render","block":"text.template","label":"Render greeting","position":[320,60],"config":{"template":"Hello, {{ name }} x{{ times }}!"}},
    {"id":"shout","block":"text.template","label":"Shout it","position":[640,60],"config":{"template":"{{ text }}!!"}},
    {"id":"out","block":"graph.output","position":[940,60],"config":{"name":"greeting"}}],
  "edges":[{"from":["name","value"],"to":["render","name"]},
           {"from":["times","value"],"to":["render","times"]},
           {"from":["render","text"],"to":["shout","text"]},
           {"from":["shout","text"],"to":["out","value"]}]}
JSON
# The breakpoints as the app keeps them for this file.
data="$XDG_DATA_HOME/agentloom"
mkdir -p "$data"
key=$(python3 -c 'import os,sys; print(os.path.realpath(sys.argv[1]))' "$graph")
python3 - "$data/breakpoints.json" "$key" <<'PY'
import json, sys
json.dump({sys.argv[2]: {"render": "before", "times": "after"}}, open(sys.argv[1], "w"))
PY

db="$work/runs.sqlite3"
AGENTLOOM_LOG=info "$bin" open "$graph" --db "$db" >"$work/app.log" 2>&1 &
app_pid=$!
window=""
for _ in $(seq 1 200); do
    window=$(xdotool search --name Agentloom 2>/dev/null | head -n1 || true)
    [ -n "$window" ] && break
    sleep 0.1
done
[ -n "$window" ] || { echo "debugger-screenshot.sh: no window" >&2; cat "$work/app.log" >&2; exit 1; }
sleep 3
xdotool windowactivate --sync "$window" 2>/dev/null || xdotool windowfocus "$window"
# Ctrl+Enter runs; the run pauses after `times`.
xdotool key --window "$window" ctrl+Return
sleep 2
[ -n "${DEBUGGER_SHOT_STEPS:-}" ] && import -window root "${out%.png}-after-times.png"
# The integer's output edited in the pause's editor (click in it, select all, type).
xdotool mousemove 300 "${EDITOR_Y:-655}" click 1
sleep 0.5
xdotool key ctrl+a
xdotool type --delay 20 '{"value": 3}'
sleep 1
# F5: on to the template's breakpoint.
xdotool key F5
sleep 2

wait_for() {
    for _ in $(seq 1 50); do
        if python3 - "$db" "$1" <<'PY'
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
rows = conn.execute(
    "SELECT hit_json FROM pending_breakpoints"
    " WHERE decision_json IS NULL AND at = 'before' AND node_path = ?",
    (sys.argv[2],),
).fetchall()
sys.exit(0 if rows and '"times":3' in rows[0][0].replace(" ", "") else 1)
PY
        then return 0; fi
        sleep 0.2
    done
    return 1
}
if ! wait_for render; then
    echo "debugger-screenshot.sh: the run did not pause before \`render\` with the edited \`times\`" >&2
    cat "$work/app.log" >&2
    exit 1
fi
sleep 1
import -window root "$out"
echo "debugger-screenshot.sh: wrote $out"
