#!/usr/bin/env python3
"""Responses rows: the time from `client.responses.create(stream=True)` (the
official `openai` SDK, `base_url` pointed at the server) to its first event,
p50 and p99, and the same to the first `data:` line over a bare HTTP
connection (no SDK in the way).

Usage: python bench/responses.py --ours BIN --ref BIN   (prints markdown rows;
bench/ must be on PYTHONPATH, as bench/run sets it)

Ours runs the `command` runtime (a shell script that answers at once); the
reference has no backend for it, so it runs a fake `codex` that answers at
once. Each create runs one whole turn; the stream is read to its end before
the next create, so every sample starts from an idle server. 200 samples per
server after 10 warm-up creates. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

from common import HOST, TOKEN, Server, each_side, parse_args, percentile, row

SAMPLES = 200
WARMUP = 10

COMMAND_AGENT = """#!/bin/sh
cat > /dev/null
echo '{"type":"message","item_id":"m1","text":"ok"}'
echo '{"type":"result","ok":true}'
"""

FAKE_CODEX = """#!/bin/sh
[ "$1" = "--version" ] && { echo "codex-cli 0.0.0-bench"; exit 0; }
cat > /dev/null
echo '{"type":"thread.started","thread_id":"bench-thread-1"}'
echo '{"type":"item.completed","item":{"id":"i0","type":"agent_message","text":"ok"}}'
echo '{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}'
"""


def sdk_samples(port: int, model: str) -> list[float]:
    from openai import OpenAI

    client = OpenAI(base_url=f"http://{HOST}:{port}/v1", api_key=TOKEN, max_retries=0, timeout=60)
    out = []
    for n in range(WARMUP + SAMPLES):
        started = time.perf_counter()
        stream = client.responses.create(model=model, input="hi", stream=True)
        events = iter(stream)
        next(events)
        elapsed = time.perf_counter() - started
        for _ in events:
            pass
        if n >= WARMUP:
            out.append(elapsed * 1000)
    return out


def raw_samples(port: int, model: str) -> list[float]:
    body = json.dumps({"model": model, "input": "hi", "stream": True})
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    out = []
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    for n in range(WARMUP + SAMPLES):
        started = time.perf_counter()
        conn.request("POST", "/v1/responses", body=body, headers=headers)
        response = conn.getresponse()
        while not response.readline().startswith(b"data: "):
            pass
        elapsed = time.perf_counter() - started
        response.read()
        if n >= WARMUP:
            out.append(elapsed * 1000)
    conn.close()
    return out


def measure(name: str, binary: str, work: Path) -> dict[str, float]:
    agent = work / ("agent.sh" if name == "ours" else "codex")
    agent.write_text(COMMAND_AGENT if name == "ours" else FAKE_CODEX)
    agent.chmod(0o755)
    config = work / "agents.json"
    config.write_text(json.dumps({"command": {"argv": [str(agent)]}}))
    env = {
        "ABX_SERVER_ENABLED_GROUPS": "agents",
        "ABX_AGENTS_STATE_DIR": str(work / "state"),
        "ABX_AGENTS_CONFIG": str(config),
        "ABX_AGENTS_RESPONSES_WORKSPACE": str(work),
        "PATH": f"{work}:/usr/bin:/bin",
    }
    model = "command" if name == "ours" else "codex"
    with Server.start(name, binary, env=env) as server:
        sdk = sdk_samples(server.port, model)
        raw = raw_samples(server.port, model)
    return {"sdk50": percentile(sdk, 50), "sdk99": percentile(sdk, 99), "raw50": percentile(raw, 50), "raw99": percentile(raw, 99)}


def main() -> None:
    ours, ref = each_side(parse_args(__doc__), "responses", measure)
    note = "ours: command runtime; reference: fake codex"
    print(row("responses.create(stream=True) to first event, openai SDK, p50", ours.get("sdk50"), ref.get("sdk50"), "ms", better="lower", note=note))
    print(row("responses.create(stream=True) to first event, openai SDK, p99", ours.get("sdk99"), ref.get("sdk99"), "ms", better="lower"))
    print(row("POST /v1/responses stream to first data line, raw HTTP, p50", ours.get("raw50"), ref.get("raw50"), "ms", better="lower"))
    print(row("POST /v1/responses stream to first data line, raw HTTP, p99", ours.get("raw99"), ref.get("raw99"), "ms", better="lower"))


if __name__ == "__main__":
    main()
