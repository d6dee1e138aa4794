"""Process group conformance: every ``ServerClient.process`` method, through the real client."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import subprocess
import time

import pytest
from agent_sandbox.models.errors import CommandTimeoutError, ServerAPIError
from agent_sandbox.models.server import ShellEventType

_counter = itertools.count()


def marker() -> str:
    """A unique number of seconds (~1000): sleep's argument and a pgrep -f pattern."""
    return f"1000.{os.getpid() % 10_000_000:07d}{next(_counter):03d}{time.time_ns() % 1_000_000_000:09d}"


def pgrep(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split()]


async def gone(pattern: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while pgrep(pattern):
        assert time.monotonic() < deadline, f"still running: {pattern}"
        await asyncio.sleep(0.02)


def test_shell_returns_both_streams_and_the_exit_code(server):
    proc = server.client().process
    result = proc.shell_sync("sh -c 'echo out; echo err >&2; exit 3'")
    assert (result.stdout, result.stderr, result.exit_code, result.success) == ("out\n", "err\n", 3, False)
    assert proc.shell_sync("sh -c 'kill -9 $$'").exit_code == -9
    env = proc.shell_sync("env", env={"CONFORMANCE_VAR": "yes"}).stdout
    assert "CONFORMANCE_VAR=yes" in env
    assert "ABX_SERVER_TOKEN" not in env and server.token not in env
    sub = server.base / "sub"
    sub.mkdir()
    assert proc.shell_sync("pwd", cwd=str(sub)).stdout.strip() == str(sub.resolve())


def test_shell_timeout_is_a_command_timeout_error(server):
    tag = marker()
    with pytest.raises(CommandTimeoutError):
        server.client().process.shell_sync(f"sh -c 'sleep {tag} & while :; do echo chatty; done' {tag}", timeout=0.5)
    assert pgrep(tag) == [], "the whole group is gone when the error arrives"


def test_shell_errors_are_typed(server):
    proc = server.client().process
    with pytest.raises(ServerAPIError) as missing:
        proc.shell_sync("no-such-program-x")
    assert missing.value.status_code == 500
    assert missing.value.error_type == "FileNotFoundError"
    with pytest.raises(ServerAPIError) as denied:
        proc.shell_sync("ls", cwd="/etc")
    assert (denied.value.status_code, denied.value.error_code) == (403, "path_not_allowed")


def test_shell_stream_yields_lines_then_exit(server):
    async def run():
        events = []
        async for ev in server.client().process.shell_stream("sh -c 'echo a; echo b >&2; printf tail; exit 5'"):
            events.append(ev)
        return events

    events = asyncio.run(run())
    assert [e.data for e in events if e.event == ShellEventType.STDOUT] == ["a", "tail"]
    assert [e.data for e in events if e.event == ShellEventType.STDERR] == ["b"]
    assert events[-1].event == ShellEventType.EXIT and events[-1].exit_code == 5


def test_run_stream_collects_output_and_calls_back(server):
    seen: list[str] = []

    async def run():
        return await server.client().process.run_stream(
            "sh -c 'echo one; echo two; echo oops >&2'", on_stdout=seen.append
        )

    result = asyncio.run(run())
    assert (result.stdout, result.stderr, result.exit_code) == ("one\ntwo\n", "oops\n", 0)
    assert seen == ["one", "two"]


def test_run_stream_timeout_raises(server):
    tag = marker()

    async def run():
        await server.client().process.run_stream(f"sh -c 'sleep {tag} & while :; do echo x; done' {tag}", timeout=0.5)

    with pytest.raises(CommandTimeoutError):
        asyncio.run(run())
    assert pgrep(tag) == []


def test_leaving_a_stream_kills_the_command(server):
    tag = marker()

    async def run():
        stream = server.client().process.shell_stream(f"sh -c 'sleep {tag} & echo started; wait' {tag}")
        async with contextlib.aclosing(stream) as events:
            async for ev in events:
                assert ev.data == "started"
                assert len(pgrep(tag)) == 2
                break
        await gone(tag)

    asyncio.run(run())


def test_start_list_get_signal_terminate_kill_wait(server):
    proc = server.client().process
    tag = marker()
    started = proc.start_sync(f"sleep {tag}")
    assert started.pid > 0 and started.command == f"sleep {tag}"
    listed = {p.pid: p for p in proc.list_sync()}
    assert listed[started.pid].running
    info = proc.get_sync(started.pid)
    assert (info.state, info.exit_code, info.command) == ("running", None, f"sleep {tag}")
    assert info.started_at is not None and info.started_at <= time.time()
    assert proc.signal_sync(started.pid, 15).signal == 15
    assert proc.wait_sync(started.pid, timeout=10, poll=0.05) == -15
    other = proc.start_sync(f"sleep {tag}")
    assert proc.terminate_sync(other.pid).signal == 15
    third = proc.start_sync(f"sleep {tag}")
    assert proc.kill_sync(third.pid).signal == 9
    assert proc.wait_sync(third.pid, timeout=10, poll=0.05) == -9
    assert proc.wait_sync(other.pid, timeout=10, poll=0.05) == -15
    assert pgrep(tag) == []
    with pytest.raises(ServerAPIError) as refused:
        proc.signal_sync(third.pid, 1)
    assert refused.value.status_code == 400
    with pytest.raises(ServerAPIError) as unknown:
        proc.get_sync(999_999_999)
    assert unknown.value.status_code == 404


def test_wait_times_out_on_a_running_process(server):
    proc = server.client().process
    pid = proc.start_sync(f"sleep {marker()}").pid
    with pytest.raises(CommandTimeoutError):
        proc.wait_sync(pid, timeout=0.2, poll=0.05)
    proc.kill_sync(pid)


def test_stdin_output_cursors_and_follow(server):
    proc = server.client().process
    pid = proc.start_sync("sh -c 'echo ready; cat; echo bye >&2'", capture_output=True, stdin=True).pid
    first = proc.output_sync(pid, wait=10)
    assert first.stdout == "ready\n" and first.state == "running" and not first.dropped
    written = proc.send_stdin_sync(pid, "héllo\n")
    assert (written.pid, written.written, written.closed) == (pid, 7, False)
    echoed = proc.output_sync(pid, since=first.next, wait=10)
    assert echoed.stdout == "héllo\n"
    assert proc.send_stdin_sync(pid, b"\x00bin\n").written == 5
    closed = proc.close_stdin_sync(pid)
    assert closed.closed is True

    async def follow():
        return [ev async for ev in server.client().process.follow(pid, poll=5)]

    events = asyncio.run(follow())
    assert "".join(e.data for e in events if e.stream == "stdout") == "ready\nhéllo\n\x00bin\n"
    assert "".join(e.data for e in events if e.stream == "stderr") == "bye\n"
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert proc.wait_sync(pid, timeout=10, poll=0.05) == 0
    final = proc.output_sync(pid, since=events[-1].seq + 1)
    assert (final.events, final.state, final.exit_code) == ([], "exited", 0)
    with pytest.raises(ServerAPIError) as late:
        proc.send_stdin_sync(pid, "late")
    assert late.value.status_code == 409


def test_output_long_polls_until_output_arrives(server):
    proc = server.client().process
    pid = proc.start_sync("sh -c 'read line; echo got $line'", capture_output=True, stdin=True).pid

    async def run():
        client = server.client().process
        poll = asyncio.ensure_future(client.output(pid, since=0, wait=20))
        await asyncio.sleep(0)  # let the poll go out before the input does
        await client.send_stdin(pid, "x\n")
        return await poll

    out = asyncio.run(run())
    assert out.stdout == "got x\n"


def test_output_needs_capture(server):
    proc = server.client().process
    pid = proc.start_sync(f"sleep {marker()}").pid
    with pytest.raises(ServerAPIError) as conflict:
        proc.output_sync(pid)
    assert conflict.value.status_code == 409
    with pytest.raises(ServerAPIError) as no_stdin:
        proc.send_stdin_sync(pid, "x")
    assert no_stdin.value.status_code == 409
    proc.kill_sync(pid)
