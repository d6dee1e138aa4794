"""MCP rows: a `read` tool call round trip and a `run` of `true` over `/mcp`
(one session, one keep-alive connection, streamable HTTP), p50 and p99,
against the same call over our plain HTTP API (`GET /files/content`,
`POST /shell`) on the same server. The reference has no MCP endpoint: in
these rows the "reference" column is our own HTTP API, and the ratio says
how many times slower MCP is (target: within 1.5x).

Usage: python bench/mcp.py --ours BIN --ref BIN   (prints markdown rows; --ref is unused)
"""

from __future__ import annotations

import http.client
import json
import statistics
import time
from urllib.parse import quote

from common import HOST, TOKEN, Server, parse_args

CALLS = 400
WARMUP = 40


class Connection:
    """One keep-alive connection with the server's token."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection(HOST, port, timeout=30)
        self.headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def request(self, method: str, path: str, body: dict | None = None, headers: dict | None = None):
        payload = json.dumps(body) if body is not None else None
        self.conn.request(method, path, body=payload, headers={**self.headers, **(headers or {})})
        response = self.conn.getresponse()
        data = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
        return response, data


class McpSession:
    """An MCP session over plain HTTP (JSON-RPC, answers read from the SSE body)."""

    def __init__(self, port: int) -> None:
        self.http = Connection(port)
        self.extra = {"Accept": "application/json, text/event-stream"}
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}
        response, _ = self.http.request("POST", "/mcp", init, self.extra)
        self.extra["mcp-session-id"] = response.getheader("mcp-session-id")
        self.extra["mcp-protocol-version"] = "2025-06-18"
        self.http.request("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, self.extra)
        self.next_id = 1

    def call(self, tool: str, arguments: dict) -> dict:
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                   "params": {"name": tool, "arguments": arguments}}
        _, data = self.http.request("POST", "/mcp", message, self.extra)
        for line in data.decode().splitlines():
            if line.startswith("data:") and line[5:].strip():
                answer = json.loads(line[5:])
                if answer.get("id") == self.next_id:
                    if answer["result"].get("isError"):
                        raise RuntimeError(f"{tool}: {answer}")
                    return answer["result"]
        raise RuntimeError(f"{tool}: no answer in {data[:200]!r}")


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def timed(call, count: int = CALLS) -> list[float]:
    for _ in range(WARMUP):
        call()
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def rows(name: str, mcp: list[float], plain: list[float]) -> None:
    (m50, m99), (h50, h99) = percentiles(mcp), percentiles(plain)
    for label, ours, ref in ((f"{name} p50", m50, h50), (f"{name} p99", m99, h99)):
        note = f"MCP vs our HTTP API, {CALLS} sequential calls"
        print(f"| {label} ({note}) | {ours:.3f} ms | {ref:.3f} ms | {ours / ref:.2f}x slower |", flush=True)


def main() -> None:
    args = parse_args(__doc__)
    server = Server.start("ours", args.ours)
    try:
        path = server.base / "read-me.txt"
        path.write_text("line\n" * 200)
        mcp = McpSession(server.port)
        plain = Connection(server.port)
        # Alternate the two sides in blocks so machine noise hits both alike.
        read_mcp, read_http, run_mcp, run_http = [], [], [], []
        for _ in range(2):
            read_mcp += timed(lambda: mcp.call("read", {"path": str(path)}), CALLS // 2)
            read_http += timed(lambda: plain.request("GET", f"/files/content?path={quote(str(path))}"), CALLS // 2)
            run_mcp += timed(lambda: mcp.call("run", {"command": "true"}), CALLS // 2)
            run_http += timed(lambda: plain.request("POST", "/shell", {"command": "true"}), CALLS // 2)
        rows("`read` tool round trip", read_mcp, read_http)
        rows("`run` of `true`", run_mcp, run_http)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
