#!/usr/bin/env bash
# Every performance figure of the README, in one sitting: builds the release binary once,
# then runs, in order, the executor benchmark (chains, `agentloom run` per node beside the
# engine, start-up, fan-out, memory, the run log's size), the values benchmark (handing a
# large value on, the growing text), and scripts/bench-peers.sh (Rivet and Node-RED on the
# same graphs, then `serve` against Node-RED in three rounds). Prints each figure with its
# ratio against its baseline measured in the same run, the load (/proc/loadavg) beside it
# and the command that reproduces it, and writes the table for the README's Performance
# section to target/bench-sitting.md (the whole output in target/bench-sitting/).
#
#   scripts/bench-sitting.sh            # 10 to 20 minutes on 2 cores
#   scripts/bench-sitting.sh --quick    # a few minutes: every step runs, smaller figures
#   scripts/bench-sitting.sh --no-build # the binaries already built, as they are
#
# Run it on a quiet machine: the figures are only as good as the load printed beside them.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/target/bench-sitting"
QUICK=0
BUILD=1
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    --no-build) BUILD=0 ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-sitting: unknown argument $arg (--quick, --no-build, --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
rm -f "$OUT"/*.log
started=$(date +%s)

load() { cut -d' ' -f1-3 /proc/loadavg; }

# Waits (at most SETTLE_MAX_S seconds, 150 unless set) until the one-minute load is below
# SETTLE_BELOW (1.0 unless set), so that no step is measured in the wake of the one before
# (a build, a benchmark keeping both cores busy). --quick does not wait.
settle() {
  [ "$QUICK" = 1 ] && return 0
  local waited=0
  while awk -v below="${SETTLE_BELOW:-1.0}" '{ exit !($1 >= below) }' /proc/loadavg &&
    [ "$waited" -lt "${SETTLE_MAX_S:-150}" ]; do
    sleep 5
    waited=$((waited + 5))
  done
  [ "$waited" = 0 ] || echo "   (waited ${waited} s for the load to settle: $(load))" >&2
}

# step NAME COMMAND…: runs COMMAND, its output shown and kept in $OUT/NAME.log, with the
# load before and after and the command itself on the log's first lines.
step() {
  local name="$1"
  shift
  settle
  echo "== $name: $*" >&2
  {
    echo "command: $*"
    echo "load before: $(load)"
  } >"$OUT/$name.log"
  "$@" 2>&1 | tee -a "$OUT/$name.log"
  echo "load after: $(load)" >>"$OUT/$name.log"
}

cd "$ROOT"
if [ "$BUILD" = 1 ]; then
  echo "== building (release binary, benchmarks)" >&2
  cargo build --release -p agentloom >&2
  cargo bench -p agentloom-engine --bench executor --bench values --no-run >&2
fi
export AGENTLOOM_BIN="$ROOT/target/release/agentloom"

if [ "$QUICK" = 1 ]; then
  export AGENTLOOM_BENCH_QUICK=1 AGENTLOOM_BENCH_GROWING_N=20000
  PEERS_ARGS=(--runs 3 --seconds 5)
else
  unset AGENTLOOM_BENCH_QUICK AGENTLOOM_BENCH_GROWING_N
  PEERS_ARGS=()
fi

step executor cargo bench -p agentloom-engine --bench executor
# Each section of the values benchmark in a process of its own: the allocator's state after
# the with-log runs of `handing` slows a 100,000-node chain run next in the same process.
step values-handing cargo bench -p agentloom-engine --bench values handing
step values-growing cargo bench -p agentloom-engine --bench values growing
step peers scripts/bench-peers.sh "${PEERS_ARGS[@]}" --only agentloom --only rivet --only node-red
for round in 1 2 3; do
  step "serve-$round" scripts/bench-peers.sh "${PEERS_ARGS[@]}" --only serve
done

took=$(($(date +%s) - started))
python3 - "$OUT" "$took" "$QUICK" <<'PY'
"""Reads the sitting's logs and prints each figure of the issue's targets with its ratio
against its same-run baseline, then writes the README's table to target/bench-sitting.md."""
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

out, took, quick = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"


def log(name):
    return (out / f"{name}.log").read_text()


def loads(name):
    text = log(name)
    before = re.search(r"^load before: (\S+)", text, re.M).group(1)
    after = re.search(r"^load after: (\S+)", text, re.M).group(1)
    return f"{before}–{after}"


def command(name):
    return re.search(r"^command: (.*)$", log(name), re.M).group(1).replace(str(Path.cwd()) + "/", "")


def find(name, pattern):
    found = re.search(pattern, log(name), re.M)
    if not found:
        sys.exit(f"bench-sitting: no figure matching {pattern!r} in {out / (name + '.log')}")
    return [float(g.replace(",", "")) for g in found.groups()]


def last_json(name):
    text = log(name)
    start = text.rfind("\n{\n")
    return json.loads(text[start:text.rfind("}") + 1])


rows = []  # (figure, ratio text, within target, absolute, load, command)


def row(figure, ratio, ok, absolute, name, reproduce=None):
    rows.append((figure, ratio, ok, absolute, loads(name), reproduce or command(name)))


executor = "cargo bench -p agentloom-engine --bench executor"
engine_log, run_log, ratio = find("executor", r"^\s+10000\s+([\d.]+) µs\s+([\d.]+) µs\s+([\d.]+)x")
row("`agentloom run` per node, 10,000-node passthrough chain, with the log, vs the engine with the log",
    f"{ratio:.2f}× (target ≤ 2×)", ratio <= 2 and run_log <= 10,
    f"{run_log:.2f} µs/node (target ≤ 10); engine {engine_log:.2f} µs/node", "executor", f"{executor} process")
engine_t, run_t, ratio = find("executor", r"^\s+engine ([\d.]+) µs/node; `agentloom run` ([\d.]+) µs/node.*ratio ([\d.]+)")
row("`agentloom run` per node, 10,000 `text.template \"{{ value }}\"`, with the log, vs the engine",
    f"{ratio:.2f}× (target ≤ 2×)", ratio <= 2 and run_t <= 10,
    f"{run_t:.2f} µs/node (target ≤ 10); engine {engine_t:.2f} µs/node", "executor", f"{executor} process")
logged, unlogged, ratio, floor = find("executor", r"^\s+with the log ([\d.]+) ms, --no-log ([\d.]+) ms \(ratio ([\d.]+)\); a process doing nothing ([\d.]+) ms")
row("Process start, a 1-node graph, with the log, vs `--no-log`",
    f"{ratio:.2f}×", logged <= 8,
    f"{logged:.2f} ms (target ≤ 8); --no-log {unlogged:.2f} ms; a process doing nothing {floor:.2f} ms",
    "executor", f"{executor} startup")
fan, one, beyond = find("executor", r"^\s+`agentloom run` with the log: ([\d.]+) ms, a 1-node run ([\d.]+) ms.*: (-?[\d.]+) ms beyond")
row("Fan-out 100 × 100 ms `control.delay`, whole process, beyond start-up over the ideal",
    f"{fan / 100:.3f}× the ideal", beyond <= 5,
    f"{beyond:.1f} ms beyond (target ≤ 5); {fan:.1f} ms whole, a 1-node run {one:.1f} ms",
    "executor", f"{executor} fan-out")
took_s, copy_s, ratio = find("values-growing", r"chain ([\d.]+) s \([\d.]+ µs/node\); copying the text once per node ([\d.]+) s \([\d.]+ µs/node\); ratio ([\d.]+)")
flat_s, growth = find("values-growing", r"not growing \(.*\) ([\d.]+) s \([\d.]+ µs/node\); the growth adds [-\d.]+ s: (-?[\d.]+)x copying")
watched_s, watched = find("values-growing", r"chain watched \(.*\) ([\d.]+) s \([\d.]+ µs/node\); ratio ([\d.]+)")
n = int(find("values-growing", r"growing text: (\d+) text.template")[0])
row(f"Growing text `\"{{{{ s }}}}.\"`, {n:,} templates, engine, no log, vs copying the text once per node",
    f"{ratio:.2f}× (target ≤ 1.5×); beyond the same chain not growing, {growth:.2f}× copying", ratio <= 1.5,
    f"{took_s:.3f} s; copying {copy_s:.3f} s; the same chain not growing {flat_s:.3f} s",
    "values-growing", "cargo bench -p agentloom-engine --bench values growing")
row(f"Same, watched (a sink keeps each node's text, so every node copies it), vs copying",
    f"{watched:.2f}×", None, f"{watched_s:.3f} s", "values-growing",
    "cargo bench -p agentloom-engine --bench values growing")
small_hop, large_hop, large = find("values-handing", r"^\s+with log\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x")
row("Handing on a 100 KB text instead of 1 character, 1,000 nodes, with the log", f"{large:.2f}×", None,
    f"{large_hop:.2f} µs per hop; 1 character {small_hop:.2f} µs", "values-handing",
    "cargo bench -p agentloom-engine --bench values handing")

peers = last_json("peers")
agentloom = peers.get("Agentloom", {})
for key, label, unit in [("start_ms", "Process start (1 node, whole process, with the log)", "ms"),
                         ("chain_us_per_node", "1,000-node chain per node, whole process", "µs"),
                         ("fanout_ms", "100 × 100 ms fan-out (the run's own time)", "ms")]:
    mine = agentloom.get(key)
    others = [(peer, peers[peer][key]) for peer in ("Rivet", "Node-RED") if key in peers.get(peer, {})]
    ratio = ", ".join(f"{mine / theirs:.3g}× {peer}'s" for peer, theirs in others if theirs)
    absolute = f"{mine:.1f} {unit}; " + ", ".join(f"{peer} {theirs:.1f} {unit}" for peer, theirs in others)
    row(f"{label}: Agentloom vs the peers", ratio, None, absolute, "peers")

for round_ in (1, 2, 3):
    serve = last_json(f"serve-{round_}")
    mine, red = serve["Agentloom"]["serve"], serve.get("Node-RED", {}).get("serve")
    tail = mine["p99_ms"] / mine["p50_ms"]
    absolute = f"{mine['pairs_per_s']:.0f} pairs/s, p50 {mine['p50_ms']:.2f} ms, p99 {mine['p99_ms']:.2f} ms"
    ratio = f"p99 {tail:.2f}× p50 (target ≤ 3×)"
    if red:
        ratio += f"; {mine['pairs_per_s'] / red['pairs_per_s']:.2f}× Node-RED's pairs/s"
        absolute += f"; Node-RED {red['pairs_per_s']:.0f} pairs/s, p99 {red['p99_ms'] / red['p50_ms']:.2f}× p50"
    row(f"`serve`, 8 clients, task + step pairs, round {round_}", ratio, tail <= 3, absolute, f"serve-{round_}")

for figure, ratio, ok, absolute, load_, reproduce in rows:
    verdict = "" if ok is None else ("  [within target]" if ok else "  [OUT OF TARGET]")
    print(f"\n{figure}\n  {ratio}{verdict}\n  {absolute}\n  load {load_}; {reproduce}")

machine = f"{os.cpu_count()} cores, {platform.machine()}, Linux {platform.release()}"
when = time.strftime("%Y-%m-%d %H:%M")
mode = " (--quick: smaller figures, not for the README)" if quick else ""
lines = [
    f"Measured by `scripts/bench-sitting.sh`{mode} on {when}, {machine}, in {took // 60} min {took % 60} s; "
    "each ratio is against its baseline measured in the same run, the load average over the figure's "
    "step beside it.",
    "",
    "| Figure | Ratio | Measured | Load | Reproduce |",
    "|---|---|---|---|---|",
]
for figure, ratio, ok, absolute, load_, reproduce in rows:
    lines.append(f"| {figure} | {ratio} | {absolute} | {load_} | `{reproduce}` |")
(out.parent / "bench-sitting.md").write_text("\n".join(lines) + "\n")
print(f"\nthe table: {out.parent / 'bench-sitting.md'}; the sitting took {took // 60} min {took % 60} s")
PY
