#!/usr/bin/env bash
# Builds the Linux packages of Agentloom into target/packages/: a .deb and an AppImage, both
# from one staged tree (the stripped binary, the desktop entry, the icons and the MIME type
# that makes a double-clicked *.agentloom.json open in the app).
#
# Usage: bash scripts/package.sh [--profile NAME | --binary PATH]
#        bash scripts/package.sh --windows [...]   the Windows installer instead
#                   (scripts/package-windows.sh: cross-built with mingw-w64, NSIS)
#   --profile NAME  the cargo profile to build and package (default: dist, optimised with
#                   symbols stripped; see [profile.dist] in Cargo.toml; `dev` is quick)
#   --binary PATH   package this agentloom binary as it is, building only the small AppImage
#                   runtime (CI packages the binary its tests built)
#
# The .deb is made by dpkg-deb, its dependencies found by dpkg-shlibdeps. The AppImage is a
# type-2 AppImage: a runtime followed by a squashfs image of the AppDir (mksquashfs). The
# runtime is built here from packaging/appimage-runtime, statically linked: it unpacks the
# image into the user's cache instead of mounting it, so it needs neither libfuse nor FUSE.
# Needs: cargo, python3, dpkg-deb and dpkg-shlibdeps (dpkg-dev), strip and readelf (binutils),
# mksquashfs (squashfs-tools), the static C library (libc6-dev, part of build-essential).
set -euo pipefail
for arg in "$@"; do
    [ "$arg" = --windows ] && exec bash "$(dirname "$0")/package-windows.sh" "$@"
done
caller=$(pwd)
cd "$(dirname "$0")/.."

profile=dist
binary=""
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile=${2:?--profile needs a cargo profile name (dist, release, dev)}; shift 2 ;;
        --binary) binary=${2:?--binary needs the path of a built agentloom binary}; shift 2
            [[ "$binary" = /* ]] || binary="$caller/$binary" ;;
        -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "package.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

for tool in cargo python3 dpkg-deb dpkg-shlibdeps strip readelf mksquashfs; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "package.sh: $tool is not installed (Debian: apt-get install build-essential dpkg-dev squashfs-tools)" >&2
        exit 2
    fi
done

metadata=$(cargo metadata --no-deps --format-version 1)
read -r version target_dir < <(python3 -c '
import json, sys
meta = json.load(sys.stdin)
ui = next(p for p in meta["packages"] if p["name"] == "agentloom")
print(ui["version"], meta["target_directory"])' <<<"$metadata")

if [ -z "$binary" ]; then
    echo "package.sh: cargo build -p agentloom --profile $profile"
    cargo build -p agentloom --profile "$profile"
    # The dev profile builds into target/debug; every other profile into a folder of its name.
    [ "$profile" = dev ] && binary="$target_dir/debug/agentloom" || binary="$target_dir/$profile/agentloom"
fi
[ -x "$binary" ] || { echo "package.sh: $binary is not an executable" >&2; exit 2; }

deb_arch=$(dpkg --print-architecture)
machine=$(uname -m)
out="$target_dir/packages"
stage="$out/stage"
rm -rf "$stage" "$out"/agentloom_*.deb "$out"/Agentloom-*.AppImage
mkdir -p "$out" "$stage"

# One tree under /usr, shared by both packages.
tree="$stage/deb"
install -Dm755 "$binary" "$tree/usr/bin/agentloom"
strip --strip-all "$tree/usr/bin/agentloom"
install -Dm644 assets/linux/agentloom.desktop "$tree/usr/share/applications/agentloom.desktop"
install -Dm644 assets/linux/agentloom-mime.xml "$tree/usr/share/mime/packages/agentloom.xml"
for size in 16 32 48 64 128 256 512; do
    install -Dm644 "assets/icons/agentloom-$size.png" \
        "$tree/usr/share/icons/hicolor/${size}x${size}/apps/agentloom.png"
done
install -Dm644 assets/icons/agentloom.svg "$tree/usr/share/icons/hicolor/scalable/apps/agentloom.svg"
install -d "$tree/usr/share/doc/agentloom"
printf 'Agentloom\nLicense: MIT OR Apache-2.0\n' >"$tree/usr/share/doc/agentloom/copyright"

# The .deb. Its library dependencies are read from the binary; the window's libraries
# (X11, Wayland, EGL) are loaded at run time, so they are recommended: the CLI runs without.
shlibs_dir="$stage/shlibs"
mkdir -p "$shlibs_dir/debian"
printf 'Source: agentloom\n\nPackage: agentloom\nArchitecture: any\n' >"$shlibs_dir/debian/control"
depends=$(cd "$shlibs_dir" && dpkg-shlibdeps -O "$tree/usr/bin/agentloom" 2>/dev/null |
    sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "package.sh: dpkg-shlibdeps found no dependency for the binary" >&2; exit 1; }
install -d "$tree/DEBIAN"
cat >"$tree/DEBIAN/control" <<EOF
Package: agentloom
Version: $version
Architecture: $deb_arch
Maintainer: Agentloom developers <agentloom@example.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$tree" | cut -f1)
Depends: $depends
Recommends: libegl1, libgl1, libx11-xcb1, libxcursor1, libxi6, libxrandr2, libxkbcommon-x11-0, libwayland-client0, libwayland-egl1, xdg-desktop-portal, xdg-desktop-portal-gtk | xdg-desktop-portal-backend
Suggests: bubblewrap, gnome-keyring
Section: devel
Priority: optional
Description: build and run AI agents as node graphs
 Agentloom is a native desktop app for building AI agents visually: typed blocks
 (LLM calls, HTTP requests, files, GitHub, Gmail, branches, loops, an agent loop)
 wired on a canvas and run in-process, with live status, tokens and cost. The same
 binary runs graphs headless, serves them over HTTP and as MCP tools.
EOF
deb="$out/agentloom_${version}_${deb_arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$tree" "$deb" >/dev/null

# The AppImage: the runtime, then the AppDir as squashfs. The runtime is our own
# (packaging/appimage-runtime), linked statically: it needs no libfuse and no FUSE, unpacking
# the image once into the user's cache and starting AppRun from there.
appimage_runtime() {
    local manifest=packaging/appimage-runtime/Cargo.toml built
    # crt-static only for this target-triple build: the main workspace's builds are untouched.
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --quiet --locked --release --manifest-path "$manifest" \
        --target x86_64-unknown-linux-gnu --target-dir "$target_dir" >&2
    built="$target_dir/x86_64-unknown-linux-gnu/release/appimage-runtime"
    if readelf -d "$built" | grep -q NEEDED; then
        echo "package.sh: the AppImage runtime $built is not static: $(readelf -d "$built" | grep NEEDED)" >&2
        return 1
    fi
    cp "$built" "$stage/runtime"
    # The AppImage's magic ("AI", type 2) in the ELF header's padding, as the specification says.
    printf 'AI\002' | dd of="$stage/runtime" bs=1 seek=8 conv=notrunc status=none
    echo "$stage/runtime"
}
if [ "$machine" != x86_64 ]; then
    echo "package.sh: no AppImage runtime for $machine here (only x86_64); built only $deb" >&2
    exit 1
fi
runtime=$(appimage_runtime)
appdir="$stage/Agentloom.AppDir"
mkdir -p "$appdir"
cp -a "$tree/usr" "$appdir/usr"
ln -s usr/bin/agentloom "$appdir/AppRun"
cp assets/linux/agentloom.desktop "$appdir/agentloom.desktop"
cp assets/icons/agentloom-256.png "$appdir/agentloom.png"
ln -s agentloom.png "$appdir/.DirIcon"
# gzip: what the runtime reads without a C library.
mksquashfs "$appdir" "$stage/appdir.squashfs" -root-owned -noappend -quiet -no-progress -comp gzip \
    -Xcompression-level 9 >/dev/null
appimage="$out/Agentloom-$version-$machine.AppImage"
cat "$runtime" "$stage/appdir.squashfs" >"$appimage"
chmod 755 "$appimage"
rm -rf "$stage"

echo "package.sh: built from $binary:"
ls -l "$deb" "$appimage" | awk '{ printf "  %s  %.1f MB\n", $NF, $5 / 1e6 }'
