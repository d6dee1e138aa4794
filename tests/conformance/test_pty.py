"""Terminal conformance: sessions and the PTY WebSocket through the real ServerClient."""

from __future__ import annotations

import asyncio

import pytest
from agent_sandbox.models.errors import ServerAPIError, ServerAuthError

WAIT = 20


def pty_client(srv, **kwargs):
    """A client that knows where the PTY listener is (ports are ephemeral here)."""
    pty_url = srv.listeners["pty"].replace("http://", "ws://", 1)
    return srv.client(pty_url=pty_url, **kwargs)


async def next_event(term, name):
    while True:
        message = await term.recv(timeout=WAIT)
        assert message is not None, f"closed before the {name} event"
        if message.type == "event" and message.event == name:
            return message


def test_create_connect_echo_resize_signal_delete(server):
    async def scenario():
        client = pty_client(server)
        created = await client.pty.create(shell="/bin/bash")
        port = server.listeners["pty"].rsplit(":", 1)[1]
        assert created.ws_url == f"ws://127.0.0.1:{port}/pty?session_id={created.session_id}"
        async with client.pty.connect(created.session_id) as term:
            started = await term.recv(timeout=WAIT)
            assert (started.type, started.event, started.session_id, started.pid) == (
                "event",
                "started",
                created.session_id,
                created.pid,
            )
            await term.send("echo marker-$((6*7))\n")
            await term.expect("marker-42", timeout=WAIT)

            await term.resize(100, 40)
            await term.send("stty size\n")
            await term.expect("40 100", timeout=WAIT)
            info = await client.pty.resize(created.session_id, 120, 50)
            assert (info.cols, info.rows, info.alive) == (120, 50, True)
            assert (await client.pty.get(created.session_id)).cols == 120

            # SIGINT reaches the foreground command, not just the shell.
            await term.send("sh -c 'echo running-$((2*2)); exec sleep 30'\n")
            await term.expect("running-4", timeout=WAIT)
            await term.signal("SIGINT")
            await term.send("echo after-$?\n")
            await term.expect("after-130", timeout=WAIT)

            assert [s.id for s in await client.pty.list()] == [created.session_id]
            await client.pty.delete(created.session_id)
            end = await next_event(term, "exited")
            assert end.session_id == created.session_id
            assert end.model_extra["exit_code"] == -1 and end.model_extra["signal"] == 1
            assert await term.recv(timeout=WAIT) is None, "the server closes after the exit"
        with pytest.raises(ServerAPIError) as caught:
            await client.pty.get(created.session_id)
        assert caught.value.status_code == 404
        assert caught.value.message == f"Session not found: {created.session_id}"

    asyncio.run(scenario())


def test_reattach_after_a_dropped_socket_replays_the_scrollback(server):
    async def scenario():
        client = pty_client(server)
        created = await client.pty.create(shell="/bin/sh")
        term = client.pty.connect(created.session_id)
        await term.open()
        await term.send("echo before-$((1+1))\n")
        await term.expect("before-2", timeout=WAIT)
        await term.send("sleep 0.3; echo meanwhile-$((3*3))\n")
        # The terminal echoes the line once the shell has it; only then drop the
        # socket, or the abort could discard the input still in the send buffer.
        await term.expect("echo meanwhile-$((3*3))", timeout=WAIT)
        term._ws.transport.abort()  # the connection drops without a close handshake
        term._ws = None

        async with client.pty.connect(created.session_id) as again:
            assert (await again.recv(timeout=WAIT)).event == "started"
            seen = await again.expect("meanwhile-9", timeout=WAIT)
            assert "before-2" in seen, seen
            await again.send("echo still-$((5*5))\n")
            await again.expect("still-25", timeout=WAIT)
        assert (await client.pty.get(created.session_id)).alive

    asyncio.run(scenario())


def test_the_exit_code_is_reported(server):
    async def scenario():
        client = pty_client(server)
        created = await client.pty.create(shell="/bin/sh")
        async with client.pty.connect(created.session_id) as term:
            await term.send("exit 7\n")
            end = await next_event(term, "exited")
            assert end.model_extra["exit_code"] == 7
        info = await client.pty.get(created.session_id)
        assert info.alive is False and info.model_extra["exit_code"] == 7

    asyncio.run(scenario())


def test_max_sessions_refuses_more_live_shells(make_server):
    srv = make_server(args=["--pty-max-sessions", "1"])
    client = pty_client(srv)
    first = client.pty.create_sync(shell="/bin/sh")
    with pytest.raises(ServerAPIError) as caught:
        client.pty.create_sync(shell="/bin/sh")
    assert caught.value.status_code == 429
    assert caught.value.message == "Session limit reached (1)"
    assert caught.value.error_type == "RuntimeError"
    client.pty.delete_sync(first.session_id)
    client.pty.create_sync(shell="/bin/sh")


def test_create_refusals_match_the_reference(server):
    client = pty_client(server)
    with pytest.raises(ServerAPIError) as caught:
        client.pty.create_sync(shell="/bin/fish")
    assert caught.value.status_code == 400
    assert caught.value.message.startswith("Shell '/bin/fish' is not allowed; permitted: ['/bin/bash'")
    with pytest.raises(ServerAPIError) as caught:
        client.pty.create_sync(shell="/bin/sh", env={"ABX_SERVER_TOKEN": "stolen"})
    assert (caught.value.status_code, caught.value.error_code) == (403, "env_var_denied")


def test_the_websocket_refuses_wrong_tokens_and_unknown_sessions(server):
    async def scenario():
        client = pty_client(server)
        created = await client.pty.create(shell="/bin/sh")
        with pytest.raises(ServerAuthError):
            async with pty_client(server, token="wrong").pty.connect(created.session_id):
                pass
        # As the reference: the handshake succeeds and the server closes at once
        # (1008, "Unknown session: ..."), so the client reports the session closed.
        async with client.pty.connect("no-such-session") as connection:
            assert await connection.recv(timeout=10) is None

    asyncio.run(scenario())


def test_discovery_reports_the_websocket_as_served(server):
    caps = server.client().discover_sync()
    assert caps.can("pty_connect") is True
    assert caps.info("pty_connect").method == "WS"
