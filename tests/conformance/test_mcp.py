"""`/mcp` driven by the official MCP Python SDK (`mcp`, pinned) over
streamable HTTP against the real binary: the handshake, every tool, policy
denials, progress, cancellation, a resumed stream, bad arguments and bad
credentials."""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import asynccontextmanager

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ClientMessageMetadata
from mcp.types import CallToolRequest, CallToolRequestParams, CallToolResult, PaginatedRequestParams

from conftest import TOKEN

TOOLS = {
    "read", "write", "edit", "list", "stat", "find", "grep", "move", "delete", "mkdir",
    "run", "start", "output", "stdin", "signal", "processes",
    "run_code", "code_contexts", "code_context_create", "code_context_restart", "system_info", "system_metrics",
}
READ_ONLY_TOOLS = {"read", "list", "stat", "find", "grep", "system_info", "system_metrics"}


@asynccontextmanager
async def session(srv, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(srv.url + "/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                yield s


def run(coroutine):
    return anyio.run(coroutine)


def body(result):
    """A tool result's JSON (its text content)."""
    return json.loads(result.content[0].text)


def test_initialize_lists_every_tool_with_a_schema(server):
    async def main():
        headers = {"X-Access-Token": TOKEN}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with streamable_http_client(server.url + "/mcp", http_client=http) as (read, write):
                async with ClientSession(read, write) as s:
                    info = await s.initialize()
                    assert info.server_info.name == "agent-sandbox-server"
                    assert info.capabilities.tools is not None and info.capabilities.resources is not None
                    tools = (await s.list_tools()).tools
                    assert {t.name for t in tools} == TOOLS
                    for tool in tools:
                        assert tool.description and tool.input_schema["type"] == "object", tool.name
                        assert set(tool.input_schema.get("required", [])) <= set(tool.input_schema["properties"])
                    read_tool = next(t for t in tools if t.name == "read")
                    assert read_tool.annotations.read_only_hint is True

    run(main)


def test_file_tools(server):
    async def main():
        async with session(server) as s:
            written = body(await s.call_tool("write", {"path": "src/a.py", "content": "one\ntwo\nthree\n"}))
            assert written == {"path": str(server.base / "src/a.py"), "bytes": 14, "created": True}
            lines = await s.call_tool("read", {"path": "src/a.py", "offset": 2, "limit": 1})
            assert lines.content[0].text == "two\n"
            assert "offset=3" in lines.content[1].text
            edited = await s.call_tool("edit", {"path": "src/a.py", "old_string": "two", "new_string": "2"})
            assert not edited.is_error and body(edited)["replacements"] == 1
            assert (server.base / "src/a.py").read_text() == "one\n2\nthree\n"
            twice = await s.call_tool("edit", {"path": "src/a.py", "old_string": "e", "new_string": "E"})
            assert twice.is_error and "occurs 3 times" in body(twice)["error"]
            names = [e["name"] for e in body(await s.call_tool("list", {"path": "src"}))["entries"]]
            assert names == ["a.py"]
            assert body(await s.call_tool("stat", {"path": "src/nope"}))["exists"] is False
            found = body(await s.call_tool("find", {"path": ".", "pattern": "*.py"}))
            assert [r["path"] for r in found["results"]] == [str(server.base / "src/a.py")]
            grep = body(await s.call_tool("grep", {"path": ".", "regex": "^thr"}))
            assert grep["results"][0]["matches"][0]["line"] == 3
            assert not (await s.call_tool("mkdir", {"path": "d/e"})).is_error
            assert not (await s.call_tool("move", {"source": "src/a.py", "destination": "d/b.py"})).is_error
            assert not (await s.call_tool("delete", {"path": "src"})).is_error
            assert sorted(p.name for p in server.base.iterdir()) == ["d"]
            image = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"
            (server.base / "i.png").write_bytes(image)
            shown = (await s.call_tool("read", {"path": "i.png"})).content[0]
            assert (shown.type, shown.mime_type) == ("image", "image/png")

    run(main)


def test_path_escape_is_a_tool_error_naming_the_endpoint(server):
    async def main():
        async with session(server) as s:
            escaped = await s.call_tool("read", {"path": "../../etc/passwd"})
            assert escaped.is_error
            assert body(escaped)["code"] == "path_not_allowed"
            assert body(escaped)["endpoint"] == "files_content_read"

    run(main)


def test_process_tools(server):
    async def main():
        async with session(server) as s:
            ran = body(await s.call_tool("run", {"command": "printf 'x%.0s' $(seq 100); echo err >&2", "shell": True, "max_output_bytes": 10}))
            assert ran == {"stdout": "x" * 10, "stderr": "err\n", "exit_code": 0, "truncated": True}
            (server.base / "sub").mkdir()
            env = body(await s.call_tool("run", {"command": "sh -c 'echo $X; pwd'", "env": {"X": "42"}, "cwd": "sub"}))
            assert env == {"stdout": f"42\n{server.base / 'sub'}\n", "stderr": "", "exit_code": 0}
            outside = await s.call_tool("run", {"command": "pwd", "cwd": "/"})
            assert outside.is_error and body(outside)["code"] == "path_not_allowed"
            timed = await s.call_tool("run", {"command": "sleep 5", "timeout": 0.2})
            assert timed.is_error and body(timed)["type"] == "TimeoutError"
            started = body(await s.call_tool("start", {"command": "cat", "stdin": True}))
            pid = started["pid"]
            assert body(await s.call_tool("stdin", {"pid": pid, "data": "hello\n", "eof": True}))
            out = body(await s.call_tool("output", {"pid": pid, "wait": 5}))
            events = list(out["events"])
            while out["state"] != "exited":
                out = body(await s.call_tool("output", {"pid": pid, "since": out["next"], "wait": 5}))
                events += out["events"]
            assert out["exit_code"] == 0
            assert "hello" in "".join(e.get("data", "") for e in events)
            listed = body(await s.call_tool("processes", {}))
            assert any(p["pid"] == pid for p in listed["processes"])
            sleeper = body(await s.call_tool("start", {"command": "sleep 60"}))["pid"]
            assert body(await s.call_tool("signal", {"pid": sleeper, "signal": "KILL"}))["signal"] == 9
            info = body(await s.call_tool("system_info", {}))
            assert info["cpu_count"] >= 1
            assert body(await s.call_tool("system_metrics", {}))["cpu_load_1m"] >= 0

    run(main)


def test_code_tools_keep_state_and_return_figures_as_images(make_server):
    srv = make_server(args=("--code-python", sys.executable))

    async def main():
        async with session(srv) as s:
            first = await s.call_tool("run_code", {"code": "x = 6 * 7\nprint('hi')\nx"})
            assert [c.text for c in first.content] == ["hi\n", "42"]
            assert (await s.call_tool("run_code", {"code": "x + 1"})).content[0].text == "43"
            failed = await s.call_tool("run_code", {"code": "1 / 0"})
            assert failed.is_error and "ZeroDivisionError" in failed.content[-1].text
            figure = "import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()"
            shown = (await s.call_tool("run_code", {"code": figure})).content
            assert [(c.type, getattr(c, "mime_type", None)) for c in shown] == [("image", "image/png")]
            (srv.base / "work").mkdir()
            created = body(await s.call_tool("code_context_create", {"language": "python", "cwd": "work"}))
            assert created["cwd"] == str(srv.base / "work")
            ran = await s.call_tool("run_code", {"code": "import os\ny = 1\nos.getcwd()", "context_id": created["id"]})
            assert ran.content[0].text == str(srv.base / "work")
            ids = [c["id"] for c in body(await s.call_tool("code_contexts", {}))["contexts"]]
            assert created["id"] in ids
            assert not (await s.call_tool("code_context_restart", {"context_id": created["id"]})).is_error
            gone = await s.call_tool("run_code", {"code": "y", "context_id": created["id"]})
            assert gone.is_error and "NameError" in gone.content[-1].text

    run(main)


def test_progress_notifications_carry_output_lines(server):
    async def main():
        seen = []

        async def progress(value, total, message):
            seen.append((value, message))

        async with session(server) as s:
            result = await s.call_tool("run", {"command": "printf 'a\\nb\\nc\\n'", "shell": True}, progress_callback=progress)
            assert body(result)["stdout"] == "a\nb\nc\n"
        assert seen == [(1.0, "a"), (2.0, "b"), (3.0, "c")]

    run(main)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_cancelling_a_run_kills_its_process_group(server):
    marker = server.base / "pids"

    async def main():
        async with session(server) as s:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    command = f"sleep 300 & echo $$ $! > {marker}; wait"
                    tg.start_soon(lambda: s.call_tool("run", {"command": command, "shell": True}))
                    with anyio.fail_after(10):
                        while not marker.exists() or not marker.read_text().strip():
                            await anyio.sleep(0.02)
                    scope.cancel()
            # The session is still usable after a cancelled call.
            assert body(await s.call_tool("stat", {"path": "pids"}))["exists"] is True

    run(main)
    pids = [int(p) for p in marker.read_text().split()]
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids), "the shell or its grandchild outlived the cancelled call"


def test_read_only_preset_hides_and_refuses_tools(make_server):
    srv = make_server(args=["--preset", "read-only"])

    async def main():
        async with session(srv) as s:
            assert {t.name for t in (await s.list_tools()).tools} == READ_ONLY_TOOLS
            refused = await s.call_tool("run", {"command": "true"})
            assert refused.is_error
            denial = body(refused)
            assert (denial["code"], denial["endpoint"]) == ("endpoint_disabled", "shell")
            assert denial["rule"] == "preset:read-only:groups.process"
            written = await s.call_tool("write", {"path": "x", "content": "y"})
            assert written.is_error and body(written)["code"] == "endpoint_disabled"
        assert not (srv.base / "x").exists()

    run(main)
    # Audited by the same line as an HTTP call, the tool named.
    assert (
        'audit: port="api" endpoint="shell" identity="server" method="MCP" tool="run" decision="deny" status=404 '
        'code="endpoint_disabled" rule="preset:read-only:groups.process"'
    ) in srv.log()


def test_bad_arguments_are_protocol_errors(server):
    async def main():
        async with session(server) as s:
            with pytest.raises(MCPError) as wrong_type:
                await s.call_tool("read", {"path": 5})
            assert wrong_type.value.error.code == -32602
            with pytest.raises(MCPError) as unknown:
                await s.call_tool("read", {"path": "a", "bogus": 1})
            assert unknown.value.error.code == -32602
            with pytest.raises(MCPError):
                await s.call_tool("no_such_tool", {})
            # Still serving.
            assert body(await s.call_tool("stat", {"path": "."}))["exists"] is True

    run(main)


def test_resources_list_and_read(server):
    (server.base / "notes.txt").write_text("remember\n")

    async def main():
        async with session(server) as s:
            listed = (await s.list_resources()).resources
            uri = f"file://{server.base / 'notes.txt'}"
            assert [str(r.uri) for r in listed] == [uri]
            contents = (await s.read_resource(uri)).contents
            assert contents[0].text == "remember\n"
            with pytest.raises(MCPError):
                await s.read_resource("file:///etc/shadow")

    run(main)


async def every_resource(s):
    """Pages through resources/list; the pages' sizes and the URIs."""
    sizes, uris, cursor = [], [], None
    while True:
        page = await s.list_resources(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        sizes.append(len(page.resources))
        uris += [str(r.uri) for r in page.resources]
        cursor = page.next_cursor
        if cursor is None:
            return sizes, uris


def test_resource_listing_is_bounded_and_paged(server):
    deep = server.base / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "shallow.txt").write_text("3 levels\n")
    (deep / "c").mkdir()
    (deep / "c" / "deep.txt").write_text("4 levels\n")

    async def main():
        async with session(server) as s:
            sizes, uris = await every_resource(s)
            # Three levels deep, no further.
            assert uris == [f"file://{deep / 'shallow.txt'}"]
            for i in range(1200):
                (server.base / f"f{i:04}").write_text("")
            sizes, uris = await every_resource(s)
            # Pages of 100, from a walk of at most 1000 entries (the 3 directories among them).
            assert all(size == 100 for size in sizes[:-1]) and 0 < sizes[-1] <= 100, sizes
            assert 997 <= len(uris) <= 1000 and len(set(uris)) == len(uris)

    run(main)


HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def sse_events(lines):
    event = {}
    for line in lines:
        if line == "":
            if event:
                yield event
            event = {}
            continue
        key, _, value = line.partition(":")
        event[key] = event.get(key, "") + value.lstrip()


def test_wrong_token_is_401(server):
    response = httpx.post(server.url + "/mcp", headers={**HEADERS, "Authorization": "Bearer wrong"}, json=INITIALIZE)
    assert response.status_code == 401
    response = httpx.post(server.url + "/mcp", headers=HEADERS, json=INITIALIZE)
    assert response.status_code == 401


def test_a_reconnect_resumes_the_stream(server):
    auth = {**HEADERS, "Authorization": f"Bearer {TOKEN}", "Host": "sandbox-1234.proxy.example"}
    with httpx.Client(timeout=30) as http:
        opened = http.post(server.url + "/mcp", headers=auth, json=INITIALIZE)
        assert opened.status_code == 200
        headers = {**auth, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        assert http.post(server.url + "/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "run", "arguments": {"command": "sleep 0.5; echo done", "shell": True}}}
        with http.stream("POST", server.url + "/mcp", headers=headers, json=call) as stream:
            first = next(sse_events(stream.iter_lines()))
        assert first["id"]
        # The connection dropped before the answer; it comes on the resumed stream.
        resumed = http.get(server.url + "/mcp", headers={**headers, "Last-Event-ID": first["id"]})
        assert resumed.status_code == 200
        answers = [json.loads(e["data"]) for e in sse_events(resumed.text.splitlines() + [""]) if e.get("data")]
        answer = next(a for a in answers if a.get("id") == 2)
        assert answer["result"]["structuredContent"]["stdout"] == "done\n"
        assert http.delete(server.url + "/mcp", headers=headers).status_code < 300


def test_a_client_that_reconnects_gets_the_answer_of_a_call_that_ended_meanwhile(server):
    """Issue 32, with the SDK's own resumption: a client leaves in the middle
    of a call with the call's resumption token; the call ends while it is
    away; a new client of the same session resumes with the token and gets
    the call's answer (the SDK's session manager had forgotten it)."""
    go = server.base / "go"
    arguments = {"command": f"while [ ! -f {go} ]; do sleep 0.02; done; echo done", "shell": True}
    request = CallToolRequest(params=CallToolRequestParams(name="run", arguments=arguments))
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async def main():
        session_ids, tokens, token_seen = [], [], anyio.Event()

        async def remember_session(response):
            if "mcp-session-id" in response.headers:
                session_ids.append(response.headers["mcp-session-id"])

        async def on_token(token):
            tokens.append(token)
            token_seen.set()

        hooks = {"response": [remember_session]}
        async with httpx2.AsyncClient(headers=auth, timeout=30, event_hooks=hooks) as http:
            async with streamable_http_client(server.url + "/mcp", http_client=http, terminate_on_close=False) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    async with anyio.create_task_group() as tg:
                        metadata = ClientMessageMetadata(on_resumption_token_update=on_token)
                        tg.start_soon(lambda: s.send_request(request, CallToolResult, metadata=metadata))
                        await token_seen.wait()
                        tg.cancel_scope.cancel()
        # The client is gone; the command ends and its answer is made while nobody listens.
        go.write_text("")
        deadline = time.monotonic() + 20
        while 'method="MCP" tool="run" status=200' not in server.log():
            assert time.monotonic() < deadline, "the call never ended"
            await anyio.sleep(0.02)
        headers = {**auth, "mcp-session-id": session_ids[0], "mcp-protocol-version": "2025-06-18"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with streamable_http_client(server.url + "/mcp", http_client=http) as (read, write):
                async with ClientSession(read, write) as s:
                    metadata = ClientMessageMetadata(resumption_token=tokens[-1])
                    with anyio.fail_after(20):
                        result = await s.send_request(request, CallToolResult, metadata=metadata)
        assert result.structured_content["stdout"] == "done\n", result
        assert result.structured_content["exit_code"] == 0

    run(main)


def test_a_resume_from_further_back_than_held_raises_with_the_count_lost(server):
    """Issue 32: a call's resumption token older than its stream's ring (256
    messages) is answered with an explicit error the SDK raises, counting the
    messages lost, not with the held ones as if nothing were missing."""
    marker, go = server.base / "printed", server.base / "go"
    command = f"seq 1 400; touch {marker}; while [ ! -f {go} ]; do sleep 0.02; done"
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async def main():
        session_ids, tokens, token_seen = [], [], anyio.Event()

        async def remember_session(response):
            if "mcp-session-id" in response.headers:
                session_ids.append(response.headers["mcp-session-id"])

        async def on_token(token):
            tokens.append(token)
            token_seen.set()

        async def progress(*_):
            pass

        hooks = {"response": [remember_session]}
        request = CallToolRequest(params=CallToolRequestParams(name="run", arguments={"command": command, "shell": True}))
        async with httpx2.AsyncClient(headers=auth, timeout=30, event_hooks=hooks) as http:
            async with streamable_http_client(server.url + "/mcp", http_client=http, terminate_on_close=False) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    async with anyio.create_task_group() as tg:
                        metadata = ClientMessageMetadata(on_resumption_token_update=on_token)
                        tg.start_soon(lambda: s.send_request(request, CallToolResult, metadata=metadata, progress_callback=progress))
                        await token_seen.wait()
                        tg.cancel_scope.cancel()
        stream = tokens[0].split(":")[0]
        headers = {**auth, "mcp-session-id": session_ids[0], "mcp-protocol-version": "2025-06-18"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            # Wait until the 400 lines were sent (a resume after an event not sent yet is 400).
            deadline = time.monotonic() + 20
            probe = {"Accept": "text/event-stream", "Last-Event-ID": f"{stream}:401"}
            while True:
                async with http.stream("GET", server.url + "/mcp", headers=probe) as response:
                    if response.status_code != 400:
                        break
                assert time.monotonic() < deadline, "the lines were never sent"
                await anyio.sleep(0.02)
            async with streamable_http_client(server.url + "/mcp", http_client=http) as (read, write):
                async with ClientSession(read, write) as s:
                    metadata = ClientMessageMetadata(resumption_token=tokens[0])
                    with anyio.fail_after(20), pytest.raises(MCPError) as raised:
                        await s.send_request(request, CallToolResult, metadata=metadata)
        go.write_text("")
        error = raised.value.error
        seq = int(tokens[0].split(":")[1])
        assert error.code == -32030 and error.data["code"] == "data_loss", error
        assert (error.data["lost"], error.data["held"]) == (401 - 256 - seq, 256), error
        assert "no longer held" in error.message

    run(main)


def test_sessions_are_a_share_per_identity(make_server, tmp_path):
    """Issue 31, item 4: one identity's open sessions (the SDK's, held
    open) fill only its own share; the next `initialize` of that identity
    is refused 429 naming the quota, and another identity still opens
    sessions and calls tools."""
    from contextlib import AsyncExitStack

    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"auth": {"tokens": [
        {"id": "alice", "scopes": ["*"], "token_env": "ABX_TEST_ALICE"},
        {"id": "bob", "scopes": ["core:read", "files:read"], "token_env": "ABX_TEST_BOB"},
    ]}}))
    env = {"ABX_TEST_ALICE": "alice-token-3c1f", "ABX_TEST_BOB": "bob-token-8d27", "ABX_MCP_MAX_SESSIONS": "2"}
    srv = make_server(token=None, args=("--policy", str(policy)), env=env)

    async def main():
        async with AsyncExitStack() as held:
            for _ in range(2):
                await held.enter_async_context(session(srv, "bob-token-8d27"))
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
            headers = {"Authorization": "Bearer bob-token-8d27", "Accept": "application/json, text/event-stream"}
            async with httpx2.AsyncClient(timeout=30) as http:
                refused = await http.post(srv.url + "/mcp", json=init, headers=headers)
            assert refused.status_code == 429, refused.text
            answer = refused.json()
            assert (answer["code"], answer["limit"]) == ("session_limit", 2), answer
            assert "mcp_max_sessions" in answer["error"]
            async with session(srv, "alice-token-3c1f") as s:
                listed = body(await s.call_tool("list", {"path": "."}))
                assert isinstance(listed, (dict, list)), listed

    run(main)
