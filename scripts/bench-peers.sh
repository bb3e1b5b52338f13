#!/usr/bin/env bash
# Agentloom against Rivet and Node-RED on the same graphs, in one sitting (see
# scripts/bench-peers.py for what is measured and how). Installs the peers from npm into
# target/bench-peers/ at first use. Not part of the test run: the figures depend on the
# machine, so run it on a quiet one and quote medians with the load printed beside them.
#
#   cargo build --release -p agentloom
#   scripts/bench-peers.sh [--runs 7] [--only agentloom|rivet|node-red|serve] ...
#
# AGENTLOOM_BIN points it at another binary (default target/release/agentloom).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="$ROOT/target/bench-peers"
RIVET_VERSION=1.19.1
NODE_RED_VERSION=4.1.15

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "bench-peers: needs node and npm (Debian packages nodejs and npm)" >&2
  exit 2
fi
if [ ! -d "$PEERS/node_modules/@ironclad/rivet-node" ] || [ ! -d "$PEERS/node_modules/node-red" ]; then
  mkdir -p "$PEERS"
  [ -f "$PEERS/package.json" ] || echo '{"name": "agentloom-bench-peers", "private": true}' >"$PEERS/package.json"
  echo "installing @ironclad/rivet-node@$RIVET_VERSION and node-red@$NODE_RED_VERSION into $PEERS" >&2
  (cd "$PEERS" && npm install --no-audit --no-fund \
    "@ironclad/rivet-node@$RIVET_VERSION" "node-red@$NODE_RED_VERSION" >&2)
fi
echo "uptime: $(uptime)"
exec python3 "$ROOT/scripts/bench-peers.py" --peers-dir "$PEERS" "$@"
