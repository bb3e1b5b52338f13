#!/usr/bin/env python3
"""Load on `agentloom serve`: clients that each create an Agent Protocol task and run its
step, again and again, for a while. Prints pairs/s (task + step) and the median, 99th
percentile and slowest pair, with the machine's load beside them.

    cargo build --release -p agentloom
    python3 scripts/bench-serve.py [--clients 8] [--seconds 20] [--binary PATH]
    python3 scripts/bench-serve.py --url http://127.0.0.1:1880   # a server already running

Without --url it starts `agentloom serve` on a free port of 127.0.0.1 with a two-node graph
(the task's input to its output), its run log and task folders in a temporary directory.
Standard library only. Not part of the test run: the figures depend on the machine.
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def agentloom_binary(given):
    for candidate in [given, os.environ.get("AGENTLOOM_BIN"), ROOT / "target/release/agentloom"]:
        if candidate and Path(candidate).is_file():
            return str(candidate)
    sys.exit("no agentloom binary: cargo build --release -p agentloom (or give --binary)")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def echo_graph(path):
    path.write_text(json.dumps({
        "format": "agentloom.graph", "version": 1, "name": "echo",
        "nodes": [
            {"id": "in", "block": "graph.input", "config": {"name": "input", "default": ""}},
            {"id": "out", "block": "graph.output", "config": {"name": "output"}},
        ],
        "edges": [{"from": ["in", "value"], "to": ["out", "value"]}],
    }))
    return path


def wait_listening(port, proc):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit("agentloom serve exited before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"agentloom serve did not listen on {port}")


def post(conn, path, body):
    data = json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    payload = response.read()
    if response.status != 200:
        raise RuntimeError(f"POST {path}: {response.status} {payload[:200]!r}")
    return json.loads(payload)


def client(host, port, until, latencies, errors):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    n = 0
    while time.monotonic() < until:
        started = time.perf_counter()
        try:
            task = post(conn, "/ap/v1/agent/tasks", {"input": f"hello {n}"})
            step = post(conn, f"/ap/v1/agent/tasks/{task['task_id']}/steps", {})
            if not step.get("is_last"):
                raise RuntimeError(f"the step is not the last: {step}")
        except Exception as err:  # noqa: BLE001 - counted and shown, the load goes on
            errors.append(str(err))
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=30)
            continue
        latencies.append(time.perf_counter() - started)
        n += 1
    conn.close()


def percentile(sorted_values, p):
    index = min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[index]


def load(host, port, clients, seconds, warmup):
    # A short warm-up first, not counted.
    if warmup > 0:
        client(host, port, time.monotonic() + warmup, [], [])
    latencies, errors = [], []
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=client, args=(host, port, until, latencies, errors))
               for _ in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - started
    return latencies, errors, took


def report(label, latencies, errors, took, clients):
    load_avg = os.getloadavg()
    if not latencies:
        print(f"{label}: no pair completed ({len(errors)} errors: {errors[:1]})")
        return None
    values = sorted(latencies)
    result = {
        "pairs_per_s": len(values) / took,
        "p50_ms": percentile(values, 50) * 1e3,
        "p99_ms": percentile(values, 99) * 1e3,
        "max_ms": values[-1] * 1e3,
        "pairs": len(values),
        "errors": len(errors),
    }
    print(
        f"{label}: {clients} clients, {took:.1f} s: {result['pairs_per_s']:.0f} pairs/s, "
        f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms "
        f"(p99/p50 {result['p99_ms'] / result['p50_ms']:.1f}), slowest {result['max_ms']:.1f} ms, "
        f"{result['pairs']} pairs, {result['errors']} errors; "
        f"load {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}"
    )
    if errors:
        print(f"  first error: {errors[0]}")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=1, help="seconds of load not counted")
    parser.add_argument("--binary", help="the agentloom binary (default: AGENTLOOM_BIN, target/release)")
    parser.add_argument("--url", help="a server already running (http://127.0.0.1:PORT)")
    parser.add_argument("--label", default=None)
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()

    if args.url:
        address = args.url.split("://", 1)[-1].rstrip("/")
        host, _, port = address.partition(":")
        if host not in ("127.0.0.1", "localhost", "[::1]"):
            sys.exit("--url: loopback only (127.0.0.1, localhost or [::1])")
        latencies, errors, took = load(host, int(port or 80), args.clients, args.seconds, args.warmup)
        result = report(args.label or args.url, latencies, errors, took, args.clients)
    else:
        binary = agentloom_binary(args.binary)
        with tempfile.TemporaryDirectory(prefix="agentloom-bench-serve-") as work:
            work = Path(work)
            graph = echo_graph(work / "echo.agentloom.json")
            port = free_port()
            env = {k: v for k, v in os.environ.items() if k != "AGENTLOOM_LOG"}
            server = subprocess.Popen(
                [binary, "serve", str(graph), "--trust", "--port", str(port),
                 "--db", str(work / "runs.sqlite3"), "--tasks-dir", str(work / "tasks"),
                 "--workspace", str(work)],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=open(work / "serve.log", "w"))
            try:
                wait_listening(port, server)
                latencies, errors, took = load("127.0.0.1", port, args.clients, args.seconds, args.warmup)
                result = report(args.label or "agentloom serve", latencies, errors, took, args.clients)
            finally:
                server.terminate()
                try:
                    server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
    if args.json and result:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
