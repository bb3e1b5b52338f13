#!/usr/bin/env python3
"""Forking a run against running it again: a graph whose upstream node waits (control.delay,
DELAY_MS), then a template and an output. The parent runs RUNS times; each is forked with
its slow node's output edited (`run --fork RUN --set slow.value=…`), which reuses the slow
node. Prints each side's median wall time, their ratio and the machine's load.

    cargo build -p agentloom   (or --release: the newer of the two builds is used)
    python3 scripts/bench-fork.py [RUNS] [DELAY_MS]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def binary():
    """The newer of the release and debug builds."""
    found = [
        os.path.join(ROOT, "target", profile, "agentloom") for profile in ("release", "debug")
    ]
    found = [path for path in found if os.path.exists(path)]
    if not found:
        sys.exit("build agentloom first: cargo build -p agentloom")
    return max(found, key=os.path.getmtime)


def graph(delay_ms):
    return {
        "format": "agentloom.graph",
        "version": 1,
        "name": "fork-bench",
        "nodes": [
            {"id": "n", "block": "data.constant", "position": [0, 0],
             "config": {"value": 2, "type": "number"}},
            {"id": "slow", "block": "control.delay", "position": [200, 0],
             "config": {"ms": delay_ms}},
            {"id": "t", "block": "text.template", "position": [400, 0],
             "config": {"template": "{{ value }} apples"}},
            {"id": "out", "block": "graph.output", "position": [600, 0],
             "config": {"name": "result"}},
        ],
        "edges": [
            {"from": ["n", "value"], "to": ["slow", "value"]},
            {"from": ["slow", "value"], "to": ["t", "value"]},
            {"from": ["t", "text"], "to": ["out", "value"]},
        ],
    }


def timed(args):
    started = time.perf_counter()
    done = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, check=True)
    return time.perf_counter() - started, json.loads(done.stdout)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    delay_ms = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    agentloom = binary()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "fork-bench.json")
        with open(path, "w") as file:
            json.dump(graph(delay_ms), file)
        db = os.path.join(folder, "runs.sqlite3")
        base = [agentloom, "run", path, "--db", db, "--trust", "--json"]
        parents, forks = [], []
        for index in range(runs):
            took, report = timed(base)
            parents.append(took)
            took, forked = timed(base + ["--fork", report["run_id"], "--set", f"slow.value={index}"])
            assert forked["outputs"]["result"] == f"{index} apples", forked
            forks.append(took)
    parent = statistics.median(parents)
    fork = statistics.median(forks)
    print(f"binary {agentloom}; {runs} runs each; slow node {delay_ms} ms")
    print(f"parent run  median {parent * 1e3:8.1f} ms")
    print(f"fork        median {fork * 1e3:8.1f} ms")
    print(f"fork / parent      {fork / parent:8.3f}")
    print("load average       " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
