#!/usr/bin/env bash
# Builds the Windows installer of Agentloom on Linux: cross-builds agentloom.exe with
# mingw-w64 (its icon and version resource from ui/build.rs) and wraps it with NSIS into
# target/packages/Agentloom-<version>-setup.exe (assets/windows/agentloom.nsi: a per-user
# install, a Start menu entry, the graph file type, an uninstaller). Then checks what it
# built: the installer holds agentloom.exe, whose version resource names Agentloom and this
# version, and the script registers the file type and writes an uninstaller.
#
# Usage: bash scripts/package.sh --windows [--profile NAME | --binary PATH]
#   --profile NAME  the cargo profile to cross-build (default: dist, optimised and stripped;
#                   CI uses `windows-ci`, unoptimised, to keep its time)
#   --binary PATH   package this agentloom.exe as it is, building nothing
#
# Needs: cargo with the x86_64-pc-windows-gnu target (rustup target add
# x86_64-pc-windows-gnu), and the Debian packages gcc-mingw-w64-x86-64 (the linker and
# windres), nsis (makensis), p7zip-full (7z, to look inside the installer), binutils
# (strings, and x86_64-w64-mingw32-strip from binutils-mingw-w64) and python3.
set -euo pipefail
caller=$(pwd)
cd "$(dirname "$0")/.."

target=x86_64-pc-windows-gnu
profile=dist
binary=""
while [ $# -gt 0 ]; do
    case "$1" in
        --windows) shift ;;
        --profile) profile=${2:?--profile needs a cargo profile name (dist, release, windows-ci, dev)}; shift 2 ;;
        --binary) binary=${2:?--binary needs the path of a built agentloom.exe}; shift 2
            [[ "$binary" = /* ]] || binary="$caller/$binary" ;;
        -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "package.sh --windows: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

fail() {
    echo "package.sh --windows: $*" >&2
    exit 1
}
for tool in cargo python3 makensis 7z strings x86_64-w64-mingw32-gcc x86_64-w64-mingw32-windres \
    x86_64-w64-mingw32-strip; do
    command -v "$tool" >/dev/null 2>&1 ||
        { echo "package.sh --windows: $tool is not installed (Debian: apt-get install gcc-mingw-w64-x86-64 nsis p7zip-full binutils)" >&2; exit 2; }
done

metadata=$(cargo metadata --no-deps --format-version 1)
read -r version target_dir < <(python3 -c '
import json, sys
meta = json.load(sys.stdin)
ui = next(p for p in meta["packages"] if p["name"] == "agentloom")
print(ui["version"], meta["target_directory"])' <<<"$metadata")

if [ -z "$binary" ]; then
    if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$target"; then
        rustup target add "$target"
    fi
    echo "package.sh --windows: cargo build -p agentloom --profile $profile --target $target"
    cargo build -p agentloom --profile "$profile" --target "$target"
    [ "$profile" = dev ] && dir=debug || dir=$profile
    binary="$target_dir/$target/$dir/agentloom.exe"
fi
[ -f "$binary" ] || fail "$binary is not a built agentloom.exe"

out="$target_dir/packages"
stage="$out/windows-stage"
setup="$out/Agentloom-$version-setup.exe"
rm -rf "$stage" "$setup"
mkdir -p "$stage"
cp "$binary" "$stage/agentloom.exe"
x86_64-w64-mingw32-strip --strip-all "$stage/agentloom.exe"
script=assets/windows/agentloom.nsi
# lzma for a release; zlib, many times faster, for CI's unoptimised (and much larger) build.
case "$profile" in dist | release) compressor="/SOLID lzma" ;; *) compressor=zlib ;; esac
makensis -V2 -NOCD \
    "-DCOMPRESSOR=$compressor" \
    "-DVERSION=$version" \
    "-DEXE=$stage/agentloom.exe" \
    "-DICON=$(pwd)/assets/icons/agentloom.ico" \
    "-DOUTFILE=$setup" \
    "$script"
[ -s "$setup" ] || fail "makensis wrote no $setup"

# What a user gets: the installer holds agentloom.exe, and that exe says what it is.
check="$stage/check"
mkdir -p "$check"
7z x -y -o"$check" "$setup" >/dev/null || fail "7z cannot read $setup"
[ -f "$check/agentloom.exe" ] || fail "$setup holds no agentloom.exe: $(cd "$check" && ls)"
[ -f "$check/agentloom.ico" ] || fail "$setup holds no agentloom.ico"
cmp -s "$check/agentloom.exe" "$stage/agentloom.exe" || fail "the agentloom.exe in $setup is not the one built"
# VS_VERSION_INFO's strings are UTF-16: each key is followed by its value.
resource=$(strings -el "$check/agentloom.exe")
for pair in "ProductName Agentloom" "ProductVersion $version" "FileVersion $version" "OriginalFilename agentloom.exe"; do
    key=${pair%% *} value=${pair#* }
    grep -A1 -x "$key" <<<"$resource" | grep -qx "$value" ||
        fail "agentloom.exe's version resource has no $key \"$value\""
done
# The script registers the file type and writes an uninstaller that removes it again.
for line in 'WriteRegStr HKCU "Software\Classes\.agentloom.json" "" "${PROGID}"' \
    'WriteRegStr HKCU "Software\Classes\${PROGID}\shell\open\command" "" '"'"'"$INSTDIR\agentloom.exe" "%1"'"'" \
    'WriteRegStr HKCU "Software\Classes\.json\OpenWithProgids" "${PROGID}" ""' \
    'WriteUninstaller "$INSTDIR\uninstall.exe"' \
    'WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString" '"'"'"$INSTDIR\uninstall.exe"'"'" \
    'DeleteRegKey HKCU "Software\Classes\.agentloom.json"' \
    'CreateShortcut "$SMPROGRAMS\Agentloom.lnk" "$INSTDIR\agentloom.exe" "" "$INSTDIR\agentloom.ico"'; do
    grep -qxF "  $line" "$script" || fail "$script lacks: $line"
done
rm -rf "$stage"

echo "package.sh --windows: built from $binary:"
ls -l "$setup" | awk '{ printf "  %s  %.1f MB\n", $NF, $5 / 1e6 }'
echo "  holds agentloom.exe (version resource: Agentloom $version), registers .agentloom.json, has an uninstaller"
