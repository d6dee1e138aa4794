#!/usr/bin/env python3
"""Vault rows: storing a credential (`POST /v1/vaults/{id}/credentials`) and
listing a vault of 100 credentials (`GET .../credentials?limit=100`), p50
and p99 over one keep-alive connection; and, ours only (the reference keeps
vaults in memory and loses them), the time from spawn to the first answer
of `GET /v1/vaults` after a restart with 100 vaults of 10 credentials each
journaled (the runtime starts on that call and loads the journal).

Usage: python bench/vaults.py --ours BIN --ref BIN   (prints markdown rows;
bench/ must be on PYTHONPATH, as bench/run sets it)

200 samples of each after 10 warm-up calls. Not a test: numbers depend on
the machine.
"""

from __future__ import annotations

import http.client
import json
import sys
import tempfile
import time
from pathlib import Path

from common import HOST, TOKEN, Server, parse_args, row

SAMPLES = 200
WARMUP = 10
AUTH = {"type": "static_bearer", "token": "bench-secret-0123456789", "mcp_server_url": "https://mcp.example.com/mcp"}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Client:
    """One keep-alive connection with the token."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection(HOST, port, timeout=30)
        self.headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=self.headers)
        response = self.conn.getresponse()
        return response.status, json.loads(response.read() or b"null")

    def timed(self, method: str, path: str, body: dict | None = None) -> float:
        started = time.perf_counter()
        status, _ = self.call(method, path, body)
        elapsed = (time.perf_counter() - started) * 1000
        assert status == 200, (method, path, status)
        return elapsed

    def close(self) -> None:
        self.conn.close()


def measure(name: str, binary: str, work: Path) -> dict[str, float]:
    env = {"ABX_SERVER_ENABLED_GROUPS": "agents", "ABX_AGENTS_STATE_DIR": str(work / "state")}
    out: dict[str, float] = {}
    with Server.start(name, binary, env=env) as server:
        client = Client(server.port)
        vault = client.call("POST", "/v1/vaults", {"name": "bench"})[1]["id"]
        path = f"/v1/vaults/{vault}/credentials"
        creates = [client.timed("POST", path, {"name": f"c{n}", "auth": AUTH}) for n in range(WARMUP + SAMPLES)]
        out["create50"], out["create99"] = percentile(creates[WARMUP:], 50), percentile(creates[WARMUP:], 99)
        lists = [client.timed("GET", f"{path}?limit=100") for _ in range(WARMUP + SAMPLES)]
        out["list50"], out["list99"] = percentile(lists[WARMUP:], 50), percentile(lists[WARMUP:], 99)
        client.close()
    if name != "ours":
        return out
    state = work / "restart"
    env["ABX_AGENTS_STATE_DIR"] = str(state)
    with Server.start(name, binary, env=env) as server:
        client = Client(server.port)
        for v in range(100):
            vid = client.call("POST", "/v1/vaults", {"name": f"v{v}"})[1]["id"]
            for c in range(10):
                client.call("POST", f"/v1/vaults/{vid}/credentials", {"name": f"c{c}", "auth": AUTH})
        client.close()
    started = time.perf_counter()
    with Server.start(name, binary, env=env) as server:
        client = Client(server.port)
        status, listed = client.call("GET", "/v1/vaults?limit=100")
        out["restart"] = (time.perf_counter() - started) * 1000
        assert status == 200 and len(listed["data"]) == 100, status
        client.close()
    return out


def main() -> None:
    args = parse_args(__doc__)
    results = {}
    for name, binary in (("ours", args.ours), ("reference", args.ref)):
        with tempfile.TemporaryDirectory(prefix=f"bench-vaults-{name}-") as tmp:
            try:
                results[name] = measure(name, binary, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - a side that cannot run is reported, not fatal
                print(f"vaults: {name} failed: {exc}", file=sys.stderr)
                results[name] = {}
    ours, ref = results["ours"], results["reference"]
    print(row("POST /v1/vaults/{id}/credentials, p50", ours.get("create50"), ref.get("create50"), "ms", better="lower"))
    print(row("POST /v1/vaults/{id}/credentials, p99", ours.get("create99"), ref.get("create99"), "ms", better="lower"))
    print(row("GET a vault's 100 credentials, p50", ours.get("list50"), ref.get("list50"), "ms", better="lower"))
    print(row("GET a vault's 100 credentials, p99", ours.get("list99"), ref.get("list99"), "ms", better="lower"))
    print(row("spawn to the first GET /v1/vaults after a restart, 100 vaults x 10 credentials journaled",
              ours.get("restart"), None, "ms", better="lower", note="the reference loses vaults at restart"))


if __name__ == "__main__":
    main()
