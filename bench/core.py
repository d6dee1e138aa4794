"""Core rows: cold start to the first `/health` 200, idle RSS, `/health`
requests/s and p99, authenticated `GET /files/stat` requests/s, and
`/files/stat` against `/health` in the same run (wrk, 2 threads, 64
connections, keep-alive, back to back on one server, several rounds: the
ratio is steadier than either rate on a loaded machine) with its p99.

Usage: python bench/core.py --ours BIN --ref BIN   (prints markdown rows)
"""

from __future__ import annotations

import statistics
import time
from urllib.parse import quote

from common import TOKEN, Server, alternate, http_get, parse_args, row, wrk

COLD_STARTS = 9
WRK_SECONDS = 5
WRK_ROUNDS = 2
CONNECTIONS = 16
RATIO_SECONDS = 4
RATIO_ROUNDS = 3
RATIO_CONNECTIONS = 64


def cold_start_ms(server: Server) -> float:
    return server.ready_after * 1000


def idle_rss_mib(server: Server) -> float:
    # One request so lazily built state exists, then a moment of quiet.
    http_get(server.port, "/health")
    time.sleep(1.0)
    return server.rss_bytes() / 2**20


def main() -> None:
    args = parse_args(__doc__)

    ours, ref = alternate(args, cold_start_ms, rounds=COLD_STARTS)
    print(row("cold start to first /health 200", ours, ref, "ms", better="lower", note=f"median of {COLD_STARTS}"))

    ours, ref = alternate(args, idle_rss_mib, rounds=3)
    print(row("idle RSS", ours, ref, "MiB", better="lower"), flush=True)

    health: dict[str, list] = {}

    def health_wrk(server: Server) -> float:
        result = wrk(f"{server.url}/health", seconds=WRK_SECONDS, connections=CONNECTIONS)
        health.setdefault(server.name, []).append(result)
        return result.requests_per_second

    ours, ref = alternate(args, health_wrk, rounds=WRK_ROUNDS, fresh=False)
    note = f"wrk, {CONNECTIONS} connections, median of {WRK_ROUNDS} x {WRK_SECONDS} s{errors_note(health)}"
    print(row("GET /health throughput", ours, ref, "req/s", better="higher", note=note))
    p99 = {name: statistics.median(r.p99_ms for r in runs) for name, runs in health.items()}
    print(row("GET /health p99 latency", p99["ours"], p99["reference"], "ms", better="lower"), flush=True)

    stat: dict[str, list] = {}
    unavailable: dict[str, str] = {}

    def stat_wrk(server: Server) -> float | None:
        path = server.base / "stat-me.txt"
        path.write_text("hello\n")
        url = f"/files/stat?path={quote(str(path))}"
        status, body = http_get(server.port, url, token=TOKEN)
        if status != 200:  # ours answers 501 until the files endpoints land
            unavailable[server.name] = f"{server.name} answers {status}"
            return None
        result = wrk(server.url + url, seconds=WRK_SECONDS, connections=CONNECTIONS, headers={"Authorization": f"Bearer {TOKEN}"})
        stat.setdefault(server.name, []).append(result)
        return result.requests_per_second

    ours, ref = alternate(args, stat_wrk, rounds=WRK_ROUNDS, fresh=False)
    why = "".join(f"; {reason}" for reason in sorted(set(unavailable.values())))
    note = f"authenticated, wrk, {CONNECTIONS} connections{errors_note(stat)}{why}"
    print(row("GET /files/stat throughput", ours, ref, "req/s", better="higher", note=note), flush=True)

    same_run: dict[str, list[tuple[float, float]]] = {}

    def stat_over_health(server: Server) -> float | None:
        path = server.base / "stat-me.txt"
        path.write_text("hello\n")
        url = f"/files/stat?path={quote(str(path))}"
        if http_get(server.port, url, token=TOKEN)[0] != 200:
            return None
        health = wrk(f"{server.url}/health", seconds=RATIO_SECONDS, connections=RATIO_CONNECTIONS)
        stat = wrk(
            server.url + url, seconds=RATIO_SECONDS, connections=RATIO_CONNECTIONS, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        same_run.setdefault(server.name, []).append((stat.requests_per_second / health.requests_per_second, stat.p99_ms))
        return stat.requests_per_second / health.requests_per_second

    ours, ref = alternate(args, stat_over_health, rounds=RATIO_ROUNDS, fresh=False)
    note = f"same run, wrk 2 threads, {RATIO_CONNECTIONS} connections, median of {RATIO_ROUNDS} x {RATIO_SECONDS} s each"
    print(row("GET /files/stat over GET /health throughput", ours, ref, "x", better="higher", note=note))
    p99 = {name: statistics.median(p for _, p in runs) for name, runs in same_run.items()}
    print(row("GET /files/stat p99 latency, 64 connections", p99.get("ours"), p99.get("reference"), "ms", better="lower"))


def errors_note(results: dict) -> str:
    """Mentions failed requests (connection resets, non-2xx) per server."""
    parts = []
    for name, runs in sorted(results.items()):
        total = sum(r.requests for r in runs)
        errors = sum(r.errors for r in runs)
        if errors:
            parts.append(f"{name}: {errors:,} of {total:,} failed")
    return "; " + "; ".join(parts) if parts else ""


if __name__ == "__main__":
    main()
