#!/usr/bin/env bash
# Checks the Linux packages as a user meets them: builds both (scripts/package.sh), installs
# the .deb with dpkg -i, validates its desktop entry, opens a graph file through its MIME
# association (gio open, as a double-click does) under Xvfb with a screenshot of the window
# that opens and its X11 class; then starts the AppImage where libfuse.so.2 and /dev/fuse do
# not exist (a bubblewrap mount namespace, as on a system with FUSE 3 only): its version, its
# window (class, screenshot), --appimage-extract, and images its runtime must refuse.
#
# Usage: bash scripts/check-packages.sh [package.sh arguments: --binary target/debug/agentloom]
#        bash scripts/check-packages.sh --built   (checks the packages in target/packages)
# Needs root (or sudo without a password) for dpkg -i; an agentloom package that was not
# installed before is removed again at the end. Tools: xvfb-run (xvfb, xauth), xdotool,
# xprop, imagemagick, gio (libglib2.0-bin), shared-mime-info, desktop-file-validate
# (desktop-file-utils), bwrap (bubblewrap), readelf (binutils), mksquashfs (squashfs-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

for tool in xvfb-run xdotool xprop import convert gio desktop-file-validate update-mime-database \
    bwrap readelf mksquashfs; do
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

echo "== the AppImage runtime's own tests (unpacking, its cache, links)"
if ! cargo test --quiet --locked --manifest-path packaging/appimage-runtime/Cargo.toml \
    --target-dir "${CARGO_TARGET_DIR:-$root/target}" >"$work/runtime-tests.log" 2>&1; then
    cat "$work/runtime-tests.log" >&2
    fail "the AppImage runtime's tests failed"
fi
grep "^test result" "$work/runtime-tests.log"

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

# The window's X11 class, both parts: desktops match the desktop entry's StartupWMClass
# against the instance name or the class.
check_window_class() {
    local class
    class=$(xprop -id "$1" WM_CLASS)
    [ "$class" = 'WM_CLASS(STRING) = "agentloom", "agentloom"' ] ||
        fail "the window's class is not the desktop entry's agentloom: $class"
    echo "the window's class: ${class#*= }"
}

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
    check_window_class "$window"
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
    bash -c "$(declare -f fail check_window_class open_by_double_click); open_by_double_click"

# Runs a command where libfuse.so.2 and /dev/fuse do not exist, as on a system with FUSE 3
# only: a mount namespace (bubblewrap) whose library folder holds everything but libfuse.so.2.
# The folder of the C library, where libfuse.so.2 is installed too.
libdir=$(dirname "$(readlink -f "$(PATH="$PATH:/usr/sbin:/sbin" ldconfig -p | sed -n 's/^\tlibc.so.6 .*=> //p' | head -n1)")")
without_libfuse2() {
    local entry args=(--dev-bind / / --tmpfs "$libdir")
    for entry in "$libdir"/*; do
        case "$(basename "$entry")" in libfuse.so.2*) continue ;; esac
        if [ -L "$entry" ]; then
            args+=(--symlink "$(readlink "$entry")" "$entry")
        else
            args+=(--ro-bind "$entry" "$entry")
        fi
    done
    bwrap "${args[@]}" --dev /dev "$@"
}

echo "== the AppImage's runtime"
offset=$("$appimage" --appimage-offset)
head -c "$offset" "$appimage" >"$work/appimage-head"
chmod 755 "$work/appimage-head"
if readelf -d "$work/appimage-head" | grep NEEDED; then
    fail "the AppImage's runtime needs the libraries above: it must be static"
fi
echo "the runtime is static ($offset bytes), $("$appimage" --appimage-version)"

echo "== the AppImage without libfuse.so.2 and /dev/fuse"
without_libfuse2 sh -c '! ls -d /dev/fuse "$1"/libfuse.so.2* 2>/dev/null' _ "$libdir" ||
    fail "the namespace still has libfuse.so.2 or /dev/fuse"
export XDG_CACHE_HOME="$work/cache"
# An older image's copy, last launched three days ago: the launch of this one removes it.
stale="$XDG_CACHE_HOME/agentloom/appimage/$(printf '0%.0s' $(seq 64))"
mkdir -p "$stale" && : >"$stale/AppRun" && : >"$(dirname "$stale")/.$(basename "$stale").in-use"
touch -d '3 days ago' "$(dirname "$stale")/.$(basename "$stale").in-use"
said=$(cd "$work" && without_libfuse2 "$appimage" --version 2>"$work/appimage.log") ||
    fail "$appimage --version failed without libfuse.so.2: $(cat "$work/appimage.log")"
[ "$said" = "agentloom $version" ] || fail "$appimage --version said '$said', not 'agentloom $version'"
echo "$(basename "$appimage") --version: $said"
unpacked=$(ls -d "$XDG_CACHE_HOME"/agentloom/appimage/*/)
[ -x "${unpacked}usr/bin/agentloom" ] || fail "the AppImage was not unpacked into $XDG_CACHE_HOME"
echo "unpacked once into ${unpacked%/}"
[ ! -e "$stale" ] || fail "an older image's copy unused for three days is still in the cache: $stale"
echo "an older image's copy unused for three days was removed"

# Inside xvfb-run: the AppImage's window, started on the graph where FUSE 2 is missing.
open_appimage_window() {
    set -euo pipefail
    (cd "$work" && without_libfuse2 "$appimage" "$graph" >"$work/appimage-window.log" 2>&1 &)
    local window=""
    for _ in $(seq 1 300); do
        window=$(xdotool search --name Agentloom 2>/dev/null | head -n1 || true)
        [ -n "$window" ] && break
        sleep 0.1
    done
    [ -n "$window" ] || fail "no window from the AppImage within 30 s: $(cat "$work/appimage-window.log")"
    app_pid=$(xdotool getwindowpid "$window")
    trap 'kill "$app_pid" 2>/dev/null || true' EXIT
    exe=$(readlink "/proc/$app_pid/exe")
    [[ "$exe" = "$XDG_CACHE_HOME"/agentloom/appimage/*/usr/bin/agentloom ]] ||
        fail "the window belongs to $exe, not the AppImage's unpacked agentloom"
    tr '\0' '\n' <"/proc/$app_pid/environ" | grep -qxF "APPIMAGE=$(readlink -f "$appimage")" ||
        fail "the app was not started with APPIMAGE=$appimage"
    echo "the AppImage started $exe on '$graph'"
    # The running app holds its copy in use: no other launch may remove it.
    local copy="${exe%/usr/bin/agentloom}"
    if flock --nonblock --exclusive "$(dirname "$copy")/.$(basename "$copy").in-use" true; then
        fail "the running app does not hold its copy's in-use lock"
    fi
    echo "the running app holds $(basename "$copy")'s in-use lock"
    check_window_class "$window"
    sleep 2
    import -window root "$shot"
    colours=$(convert "$shot" -format %k info:)
    [ "$colours" -ge 50 ] || fail "the AppImage's window looks blank ($colours colours): $shot"
    echo "screenshot: $shot ($colours colours)"
    kill "$app_pid"
    for _ in $(seq 1 50); do
        kill -0 "$app_pid" 2>/dev/null || break
        sleep 0.1
    done
}
export appimage libdir XDG_CACHE_HOME shot="$packages/appimage-window.png"
xvfb-run -a -s "-screen 0 1280x800x24 -nolisten tcp" bash -c \
    "$(declare -f fail without_libfuse2 check_window_class open_appimage_window); open_appimage_window"

echo "== --appimage-extract"
mkdir "$work/extract"
(cd "$work/extract" && without_libfuse2 "$appimage" --appimage-extract >/dev/null)
said=$("$work/extract/squashfs-root/AppRun" --version)
[ "$said" = "agentloom $version" ] || fail "the extracted AppRun --version said '$said'"
echo "extracted into squashfs-root; its AppRun --version: $said"

echo "== images the runtime refuses"
# The runtime with an image whose link leads out of it: nothing is run or written outside.
mkdir -p "$work/evil/usr"
ln -s ../../../../../../bin/sh "$work/evil/AppRun"
mksquashfs "$work/evil" "$work/evil.squashfs" -root-owned -noappend -quiet -no-progress -comp gzip >/dev/null
cat "$work/appimage-head" "$work/evil.squashfs" >"$work/Evil.AppImage"
chmod 755 "$work/Evil.AppImage"
if said=$(XDG_CACHE_HOME="$work/evil-cache" "$work/Evil.AppImage" -c 'echo ran' 2>&1); then
    fail "an image whose AppRun links outside it was run: $said"
fi
grep -q "points outside the image" <<<"$said" || fail "the refusal does not say why: $said"
echo "a link out of the image: $said"
# A file where the cache folder should be.
mkdir "$work/blocked" && : >"$work/blocked/agentloom"
if said=$(XDG_CACHE_HOME="$work/blocked" "$appimage" --version 2>&1); then
    fail "the AppImage ran with a file in the way of its cache: $said"
fi
grep -qF "$work/blocked/agentloom is a file" <<<"$said" || fail "the file in the way is not named: $said"
echo "a file in the way: $said"
echo "check-packages.sh: both packages pass"
