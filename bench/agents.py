#!/usr/bin/env python3
"""Agents rows: events per second through the agents runtime, and the
daemon's memory while they flow.

Usage: python bench/agents.py --ours BIN --ref BIN   (prints markdown rows;
bench/ must be on PYTHONPATH, as bench/run sets it)

- A `command` agent (ours only: the reference declares the runtime but has no
  backend for it) prints 100,000 event lines, streamed text of 100 messages.
  The time is from the request that creates the session with its input to
  the end of one subscriber's event stream, which the server ends after the
  caught-up `session.idle`: every event went through the parser, the turn
  builder, the event log (memory and `events.jsonl`) and the SSE mapping.
  The rate is runtime events (the last sequence number) per second.
- The same through a fake `codex` on both servers: 33,334 `codex exec --json`
  reasoning items, three runtime events each (added, delta, done).
- The daemon's own RSS (not its children's), sampled every 20 ms: before
  the turn (the runtime already started), the peak while the events flow,
  and after. Flat means the peak does not grow with the number of events.

Standard library only. Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import HOST, TOKEN, Server, parse_args, row, rss_of

HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
EVENTS = 100_000

COMMAND_AGENT = """#!/bin/sh
cat > /dev/null
seq 1 "$1" | awk '{printf "{\\"type\\":\\"text_delta\\",\\"item_id\\":\\"m%d\\",\\"text\\":\\"x\\"}\\n", int($1/1000)}'
"""

FAKE_CODEX = """#!%s
import json, sys
if sys.argv[1:2] == ["--version"]:
    print("codex-cli 0.0.0-bench"); sys.exit(0)
sys.stdin.read()
out = sys.stdout
out.write(json.dumps({"type": "thread.started", "thread_id": "bench-thread-1"}) + "\\n")
for i in range(%d):
    out.write(json.dumps({"type": "item.completed", "item": {"id": "i%%d" %% i, "type": "reasoning", "text": "x"}}) + "\\n")
out.write(json.dumps({"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}}) + "\\n")
""" % (sys.executable, EVENTS // 3 + 1)


def call(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict | None]:
    conn = http.client.HTTPConnection(HOST, port, timeout=600)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=HEADERS)
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None
    finally:
        conn.close()


def stream_to_end(port: int, sid: str) -> int:
    """Reads the session's events from the start until the server ends the
    stream, in 64 KiB reads (a line-by-line Python reader would be the
    bottleneck); returns the last frame's `id`."""
    conn = http.client.HTTPConnection(HOST, port, timeout=600)
    conn.request("GET", f"/v1/agents/sessions/{sid}/events?after=0", headers=HEADERS)
    response = conn.getresponse()
    tail = b""
    while chunk := response.read1(65536):
        tail = (tail + chunk)[-4096:]
    conn.close()
    at = tail.rfind(b"\nid: ")
    start = at + 5 if at >= 0 else (4 if tail.startswith(b"id: ") else -1)
    return int(tail[start:tail.index(b"\n", start)]) if start >= 0 else 0


class Sampler:
    """The daemon's RSS every 20 ms, in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_of(self.pid))
            time.sleep(0.02)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(server: Server, agent: dict, work: Path) -> dict | None:
    # Start the runtime first, so the baseline holds it.
    status, _ = call(server.port, "GET", "/v1/agents/sessions")
    if status != 200:
        return None
    time.sleep(0.2)
    before = rss_of(server.process.pid)
    body = {"agent": agent, "environment": {"workspace_directory": str(work)}, "input": "go"}
    with Sampler(server.process.pid) as sampler:
        started = time.perf_counter()
        status, created = call(server.port, "POST", "/v1/agents/sessions", body)
        if status != 200 or created is None:
            print(f"{server.name}: create failed: {status} {created}", file=sys.stderr)
            return None
        last = stream_to_end(server.port, created["id"])
        elapsed = time.perf_counter() - started
    _, turns = call(server.port, "GET", f"/v1/agents/sessions/{created['id']}/turns")
    turn = (turns or {}).get("data", [{}])[0]
    if turn.get("status") != "completed":
        print(f"{server.name}: the turn ended {turn.get('status')}: {turn.get('error')}", file=sys.stderr)
        return None
    after = rss_of(server.process.pid)
    mib = 2**20
    return {"rate": last / elapsed, "events": last, "seconds": elapsed,
            "before": before / mib, "peak": sampler.peak / mib, "after": after / mib}


def main() -> None:
    args = parse_args(__doc__)
    with tempfile.TemporaryDirectory(prefix="bench-agents-") as tmp:
        root = Path(tmp)
        work = root / "work"
        work.mkdir()
        agent = root / "agent.sh"
        agent.write_text(COMMAND_AGENT)
        agent.chmod(0o755)
        bin_dir = root / "bin"
        bin_dir.mkdir()
        codex = bin_dir / "codex"
        codex.write_text(FAKE_CODEX)
        codex.chmod(0o755)
        env = {"ABX_SERVER_ENABLED_GROUPS": "agents", "ABX_AGENTS_STATE_DIR": str(root / "state"),
               "ABX_AGENTS_MAX_OUTPUT_BYTES": str(64 * 2**20),
               "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(root)}

        for count in (EVENTS, 3 * EVENTS):
            with Server.start("ours", args.ours, env={**env, "ABX_AGENTS_STATE_DIR": str(root / f"state-{count}")}) as server:
                mine = measure(server, {"runtime": "command", "command": [str(agent), str(count)]}, work)
            if not mine:
                continue
            label = f"{count:,}"
            note = f"{mine['events']:,} events in {mine['seconds']:.2f} s"
            print(row(f"agents: command agent printing {label} events, events/s to the stream's end", mine["rate"], None, "events/s", better="higher", note=note))
            print(row(f"agents: daemon RSS before / peak / after ({label} events)", mine["peak"], None, "MiB", better="lower",
                      note=f"{mine['before']:.1f} / {mine['peak']:.1f} / {mine['after']:.1f} MiB"), flush=True)

        results = {}
        for name, binary in (("ours", args.ours), ("reference", args.ref)):
            with Server.start(name, binary, env={**env, "ABX_AGENTS_STATE_DIR": str(root / f"state-{name}-codex")}) as server:
                results[name] = measure(server, {}, work)
        ours, ref = results["ours"], results["reference"]
        get = lambda r, k: r[k] if r else None  # noqa: E731
        print(row("agents: fake codex, 33,334 JSONL items (100,000 events), events/s", get(ours, "rate"), get(ref, "rate"), "events/s", better="higher"))
        print(row("agents: daemon RSS, peak while they flow (fake codex)", get(ours, "peak"), get(ref, "peak"), "MiB", better="lower"))


if __name__ == "__main__":
    main()
