#!/usr/bin/env bash
# Checks the Linux packages as a user meets them: builds both (scripts/package.sh), installs
# the .deb with dpkg -i, validates its desktop entry, opens a graph file through its MIME
# association (gio open, as a double-click does) under Xvfb with a screenshot of the window
# that opens, and starts the AppImage to print its version.
#
# Usage: bash scripts/check-packages.sh [package.sh arguments: --binary target/debug/agentloom]
#        bash scripts/check-packages.sh --built   (checks the packages in target/packages)
# Needs root (or sudo without a password) for dpkg -i; an agentloom package that was not
# installed before is removed again at the end. Tools: xvfb-run (xvfb, xauth), xdotool,
# xprop, imagemagick, gio (libglib2.0-bin), shared-mime-info, desktop-file-validate
# (desktop-file-utils).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

for tool in xvfb-run xdotool xprop import convert gio desktop-file-validate update-mime-database; do
    command -v "$tool" >/dev/null 2>&1 || { echo "check-packages.sh: $tool is not installed" >&2; exit 2; }
done
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        echo "check-packages.sh: '$*' needs root: run as root or with sudo that asks no password" >&2
        exit 2
    fi
}
fail() {
    echo "check-packages.sh: $*" >&2
    exit 1
}

if [ "${1:-}" = --built ]; then
    shift
else
    bash scripts/package.sh "$@"
fi
packages="${CARGO_TARGET_DIR:-$root/target}/packages"
deb=$(ls "$packages"/agentloom_*.deb)
appimage=$(ls "$packages"/Agentloom-*.AppImage)
version=$(dpkg-deb -f "$deb" Version)

work=$(mktemp -d)
was_installed=$(dpkg-query -W -f='${Status}' agentloom 2>/dev/null || true)
cleanup() {
    if [ "$was_installed" != "install ok installed" ]; then
        as_root dpkg -r agentloom >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

echo "== dpkg -i $(basename "$deb")"
as_root dpkg -i "$deb"
said=$(/usr/bin/agentloom --version)
[ "$said" = "agentloom $version" ] || fail "/usr/bin/agentloom --version said '$said', not 'agentloom $version'"
echo "$said"

echo "== desktop-file-validate"
desktop-file-validate /usr/share/applications/agentloom.desktop
echo "/usr/share/applications/agentloom.desktop is valid"

# A graph file as a user has it: a name with a space, in a folder of its own, downloaded from
# somewhere: it names an MCP server whose command would leave a marker behind. Opened with a
# double-click it is untrusted: the server must not start, and the trust banner asks.
export HOME="$work/home" XDG_RUNTIME_DIR="$work/runtime"
export XDG_DATA_HOME="$HOME/.local/share" XDG_CONFIG_HOME="$HOME/.config"
mkdir -p "$HOME" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME"
mkdir -m 700 "$XDG_RUNTIME_DIR"
mkdir "$work/graphs"
graph="$work/graphs/Say hello.agentloom.json"
marker="$work/graphs/the-server-started"
python3 - assets/examples/hello.agentloom.json "$graph" "$marker" <<'PY'
import json, sys
source, graph, marker = sys.argv[1:]
doc = json.load(open(source))
doc["mcp_servers"] = {"tools": {"command": "sh", "args": ["-c", f"touch '{marker}'; exit 1"]}}
json.dump(doc, open(graph, "w"), indent=2)
PY

echo "== the MIME type of *.agentloom.json"
type=$(gio info -a standard::content-type "$graph" | sed -n 's/^ *standard::content-type: //p')
[ "$type" = application/x-agentloom-graph ] ||
    fail "gio sees $graph as '$type', not application/x-agentloom-graph (is shared-mime-info installed?)"
handlers=$(gio mime application/x-agentloom-graph)
echo "${handlers%%$'\n'*}"
grep -q agentloom.desktop <<<"$handlers" || fail "no application opens application/x-agentloom-graph"

echo "== gio open (a double-click) under Xvfb"
# Inside xvfb-run: finds the window the opened file brought up, checks whose it is, and
# screenshots it.
open_by_double_click() {
    set -euo pipefail
    (cd "$work" && gio open "$graph")
    local window=""
    for _ in $(seq 1 200); do
        window=$(xdotool search --name Agentloom 2>/dev/null | head -n1 || true)
        [ -n "$window" ] && break
        sleep 0.1
    done
    [ -n "$window" ] || fail "no Agentloom window appeared within 20 s of gio open"
    app_pid=$(xdotool getwindowpid "$window")
    trap 'kill "$app_pid" 2>/dev/null || true' EXIT # also when a check below fails
    exe=$(readlink "/proc/$app_pid/exe")
    [ "$exe" = /usr/bin/agentloom ] || fail "the window belongs to $exe, not the installed /usr/bin/agentloom"
    tr '\0' '\n' <"/proc/$app_pid/cmdline" | grep -qxF "$graph" ||
        fail "the app was not started on the opened file: $(tr '\0' ' ' <"/proc/$app_pid/cmdline")"
    echo "gio open started /usr/bin/agentloom on '$graph'"
    xprop -id "$window" _NET_WM_ICON | grep -q "_NET_WM_ICON(CARDINAL)" || fail "the window has no icon"
    echo "the window has the application icon"
    sleep 2
    import -window root "$shot"
    colours=$(convert "$shot" -format %k info:)
    [ "$colours" -ge 50 ] || fail "the opened window looks blank ($colours colours): $shot"
    echo "screenshot: $shot ($colours colours)"
    [ ! -e "$marker" ] || fail "the double-clicked, untrusted graph started its MCP server"
    echo "the untrusted graph started nothing"
    kill "$app_pid"
    # Not a child of this shell (gio started it): wait for it to go before the display does.
    for _ in $(seq 1 50); do
        kill -0 "$app_pid" 2>/dev/null || break
        sleep 0.1
    done
}
export work graph marker shot="$packages/opened-graph.png"
unset WAYLAND_DISPLAY
xvfb-run -a -s "-screen 0 1280x800x24 -nolisten tcp" \
    bash -c "$(declare -f fail open_by_double_click); open_by_double_click"

echo "== the AppImage prints its version"
# The runtime mounts the image with FUSE; where FUSE (libfuse2, /dev/fuse) is missing, it
# unpacks the image instead when asked to.
if said=$("$appimage" --version 2>"$work/appimage.log"); then
    how="mounted with FUSE"
else
    said=$(APPIMAGE_EXTRACT_AND_RUN=1 "$appimage" --version)
    how="unpacked, FUSE being unavailable: $(head -n1 "$work/appimage.log")"
fi
[ "$said" = "agentloom $version" ] || fail "$appimage --version said '$said', not 'agentloom $version'"
echo "$(basename "$appimage") --version: $said ($how)"
echo "check-packages.sh: both packages pass"
