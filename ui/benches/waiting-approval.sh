#!/usr/bin/env bash
# Measures the CPU the real app uses while a run waits for an approval, under Xvfb on the
# software renderer (Mesa llvmpipe, no GPU): a safe-mode graph that writes a file is run
# from the keyboard, its approval window left open, and the app's CPU time counted over
# IDLE_SECS (20) in ROUNDS (3) spans. Prints each span, the median as a share of one core
# (the target: under 5 %), and the machine's load average, which skews the figure.
#
# Usage: ui/benches/waiting-approval.sh   (SHOT=FILE.png: a screenshot of the waiting window)
# Needs: Xvfb, xdotool, x11-utils (xdpyinfo), python3 and a build of the app:
#   target/release/agentloom (cargo build --release -p agentloom), else AGENTLOOM_BIN
#   (a debug build counts more CPU per frame than a release one: an upper bound).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${AGENTLOOM_BIN:-$root/target/release/agentloom}
idle_secs=${IDLE_SECS:-20}
rounds=${ROUNDS:-3}

for tool in Xvfb xdotool xdpyinfo python3; do
    command -v "$tool" >/dev/null || { echo "waiting-approval.sh: $tool is not installed" >&2; exit 2; }
done
[ -x "$bin" ] || { echo "waiting-approval.sh: $bin not found; cargo build --release -p agentloom" >&2; exit 2; }

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
export DISPLAY=":$display" LIBGL_ALWAYS_SOFTWARE=1
unset WAYLAND_DISPLAY
export XDG_RUNTIME_DIR="$work/runtime" HOME="$work/home" XDG_DATA_HOME="$work/home/.local/share"
mkdir -m 700 -p "$XDG_RUNTIME_DIR"
mkdir -p "$HOME" "$work/graph"
for _ in $(seq 1 50); do
    xdpyinfo >/dev/null 2>&1 && break
    sleep 0.1
done

# Safe mode: writing the file waits for a person's approval.
graph="$work/graph/write.agentloom.json"
cat >"$graph" <<'JSON'
{"format":"agentloom.graph","version":1,"name":"write","settings":{"safe_mode":true},"nodes":[
  {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"written","type":"text"}},
  {"id":"write","block":"file.write","position":[250,0],"config":{"path":"note.txt"}},
  {"id":"out","block":"graph.output","position":[500,0],"config":{"name":"path"}}],
 "edges":[{"from":["text","value"],"to":["write","content"]},{"from":["write","path"],"to":["out","value"]}]}
JSON
db="$work/runs.sqlite3"
AGENTLOOM_LOG=info "$bin" open "$graph" --db "$db" >"$work/app.log" 2>&1 &
app_pid=$!

window=""
for _ in $(seq 1 100); do
    window=$(xdotool search --name Agentloom 2>/dev/null | head -n1 || true)
    [ -n "$window" ] && grep -q "first frame" "$work/app.log" && break
    kill -0 "$app_pid" 2>/dev/null || { echo "waiting-approval.sh: the app exited:" >&2; cat "$work/app.log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$window" ] || { echo "waiting-approval.sh: no window" >&2; exit 1; }
sleep 1
xdotool windowfocus --sync "$window"
xdotool key ctrl+Return

status=""
for attempt in $(seq 1 100); do
    status=$("$bin" runs --json --db "$db" 2>/dev/null |
        python3 -c 'import json, sys; runs = json.load(sys.stdin); print(runs[0]["status"] if runs else "")' ||
        true)
    [ "$status" = waiting ] && break
    # A form in between (inputs, the trust question): its default button.
    [ "$attempt" = 20 ] && xdotool key Return
    sleep 0.1
done
[ "$status" = waiting ] || { echo "waiting-approval.sh: the run is not waiting ($status)" >&2; cat "$work/app.log" >&2; exit 1; }
# The approval window opened and settled; the pointer away from it.
xdotool mousemove 5 795
sleep 2
if [ -n "${SHOT:-}" ]; then
    import -window root "$SHOT"
fi

hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
shares=()
for round in $(seq 1 "$rounds"); do
    before=$(cpu_ticks "$app_pid")
    sleep "$idle_secs"
    after=$(cpu_ticks "$app_pid")
    share=$(awk -v t=$((after - before)) -v hz="$hz" -v s="$idle_secs" 'BEGIN { printf "%.2f", 100 * t / hz / s }')
    shares+=("$share")
    echo "span $round: $((after - before)) ticks in ${idle_secs} s = ${share} % of a core"
done
median=$(printf '%s\n' "${shares[@]}" | sort -n | awk '{a[NR] = $1} END { print a[int((NR + 1) / 2)] }')
"$bin" runs --json --db "$db" | python3 -c 'import json, sys; r = json.load(sys.stdin)[0]; print("run", r["id"][:8], r["status"])'
echo "binary: $bin"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo "idle CPU while an approval waits: median ${median} % of a core (target: under 5 %)"
