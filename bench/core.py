"""Core rows: cold start to the first `/health` 200, idle RSS, `/health`
requests/s and p99, authenticated `GET /files/stat` requests/s, and
`/files/stat` against `/health` in the same run (wrk, 2 threads, 64
connections, keep-alive, on one server, several rounds of health, stat,
stat, health for half the round's seconds each: the ratio is steadier than
either rate on a loaded machine) with its p99 (the larger of the round's two).
`ABX_BENCH_BEFORE=BIN` adds an earlier build of ours to those same rounds
(rows marked "before"), so a change is judged against its base under the
same load; each round's figures and load average go to stderr.

Usage: python bench/core.py --ours BIN --ref BIN   (prints markdown rows)
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import quote

from common import TOKEN, Server, alternate, alternate_all, http_get, load_average, parse_args, row, wrk

COLD_STARTS = 9
WRK_SECONDS = 5
WRK_ROUNDS = 2
CONNECTIONS = 16
RATIO_SECONDS = 4
RATIO_ROUNDS = 5
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

    same_run(args)


def same_run(args) -> None:
    """`/files/stat` over `/health` on one server, back to back, and the
    stat's p99; with `ABX_BENCH_BEFORE`, the earlier build too, in the same
    rotation, so a change is judged against its base under the same load."""
    binaries = {"ours": args.ours, "reference": args.ref}
    before = os.environ.get("ABX_BENCH_BEFORE")
    if before:
        binaries["before"] = before
    runs: dict[str, list[tuple[float, float]]] = {}
    loads: list[float] = []

    def stat_over_health(server: Server) -> float | None:
        path = server.base / "stat-me.txt"
        path.write_text("hello\n")
        url = f"/files/stat?path={quote(str(path))}"
        if http_get(server.port, url, token=TOKEN)[0] != 200:
            return None
        load = load_average()
        half = RATIO_SECONDS // 2

        def health() -> float:
            return wrk(f"{server.url}/health", seconds=half, connections=RATIO_CONNECTIONS).requests_per_second

        def stat():
            headers = {"Authorization": f"Bearer {TOKEN}"}
            return wrk(server.url + url, seconds=half, connections=RATIO_CONNECTIONS, headers=headers)

        # Health, stat, stat, health: a change of the machine's pace during
        # the round weighs on both rates alike.
        first = health()
        stats = (stat(), stat())
        health_rps = (first + health()) / 2
        stat_rps = sum(s.requests_per_second for s in stats) / 2
        stat_p99 = max(s.p99_ms for s in stats)
        ratio = stat_rps / health_rps
        loads.append(load)
        runs.setdefault(server.name, []).append((ratio, stat_p99))
        print(
            f"{server.name}: /health {health_rps:,.0f} req/s, /files/stat {stat_rps:,.0f} req/s, "
            f"ratio {ratio:.2f}, stat p99 {stat_p99:.2f} ms, load average {load:.2f}",
            file=sys.stderr,
            flush=True,
        )
        return ratio

    alternate_all(binaries, stat_over_health, rounds=RATIO_ROUNDS, fresh=False)
    ratio = {name: statistics.median(r for r, _ in results) for name, results in runs.items()}
    p99 = {name: statistics.median(p for _, p in results) for name, results in runs.items()}
    load = f"load average {min(loads):.1f} to {max(loads):.1f}" if loads else "no round ran"
    note = (
        f"same run, wrk 2 threads, {RATIO_CONNECTIONS} connections, median of {RATIO_ROUNDS} rounds of "
        f"health, stat, stat, health ({RATIO_SECONDS // 2} s each), {load}"
    )
    label = "GET /files/stat over GET /health throughput"
    print(row(label, ratio.get("ours"), ratio.get("reference"), "x", better="higher", note=note))
    if before:
        note = f"the same rounds, before: {Path(before).name}"
        print(row(f"{label}, before", ratio.get("before"), ratio.get("reference"), "x", better="higher", note=note))
    label = f"GET /files/stat p99 latency, {RATIO_CONNECTIONS} connections"
    print(row(label, p99.get("ours"), p99.get("reference"), "ms", better="lower"))
    if before:
        print(row(f"{label}, before", p99.get("before"), p99.get("reference"), "ms", better="lower"), flush=True)


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
