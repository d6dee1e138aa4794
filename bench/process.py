#!/usr/bin/env python3
"""Process rows: `/shell true` latency next to a bare spawn, 200 background
processes started, listed and killed, and 50 concurrent 1,000-line streams.

Usage: python bench/process.py --ours BIN --ref BIN   (prints markdown rows;
bench/ must be on PYTHONPATH, as bench/run sets it)

- `/shell` running `true` over one keep-alive connection (the reference
  answers HTTP/1.0 and closes; the client reconnects inside the timing), p50
  and p99, next to a bare spawn-and-wait of `true` from this script
  (`os.posix_spawn` + `waitpid`) and Python's run-and-capture idiom
  (`subprocess.run`, what the reference does). The `/shell` client is a lean
  one (the request encoded once and sent in one write, the response parsed
  just enough to read it whole), so the row measures the server rather than
  `http.client`'s header parsing (about 0.1-0.2 ms a request here, shown in
  its own row). All four are warmed up alike, take the same number of
  samples, and run interleaved in a shuffled order each round, so all see
  the same load and none always runs right after another's leftovers.
- 200 background `sleep` processes started, listed and killed, in two rounds
  of 100 (both servers refuse more than 100 live ones by default), counting
  failures and processes left running (found with `pgrep -f` and a marker).
- 50 concurrent `/shell/stream` runs of `seq 1 1000`, counting every line and
  exit event delivered and every failed connection.

Standard library only. Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import threading
import time

from common import HOST, TOKEN, Server, parse_args, read_head, row

HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
REQUESTS = 500
WARMUP = 20


def request(port: int, method: str, path: str, body: dict | None = None, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection(HOST, port, timeout=60)
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


def encode(method: str, path: str, body: dict) -> bytes:
    """One HTTP/1.1 request with a JSON body, as the bytes sent on the wire."""
    data = json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
    head += f"Content-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


class KeepAlive:
    """A minimal HTTP/1.1 client on one connection: sends a pre-encoded
    request in one write and reads the response by its Content-Length.
    A server that closes after answering (HTTP/1.0, `Connection: close`) is
    reconnected on the next request, inside that request's timing."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None

    def request(self, raw: bytes) -> tuple[int, bytes]:
        if self.sock is None:
            self.sock = socket.create_connection((HOST, self.port), timeout=60)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = self.sock
        sock.sendall(raw)
        version, status, fields, body = read_head(sock)
        length = int(fields.get("content-length", "-1"))
        while length < 0 or len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        keep = fields.get("connection", "").lower()
        if keep == "close" or (version == "HTTP/1.0" and keep != "keep-alive") or length < 0:
            sock.close()
            self.sock = None
        return status, body

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def spawn_and_wait(program: str) -> None:
    """The bare spawn-and-wait: `os.posix_spawn` and `waitpid`, nothing else."""
    pid = os.posix_spawn(program, [program], os.environ)
    os.waitpid(pid, 0)


def run_and_capture() -> None:
    """Python's idiom for running a command and capturing its output (what the reference does)."""
    subprocess.run(["true"], capture_output=True, check=False)


def shell_true(server: Server, n: int) -> tuple[dict[str, list[float]], int]:
    """`/shell true` (lean client and http.client), the bare spawn and the
    idiom, each warmed up and then timed `n` times in a shuffled order per
    round. Returns the samples by name and the failed requests."""
    true = shutil.which("true") or "/bin/true"
    client = KeepAlive(server.port)
    conn = http.client.HTTPConnection(HOST, server.port, timeout=60)
    raw = encode("POST", "/shell", {"command": "true"})
    outcomes: list[tuple[int, bytes]] = []

    def lean() -> None:
        outcomes.append(client.request(raw))

    def stdlib() -> None:
        conn.request("POST", "/shell", body=json.dumps({"command": "true"}), headers=HEADERS)
        response = conn.getresponse()
        outcomes.append((response.status, response.read()))

    measures = {"shell": lean, "shell_http_client": stdlib, "bare": lambda: spawn_and_wait(true), "idiom": run_and_capture}
    for _ in range(WARMUP):
        for measure in measures.values():
            measure()
    outcomes.clear()
    samples: dict[str, list[float]] = {name: [] for name in measures}
    order = list(measures)
    shuffle = random.Random(0).shuffle
    for _ in range(n):
        shuffle(order)
        for name in order:
            started = time.perf_counter()
            measures[name]()
            samples[name].append(time.perf_counter() - started)
    client.close()
    conn.close()
    failures = sum(status != 200 or json.loads(body).get("exit_code") != 0 for status, body in outcomes)
    return samples, failures


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
    conn = http.client.HTTPConnection(HOST, server.port, timeout=60)
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
        conn = http.client.HTTPConnection(HOST, port, timeout=120)
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


def main() -> None:
    args = parse_args(__doc__)
    measured = {}
    for name, binary in (("ours", args.ours), ("reference", args.ref)):
        with Server.start(name, binary) as server:
            samples, shell_failures = shell_true(server, REQUESTS)
            measured[name] = {
                "p50": statistics.median(samples["shell"]) * 1000,
                "p99": percentile(samples["shell"], 0.99) * 1000,
                "p50_http_client": statistics.median(samples["shell_http_client"]) * 1000,
                "bare": statistics.median(samples["bare"]) * 1000,
                "idiom": statistics.median(samples["idiom"]) * 1000,
                "shell_failures": shell_failures,
                "background": background(server),
                "streams": streams(server),
            }
    o, r = measured["ours"], measured["reference"]
    note = f"{REQUESTS} requests each way, failures {o['shell_failures']} / {r['shell_failures']}"
    print(row("`/shell` running `true`, keep-alive, p50", o["p50"], r["p50"], "ms", better="lower", note=note))
    print(row("`/shell` running `true`, keep-alive, p99", o["p99"], r["p99"], "ms", better="lower"))
    stdlib_note = "the same requests through Python's http.client"
    print(row("`/shell` running `true`, keep-alive, p50", o["p50_http_client"], r["p50_http_client"], "ms", better="lower", note=stdlib_note))
    bare_note = "os.posix_spawn + waitpid from this script"
    print(row("bare spawn-and-wait of `true`, p50, same run", o["bare"], r["bare"], "ms", better="lower", note=bare_note))
    o_ratio, r_ratio = o["p50"] / o["bare"], r["p50"] / r["bare"]
    print(row("`/shell true` p50 ÷ bare spawn-and-wait p50", o_ratio, r_ratio, "x", better="lower"))
    o_ratio, r_ratio = o["p50_http_client"] / o["bare"], r["p50_http_client"] / r["bare"]
    print(row("`/shell true` p50 through http.client ÷ bare spawn-and-wait p50", o_ratio, r_ratio, "x", better="lower"))
    idiom_note = "subprocess.run(capture_output=True) from this script"
    print(row("Python's run-and-capture of `true`, p50, same run", o["idiom"], r["idiom"], "ms", better="lower", note=idiom_note))
    o_ratio, r_ratio = o["p50"] / o["idiom"], r["p50"] / r["idiom"]
    print(row("`/shell true` p50 ÷ run-and-capture p50", o_ratio, r_ratio, "x", better="lower"))
    (ot, of, ol), (rt, rf, rl) = o["background"], r["background"]
    note = f"failures {of} / {rf}, left running {ol} / {rl}"
    print(row("200 background `sleep`: start, list, kill", ot * 1000, rt * 1000, "ms", better="lower", note=note))
    (ot, olines, oexits, ofail), (rt, rlines, rexits, rfail) = o["streams"], r["streams"]
    note = (
        f"delivered {olines}/50000 lines, {oexits}/50 exits, {ofail} failed connections"
        f" / {rlines}/50000, {rexits}/50, {rfail}"
    )
    print(row("50 concurrent `/shell/stream` × 1,000 lines", ot * 1000, rt * 1000, "ms", better="lower", note=note))


if __name__ == "__main__":
    main()
