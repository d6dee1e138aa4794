#!/usr/bin/env python3
"""Process benchmark: our server next to the Python reference, on loopback.

    bench/process.py --ours target/release/agent-sandbox-server --ref /tmp/ref/bin/agent-sandbox-server

Starts both servers itself (fresh temporary base directories, ABX_SERVER_TOKEN
set), runs each workload against each, and prints markdown table rows:

    | workload | ours | reference | ratio |

Workloads:
- `/shell` running `true` over one keep-alive connection (the reference
  answers HTTP/1.0 and closes; the client reconnects), p50 and p99, next to a
  bare spawn-and-wait of `true` from this script, measured in the same run.
- 200 background `sleep` processes started, listed and killed (two rounds of
  100: both servers refuse more than 100 at once by default), counting
  failures and processes left running.
- 50 concurrent `/shell/stream` runs of 1,000 lines each, counting every
  line and exit event delivered.

Standard library only. Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

TOKEN = "bench-token-2f9a"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process on loopback ports."""

    def __init__(self, name: str, binary: str) -> None:
        self.name = name
        self.dir = tempfile.mkdtemp(prefix=f"abx-bench-{name}-")
        base = os.path.join(self.dir, "base")
        os.mkdir(base)
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
        env.update({"ABX_SERVER_TOKEN": TOKEN, "ABX_SERVER_BASE_DIR": base, "RUST_LOG": "warn"})
        command = [binary, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--pty-port", str(free_port())]
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.process = subprocess.Popen(
            command, cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                status, _ = request(self.port, "GET", "/health")
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"{name} server did not start; see {self.dir}/server.log")
            time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def request(port: int, method: str, path: str, body: dict | None = None, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=HEADERS)
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None
    finally:
        if own:
            conn.close()


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bare_spawn(n: int) -> list[float]:
    true = shutil.which("true") or "/bin/true"
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        pid = os.posix_spawn(true, [true], os.environ)
        os.waitpid(pid, 0)
        samples.append(time.perf_counter() - started)
    return samples


def shell_true(server: Server, n: int) -> tuple[list[float], list[float], int]:
    """Interleaves `/shell true` with bare spawns, so both see the same machine load."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    shell, bare, failures = [], [], 0
    for _ in range(20):
        request(server.port, "POST", "/shell", {"command": "true"}, conn)
    for _ in range(n):
        started = time.perf_counter()
        status, body = request(server.port, "POST", "/shell", {"command": "true"}, conn)
        shell.append(time.perf_counter() - started)
        failures += status != 200 or body.get("exit_code") != 0
        bare.extend(bare_spawn(1))
    conn.close()
    return shell, bare, failures


def marker() -> str:
    return f"1000.{os.getpid() % 10_000_000:07d}{time.time_ns() % 1_000_000_000:09d}"


def pgrep(pattern: str) -> int:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False).stdout
    return len(out.split())


def background(server: Server, rounds: int = 2, per_round: int = 100) -> tuple[float, int, int]:
    """Starts, lists and kills `rounds * per_round` sleeps; returns (seconds, failures, left running)."""
    tag = marker()
    failures = 0
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    for _ in range(rounds):
        pids = []
        for _ in range(per_round):
            status, body = request(server.port, "POST", "/process/start", {"command": f"sleep {tag}"}, conn)
            if status == 200:
                pids.append(body["pid"])
            else:
                failures += 1
        status, body = request(server.port, "GET", "/process/list", None, conn)
        running = {p["pid"] for p in (body or {}).get("processes", []) if p.get("state") == "running"}
        failures += len(set(pids) - running)
        for pid in pids:
            status, _ = request(server.port, "POST", f"/process/{pid}/signal", {"signal": 9}, conn)
            failures += status != 200
        deadline = time.monotonic() + 10
        while pgrep(tag) and time.monotonic() < deadline:
            time.sleep(0.01)
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed, failures, pgrep(tag)


def one_stream(port: int, lines: int, result: list, index: int) -> None:
    got_lines, exits, error = 0, 0, None
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", "/shell/stream", body=json.dumps({"command": f"seq 1 {lines}"}), headers=HEADERS)
        response = conn.getresponse()
        event = None
        for raw in response:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "stdout":
                got_lines += 1
            elif line.startswith("data:") and event == "exit":
                exits += json.loads(line[5:]).get("exit_code") == 0
        conn.close()
    except Exception as exc:  # noqa: BLE001 - a reset connection is a result here
        error = type(exc).__name__
    result[index] = (got_lines, exits, error)


def streams(server: Server, clients: int = 50, lines: int = 1000) -> tuple[float, int, int, int]:
    """Returns (seconds, lines delivered, exit events delivered, failed connections)."""
    result: list = [None] * clients
    threads = [threading.Thread(target=one_stream, args=(server.port, lines, result, i)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    return (
        elapsed,
        sum(r[0] for r in result),
        sum(r[1] for r in result),
        sum(r[2] is not None for r in result),
    )


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def ratio(ours: float, ref: float) -> str:
    return f"{ours / ref:.2f}x" if ref else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", required=True, help="our agent-sandbox-server binary")
    parser.add_argument("--ref", required=True, help="the reference agent-sandbox-server")
    parser.add_argument("--requests", type=int, default=500, help="/shell true requests per server")
    args = parser.parse_args()
    rows = []
    measured = {}
    for name, binary in (("ours", args.ours), ("ref", args.ref)):
        server = Server(name, binary)
        try:
            shell, bare, shell_failures = shell_true(server, args.requests)
            measured[name] = {
                "p50": statistics.median(shell),
                "p99": percentile(shell, 0.99),
                "bare": statistics.median(bare),
                "shell_failures": shell_failures,
                "background": background(server),
                "streams": streams(server),
            }
        finally:
            server.stop()
    o, r = measured["ours"], measured["ref"]
    rows.append(("`/shell true` p50, keep-alive", ms(o["p50"]), ms(r["p50"]), ratio(o["p50"], r["p50"])))
    rows.append(("`/shell true` p99, keep-alive", ms(o["p99"]), ms(r["p99"]), ratio(o["p99"], r["p99"])))
    rows.append(("bare spawn+wait `true` p50 (same run)", ms(o["bare"]), ms(r["bare"]), "-"))
    rows.append(("`/shell true` p50 ÷ bare spawn p50", f"{o['p50'] / o['bare']:.2f}x", f"{r['p50'] / r['bare']:.2f}x", "-"))
    rows.append(("`/shell true` failures", str(o["shell_failures"]), str(r["shell_failures"]), "-"))
    (ot, of, ol), (rt, rf, rl) = o["background"], r["background"]
    rows.append(("200 background `sleep`: start + list + kill", ms(ot), ms(rt), ratio(ot, rt)))
    rows.append(("200 background `sleep`: failures / left running", f"{of} / {ol}", f"{rf} / {rl}", "-"))
    (ot, olines, oexits, ofail), (rt, rlines, rexits, rfail) = o["streams"], r["streams"]
    rows.append(("50 concurrent `/shell/stream` × 1,000 lines", ms(ot), ms(rt), ratio(ot, rt)))
    rows.append(
        (
            "50 streams: lines / exit events delivered, failed connections",
            f"{olines}/50000, {oexits}/50, {ofail}",
            f"{rlines}/50000, {rexits}/50, {rfail}",
            "-",
        )
    )
    print("| workload | ours | reference | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
