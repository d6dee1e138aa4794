#!/usr/bin/env python3
"""Webhook rows: how long a signed `agent.session.created` event takes to
reach a receiver on loopback, p50 and p99, from the start of the
`POST /v1/agents/sessions` that causes it to the moment the receiver has
read the delivery; and the round trip of `POST /v1/webhook_endpoints/{id}/test`
(one synchronous delivery inside the request).

Usage: python bench/webhooks.py --ours BIN --ref BIN   (prints markdown rows;
bench/ must be on PYTHONPATH, as bench/run sets it)

Both servers allow private URLs and plain http (the receiver is a Python
HTTP server on 127.0.0.1, the same for both), run the same fake `codex`
(a session without input runs nothing), and get the same requests: each
sample creates a session, waits for its event, then deletes the session, so
every sample starts from an idle server. 200 samples per server after 10
warm-up ones. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import http.client
import http.server
import json
import queue
import threading
import time
from pathlib import Path

from common import HOST, TOKEN, Server, each_side, parse_args, percentile, row

SAMPLES = 200
WARMUP = 10

FAKE_CODEX = """#!/bin/sh
[ "$1" = "--version" ] && { echo "codex-cli 0.0.0-bench"; exit 0; }
cat > /dev/null
echo '{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}'
"""


class Receiver:
    """Records when each delivery was read whole."""

    def __init__(self) -> None:
        self.got: queue.Queue[tuple[float, bytes]] = queue.Queue()
        got = self.got

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                got.put((time.perf_counter(), body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self.url = f"http://{HOST}:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def call(conn: http.client.HTTPConnection, method: str, path: str, body: dict | None = None) -> dict:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
    return json.loads(data) if data else {}


def measure(port: int, work: Path, receiver: Receiver) -> dict[str, float]:
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    endpoint = call(conn, "POST", "/v1/webhook_endpoints",
                    {"url": receiver.url, "event_types": ["agent.session.created"], "name": "bench"})
    session_body = {"environment": {"type": "self_hosted", "workspace_directory": str(work)}}
    events, tests = [], []
    for n in range(WARMUP + SAMPLES):
        started = time.perf_counter()
        session = call(conn, "POST", "/v1/agents/sessions", session_body)
        while True:
            at, body = receiver.got.get(timeout=30)
            if session["id"].encode() in body:
                break
        if n >= WARMUP:
            events.append((at - started) * 1000)
        call(conn, "DELETE", f"/v1/agents/sessions/{session['id']}")
    for n in range(WARMUP + SAMPLES):
        started = time.perf_counter()
        call(conn, "POST", f"/v1/webhook_endpoints/{endpoint['id']}/test", {"event_type": "agent.session.idle"})
        elapsed = time.perf_counter() - started
        receiver.got.get(timeout=30)
        if n >= WARMUP:
            tests.append(elapsed * 1000)
    conn.close()
    return {"event50": percentile(events, 50), "event99": percentile(events, 99),
            "test50": percentile(tests, 50), "test99": percentile(tests, 99)}


def run(name: str, binary: str, work: Path) -> dict[str, float]:
    codex = work / "codex"
    codex.write_text(FAKE_CODEX)
    codex.chmod(0o755)
    env = {
        "ABX_SERVER_ENABLED_GROUPS": "agents",
        "ABX_AGENTS_STATE_DIR": str(work / "state"),
        "ABX_AGENTS_DEFAULT": "codex",
        "ABX_AGENTS_ALLOW_PRIVATE_URLS": "1",
        "ABX_AGENTS_WEBHOOK_ALLOW_HTTP": "1",
        "PATH": f"{work}:/usr/bin:/bin",
    }
    receiver = Receiver()
    try:
        with Server.start(name, binary, env=env) as server:
            return measure(server.port, work, receiver)
    finally:
        receiver.close()


def main() -> None:
    ours, ref = each_side(parse_args(__doc__), "webhooks", run)
    note = "receiver: Python http.server on loopback"
    print(row("session created to its signed webhook received, p50", ours.get("event50"), ref.get("event50"), "ms", better="lower", note=note))
    print(row("session created to its signed webhook received, p99", ours.get("event99"), ref.get("event99"), "ms", better="lower"))
    print(row("POST /v1/webhook_endpoints/{id}/test round trip, p50", ours.get("test50"), ref.get("test50"), "ms", better="lower"))
    print(row("POST /v1/webhook_endpoints/{id}/test round trip, p99", ours.get("test99"), ref.get("test99"), "ms", better="lower"))


if __name__ == "__main__":
    main()
