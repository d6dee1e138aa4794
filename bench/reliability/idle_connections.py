"""`/health` latency while many connections sit idle or trickle a request head.

Starts our binary, opens `--idle` connections that send nothing and `--slow`
that send a request head a byte at a time and never finish it, then times
`--probes` `GET /health` requests, each on a fresh connection as a health
probe makes them. Prints p50, p99 and max. The issue's figure: p99 <= 5 ms
with 1,000 such connections.

    python bench/reliability/idle_connections.py --ours target/release/agent-sandbox-server [--idle 900 --slow 100]

Loopback only; bounded in count and time.
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from common import HOST, Server  # noqa: E402


def probe(port: int) -> float:
    started = time.perf_counter()
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"probe answered {answer[:80]!r}")
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", required=True)
    parser.add_argument("--idle", type=int, default=900)
    parser.add_argument("--slow", type=int, default=100)
    parser.add_argument("--probes", type=int, default=2000)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 8192)), hard))
    with Server.start("ours", args.ours) as server:
        idle = [socket.create_connection((HOST, server.port)) for _ in range(args.idle)]
        slow = [socket.create_connection((HOST, server.port)) for _ in range(args.slow)]
        for s in slow:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        latencies = []
        for i in range(args.probes):
            if i % 100 == 0:
                for s in slow:
                    s.sendall(b"X")
            latencies.append(probe(server.port))
        latencies.sort()
        p50 = statistics.median(latencies)
        p99 = latencies[len(latencies) * 99 // 100]
        print(
            f"/health over a fresh connection, with {args.idle} idle and {args.slow} slowloris connections "
            f"open: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {latencies[-1]:.2f} ms ({args.probes} probes)"
        )
        for s in idle + slow:
            s.close()


if __name__ == "__main__":
    main()
