#!/usr/bin/env python3
"""Agentloom against Rivet (`@ironclad/rivet-node`) and Node-RED on the same graphs, in one
sitting: process start, a chain of no-op nodes per node, a fan-out of 100 waits of 100 ms,
and (Node-RED only) the Agent Protocol task + step pair under 8 concurrent clients. Run by
scripts/bench-peers.sh, which installs the peers first.

Each figure is the median of --runs runs (7 by default) of a whole process, with the load
average printed beside it. Per node is (t(1000 nodes) - t(10 nodes)) / 990, so process
start and loading cancel out; the fan-out is the run's own time inside each process.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent / "bench-peers"


def load():
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def agentloom_graph(path, kind, n=0, ms=0):
    nodes, edges = [{"id": "n0", "block": "data.constant", "config": {"value": 1}}], []
    if kind == "chain":
        for i in range(1, n):
            nodes.append({"id": f"n{i}", "block": "control.passthrough"})
            edges.append({"from": [f"n{i - 1}", "value"], "to": [f"n{i}", "value"]})
    elif kind == "fanout":
        for i in range(n):
            nodes.append({"id": f"d{i}", "block": "control.delay", "config": {"ms": ms}})
            edges.append({"from": ["n0", "value"], "to": [f"d{i}", "value"]})
    path.write_text(json.dumps({"format": "agentloom.graph", "version": 1, "name": kind,
                                "nodes": nodes, "edges": edges}))
    return path


def timed(command, env=None):
    """Wall time of one process (s) and its stdout."""
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    took = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, command))} failed ({done.returncode}):\n{done.stderr.decode()[-2000:]}")
    return took, done.stdout.decode()


class Tool:
    def __init__(self, name, runs):
        self.name = name
        self.runs = runs

    def median_wall(self, command):
        timed(command, self.env())  # warm-up, not counted
        return statistics.median(timed(command, self.env())[0] for _ in range(self.runs))

    def median_run_ms(self, command):
        timed(command, self.env())
        samples = []
        for _ in range(self.runs):
            _, out = timed(command, self.env())
            samples.append(self.run_ms(out))
        return statistics.median(samples)

    def env(self):
        return None

    def figures(self):
        start = self.median_wall(self.command("start"))
        line = f"{self.name}: process start {start * 1e3:.1f} ms ({load()})"
        print(line, flush=True)
        small = self.median_wall(self.command("chain", 10))
        large = self.median_wall(self.command("chain", 1000))
        per_node = (large - small) / 990 * 1e6
        print(f"{self.name}: 1,000-node chain {per_node:.1f} µs/node ({load()})", flush=True)
        fan = self.median_run_ms(self.command("fanout", 100, 100))
        print(f"{self.name}: 100 x 100 ms fan-out {fan:.1f} ms ({load()})", flush=True)
        return {"start_ms": start * 1e3, "chain_us_per_node": per_node, "fanout_ms": fan}


class Agentloom(Tool):
    def __init__(self, binary, work, runs):
        super().__init__("Agentloom", runs)
        self.binary = binary
        self.work = work
        self.db = work / "runs.sqlite3"

    def env(self):
        return {k: v for k, v in os.environ.items() if k != "AGENTLOOM_LOG"} | {"HOME": str(self.work / "home")}

    def command(self, kind, n=0, ms=0):
        graph = agentloom_graph(self.work / f"{kind}-{n}.json", "chain" if kind == "start" else kind,
                                1 if kind == "start" else n, ms)
        return [self.binary, "run", "--json", "--db", str(self.db), "--workspace", str(self.work), str(graph)]

    @staticmethod
    def run_ms(out):
        return float(json.loads(out)["duration_ms"])


class NodePeer(Tool):
    def __init__(self, name, script, peers_dir, runs):
        super().__init__(name, runs)
        self.script = script
        self.peers_dir = peers_dir

    def env(self):
        return os.environ | {"NODE_PATH": str(self.peers_dir / "node_modules")}

    def command(self, kind, n=0, ms=0):
        args = {"start": [], "chain": [str(n)], "fanout": [str(n), str(ms)]}[kind]
        # Rivet's 1,000-node chain recurses deeper than node's default stack.
        return ["node", "--stack-size=65500", str(self.script), kind, *args]

    @staticmethod
    def run_ms(out):
        return float(json.loads(out.strip().splitlines()[-1])["run_ms"])


def serve_figures(binary, peers_dir, clients, seconds):
    bench = [sys.executable, str(ROOT / "scripts/bench-serve.py"), "--clients", str(clients),
             "--seconds", str(seconds), "--json"]
    results = {}
    out = subprocess.run(bench + ["--binary", binary, "--label", "Agentloom serve"],
                         stdout=subprocess.PIPE, check=True).stdout.decode().strip().splitlines()
    print(out[0], flush=True)
    results["Agentloom"] = json.loads(out[-1])
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    red = subprocess.Popen(["node", str(HERE / "nodered.js"), "serve", str(port)],
                           env=os.environ | {"NODE_PATH": str(peers_dir / "node_modules")},
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if red.poll() is not None:
                    sys.exit(f"Node-RED exited: {red.stderr.read().decode()[-2000:]}")
                time.sleep(0.1)
        out = subprocess.run(bench + ["--url", f"http://127.0.0.1:{port}", "--label", "Node-RED http flow"],
                             stdout=subprocess.PIPE, check=True).stdout.decode().strip().splitlines()
        print(out[0], flush=True)
        results["Node-RED"] = json.loads(out[-1])
    finally:
        red.terminate()
        red.wait(timeout=10)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--binary", default=os.environ.get("AGENTLOOM_BIN", str(ROOT / "target/release/agentloom")))
    parser.add_argument("--peers-dir", default=str(ROOT / "target/bench-peers"))
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--only", choices=["agentloom", "rivet", "node-red", "serve"], action="append")
    args = parser.parse_args()
    if not Path(args.binary).is_file():
        sys.exit(f"no agentloom binary at {args.binary}: cargo build --release -p agentloom, or set AGENTLOOM_BIN")
    peers_dir = Path(args.peers_dir)
    wanted = lambda name: not args.only or name in args.only  # noqa: E731
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, {load()}; "
          f"median of {args.runs} runs each", flush=True)
    table = {}
    with tempfile.TemporaryDirectory(prefix="agentloom-bench-peers-") as work:
        work = Path(work)
        (work / "home").mkdir()
        if wanted("agentloom"):
            table["Agentloom"] = Agentloom(args.binary, work, args.runs).figures()
        if wanted("rivet"):
            table["Rivet"] = NodePeer("Rivet", HERE / "rivet.mjs", peers_dir, args.runs).figures()
        if wanted("node-red"):
            table["Node-RED"] = NodePeer("Node-RED", HERE / "nodered.js", peers_dir, args.runs).figures()
        if wanted("serve"):
            serve = serve_figures(args.binary, peers_dir, args.clients, args.seconds)
            for name, figures in serve.items():
                table.setdefault(name, {})["serve"] = figures
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
