#!/usr/bin/env python3
"""Runs through NATS JetStream: throughput of a batch of delay-bound runs with 1, 2 and 3
workers, and the per-run overhead of `submit --wait` against a local `agentloom run`,
measured in the same run. Needs `nats-server` on PATH and a built `agentloom`.

    cargo build --release -p agentloom
    python3 scripts/bench-nats.py [--runs 200] [--delay-ms 100] [--concurrency 8] [--overhead-runs 20]

Not part of the test run: run it on a quiet machine.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def agentloom_binary(given):
    for candidate in [given, ROOT / "target/release/agentloom", ROOT / "target/debug/agentloom"]:
        if candidate and Path(candidate).is_file():
            return str(candidate)
    sys.exit("no agentloom binary: cargo build --release -p agentloom")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port, proc, what):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port}")


def graph(path, delay_ms):
    path.write_text(json.dumps({
        "format": "agentloom.graph", "version": 1, "name": "bench delay",
        "nodes": [
            {"id": "text", "block": "graph.input", "config": {"name": "text", "default": "x"}},
            {"id": "slow", "block": "control.delay", "config": {"ms": delay_ms}},
            {"id": "out", "block": "graph.output", "config": {"name": "echo"}},
        ],
        "edges": [
            {"from": ["text", "value"], "to": ["slow", "value"]},
            {"from": ["slow", "value"], "to": ["out", "value"]},
        ],
    }))
    return path


class Bench:
    def __init__(self, binary, work):
        self.binary = binary
        self.work = work
        self.env = {k: v for k, v in os.environ.items() if k not in ("AGENTLOOM_LOG", "AGENTLOOM_NATS")}
        port = free_port()
        self.url = f"nats://127.0.0.1:{port}"
        log = open(work / "nats.log", "w")
        self.server = subprocess.Popen(
            ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(work / "store")],
            stdout=subprocess.DEVNULL, stderr=log)
        wait_listening(port, self.server, "nats-server")

    def worker(self, name, concurrency):
        home = self.work / name
        home.mkdir(exist_ok=True)
        env = dict(self.env, HOME=str(home), XDG_DATA_HOME=str(home / "data"))
        log = open(home / "worker.log", "w")
        proc = subprocess.Popen(
            [self.binary, "worker", "--nats", self.url, "--name", name, "--db", str(home / "runs.sqlite3"),
             "--workspace", str(home), "--concurrency", str(concurrency)],
            env=env, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 30
        while "takes runs from" not in (home / "worker.log").read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"worker {name} did not start:\n{(home / 'worker.log').read_text()}")
            time.sleep(0.05)
        return proc, home / "runs.sqlite3"

    def run(self, *args, check=True):
        done = subprocess.run([self.binary, *args], env=self.env, capture_output=True, text=True)
        if check and done.returncode != 0:
            sys.exit(f"agentloom {' '.join(args)} failed:\n{done.stderr}")
        return done

    def completed_runs(self, db):
        if not db.exists():
            return []
        done = self.run("runs", "--json", "--limit", "100000", "--db", str(db), check=False)
        try:
            return [run for run in json.loads(done.stdout) if run["status"] == "completed"]
        except (ValueError, KeyError):
            return []

    def completed(self, db):
        return len(self.completed_runs(db))


def throughput(bench, graph_file, runs, workers, concurrency, round_name):
    # Queue the whole batch first, then start the workers. The time is the span of the runs
    # in the workers' own logs, first start to last finish: neither submitting nor
    # starting the worker processes counts.
    for i in range(runs):
        bench.run("submit", str(graph_file), "--nats", bench.url, "--input", f"text={round_name}-{i}")
    procs = [bench.worker(f"{round_name}-w{n + 1}", concurrency) for n in range(workers)]
    while sum(bench.completed(db) for _, db in procs) < runs:
        time.sleep(0.1)
    done = [bench.completed_runs(db) for _, db in procs]
    every = [run for runs_of_one in done for run in runs_of_one]
    first = min(run["started_at_ms"] for run in every)
    last = max(run["finished_at_ms"] for run in every)
    elapsed = (last - first) / 1000
    per_worker = [len(runs_of_one) for runs_of_one in done]
    for proc, _ in procs:
        proc.kill()
        proc.wait()
    return elapsed, per_worker


def overhead(bench, graph_file, runs):
    local_db = bench.work / "local.sqlite3"
    local = []
    for _ in range(runs):
        started = time.monotonic()
        bench.run("run", str(graph_file), "--json", "--db", str(local_db), "--workspace", str(bench.work))
        local.append(time.monotonic() - started)
    proc, _ = bench.worker("overhead-w", 1)
    remote = []
    for _ in range(runs):
        started = time.monotonic()
        bench.run("submit", str(graph_file), "--nats", bench.url, "--wait", "--json",
                  "--db", str(bench.work / "submitter.sqlite3"))
        remote.append(time.monotonic() - started)
    proc.kill()
    proc.wait()
    return local, remote


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--delay-ms", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8, help="runs at once per worker")
    parser.add_argument("--overhead-runs", type=int, default=20)
    parser.add_argument("--workers", default="1,2,3")
    parser.add_argument("--binary")
    args = parser.parse_args()
    if not shutil.which("nats-server"):
        sys.exit("nats-server is not installed: apt-get install nats-server")
    binary = agentloom_binary(args.binary)
    with tempfile.TemporaryDirectory(prefix="agentloom-bench-nats-") as tmp:
        work = Path(tmp)
        bench = Bench(binary, work)
        try:
            slow = graph(work / "slow.json", args.delay_ms)
            quick = graph(work / "quick.json", 0)
            print(f"{binary}; {args.runs} runs of a {args.delay_ms} ms delay, {args.concurrency} at once per worker")
            for workers in [int(n) for n in args.workers.split(",")]:
                elapsed, per_worker = throughput(bench, slow, args.runs, workers, args.concurrency, f"r{workers}")
                ideal = args.runs * args.delay_ms / 1000 / (workers * args.concurrency)
                print(f"{workers} worker(s): {elapsed:6.2f} s, {args.runs / elapsed:7.1f} runs/s "
                      f"(delay-bound ideal {ideal:.2f} s); per worker {per_worker}")
            local, remote = overhead(bench, quick, args.overhead_runs)
            mean = lambda xs: 1000 * sum(xs) / len(xs)
            print(f"one run, process to result: local run {mean(local):.1f} ms, "
                  f"submit --wait through NATS {mean(remote):.1f} ms, "
                  f"overhead {mean(remote) - mean(local):.1f} ms ({args.overhead_runs} runs each)")
        finally:
            bench.server.kill()
            bench.server.wait()


if __name__ == "__main__":
    main()
