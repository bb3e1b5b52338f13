#!/usr/bin/env bash
# Measures the real desktop app under Xvfb: time from process start to the first frame,
# resident memory, and CPU used while idle (the app repaints only when something changes).
#
# Usage: ui/benches/desktop.sh [GRAPH.json] [SHOT.png]
#   default graph: assets/examples/hello.agentloom.json. For the 500-block graph, write it
#   first with `AGENTLOOM_BENCH_GRAPHS=DIR cargo bench -p agentloom --bench frame`.
# Needs: Xvfb, xdotool, imagemagick (import, convert), x11-utils (xdpyinfo) and a release
# build (cargo build --release -p agentloom) or AGENTLOOM_BIN.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
graph=${1:-$root/assets/examples/hello.agentloom.json}
shot=${2:-}
bin=${AGENTLOOM_BIN:-$root/target/release/agentloom}
idle_secs=${IDLE_SECS:-5}

for tool in Xvfb xdotool import convert xdpyinfo; do
    command -v "$tool" >/dev/null || { echo "desktop.sh: $tool is not installed" >&2; exit 2; }
done
[ -x "$bin" ] || { echo "desktop.sh: $bin not found; cargo build --release -p agentloom" >&2; exit 2; }
[ -f "$graph" ] || { echo "desktop.sh: no graph at $graph" >&2; exit 2; }

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
    [ -n "${KEEP_LOG:-}" ] && cp "$work/app.log" "$KEEP_LOG"
    rm -rf "$work"
}
trap cleanup EXIT

Xvfb ":$display" -screen 0 1280x800x24 -nolisten tcp -noreset >"$work/xvfb.log" 2>&1 &
xvfb_pid=$!
export DISPLAY=":$display"
unset WAYLAND_DISPLAY
export XDG_RUNTIME_DIR="$work/runtime" HOME="$work/home" XDG_DATA_HOME="$work/home/.local/share"
mkdir -m 700 -p "$XDG_RUNTIME_DIR"
mkdir -p "$HOME"
for _ in $(seq 1 50); do
    xdpyinfo >/dev/null 2>&1 && break
    sleep 0.1
done

# Clock ticks → seconds, for /proc/PID/stat.
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk -v k="${2:-VmRSS}:" '$1 == k {print $2}' "/proc/$1/status"; }

start_ns=$(date +%s%N)
AGENTLOOM_LOG=info "$bin" open "$graph" --db "$work/runs.sqlite3" >"$work/app.log" 2>&1 &
app_pid=$!

# The app logs "first frame" with elapsed_ms since its main started; also time it from here.
first_ms=""
for _ in $(seq 1 400); do
    if grep -q "first frame" "$work/app.log"; then
        first_ms=$((($(date +%s%N) - start_ns) / 1000000))
        break
    fi
    kill -0 "$app_pid" 2>/dev/null || { echo "desktop.sh: the app exited:" >&2; cat "$work/app.log" >&2; exit 1; }
    sleep 0.005
done
[ -n "$first_ms" ] || { echo "desktop.sh: no first frame within 2 s" >&2; cat "$work/app.log" >&2; exit 1; }
logged=$(grep -h "first frame" "$work/app.log" | sed 's/\x1b\[[0-9;]*m//g' | sed -n 's/.*elapsed_ms=\([0-9]*\).*/\1/p')

# A couple of seconds to settle, then memory and an idle window with no input at all.
sleep 2
rss=$(rss_kib "$app_pid")
rss_anon=$(rss_kib "$app_pid" RssAnon)
rss_file=$(rss_kib "$app_pid" RssFile)
before=$(cpu_ticks "$app_pid")
sleep "$idle_secs"
after=$(cpu_ticks "$app_pid")
rss_after=$(rss_kib "$app_pid")
if [ -n "$shot" ]; then
    import -window root "$shot"
    echo "screenshot: $shot ($(convert "$shot" -format %k info:) colours)"
fi

echo "graph: $graph"
echo "first frame: ${first_ms} ms after spawn, seen by polling the log every 5 ms (the app itself logs ${logged:-?} ms from its main)"
echo "resident memory: $((rss / 1024)) MiB after 2 s (anonymous $((rss_anon / 1024)) MiB, files $((rss_file / 1024)) MiB), $((rss_after / 1024)) MiB after ${idle_secs} s more"
awk -v t=$((after - before)) -v hz="$hz" -v s="$idle_secs" \
    'BEGIN { printf "idle CPU: %d ticks = %.2f s over %d s (%.1f%%)\n", t, t / hz, s, 100 * t / hz / s }'
