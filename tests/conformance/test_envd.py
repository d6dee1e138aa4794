"""envd data plane conformance: the real ``e2b`` SDK (sync and async) and
``agent_sandbox._standard`` (agent-sandbox-client 0.4.0a6) in their local debug
mode (``E2B_DEBUG=true`` talks straight to ``localhost:<envd port>`` without a
platform). The port constant both read is pointed at the ephemeral envd port
of the server under test, so nothing binds 49983.

Servers run without a token, as a platform's envd behind its gateway (the SDKs
send no token in debug mode); one test covers a token-protected plane.
Synchronisation waits on events (stream messages, polled watcher events),
never on sleeps.
"""

from __future__ import annotations

import asyncio
import os
import hashlib
import time

import httpx
import pytest

import e2b
from e2b import AsyncSandbox, FileType as E2bFileType
from e2b import connection_config as e2b_config
from agent_sandbox import _standard
from agent_sandbox._standard import connection_config as std_config

from conftest import TOKEN

MIB = 1024 * 1024


def envd_port(srv) -> int:
    return int(srv.listeners["envd"].rsplit(":", 1)[1])


@pytest.fixture
def plane(make_server, monkeypatch):
    """A token-less server, and both SDKs pointed at its envd port in debug mode."""
    srv = make_server(token=None)
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setattr(e2b_config.ConnectionConfig, "envd_port", envd_port(srv))
    monkeypatch.setattr(std_config.ConnectionConfig, "envd_port", envd_port(srv))
    return srv


@pytest.fixture(params=["e2b", "standard"])
def sandbox(request, plane):
    """A sync sandbox of either SDK."""
    module = e2b if request.param == "e2b" else _standard
    return plane, module.Sandbox.create()


def wait_for(predicate, poll, timeout=10.0):
    """Polls ``poll()`` (an API call, not a sleep) until ``predicate`` holds on what it gathered."""
    gathered = []
    deadline = time.monotonic() + timeout
    while not predicate(gathered):
        assert time.monotonic() < deadline, f"not seen in time: {gathered}"
        gathered.extend(poll())
    return gathered


def test_files_write_read_text_and_bytes(sandbox):
    srv, sbx = sandbox
    info = sbx.files.write("notes/a.txt", "héllo\n")
    assert info.path == str(srv.base / "notes" / "a.txt") and info.name == "a.txt"
    assert sbx.files.read("notes/a.txt") == "héllo\n"
    payload = bytes(range(256)) * 10
    sbx.files.write(str(srv.base / "bin" / "b.dat"), payload)
    assert bytes(sbx.files.read("bin/b.dat", format="bytes")) == payload
    assert (srv.base / "bin" / "b.dat").read_bytes() == payload


def test_files_list_exists_info_mkdir_rename_remove(sandbox):
    srv, sbx = sandbox
    (srv.base / "t" / "u" / "v").mkdir(parents=True)
    (srv.base / "t" / "f.txt").write_text("12345")
    (srv.base / "t" / "link").symlink_to("f.txt")
    one = {e.name: e for e in sbx.files.list("t")}
    assert set(one) == {"u", "f.txt", "link"}
    assert one["f.txt"].size == 5 and one["f.txt"].permissions == "-rw-r--r--"
    assert one["u"].type.value == "dir"
    assert one["link"].symlink_target == str(srv.base / "t" / "f.txt")
    deep = {e.path for e in sbx.files.list("t", depth=3)}
    assert str(srv.base / "t" / "u" / "v") in deep
    assert sbx.files.exists("t/f.txt") and not sbx.files.exists("t/missing")
    info = sbx.files.get_info("t/f.txt")
    assert (info.name, info.size, info.mode) == ("f.txt", 5, 0o644)
    assert sbx.files.make_dir("t/new/inner") is True
    assert sbx.files.make_dir("t/new/inner") is False
    moved = sbx.files.rename("t/f.txt", "t/moved/g.txt")
    assert moved.path == str(srv.base / "t" / "moved" / "g.txt")
    assert (srv.base / "t" / "moved" / "g.txt").read_text() == "12345"
    sbx.files.remove("t/u")
    assert not (srv.base / "t" / "u").exists()
    missing = e2b.FileNotFoundException if isinstance(sbx, e2b.Sandbox) else _standard.FileNotFoundException
    with pytest.raises(missing):
        sbx.files.get_info("t/nothing")


def test_files_watch_dir_polled(sandbox):
    srv, sbx = sandbox
    (srv.base / "watched").mkdir()
    handle = sbx.files.watch_dir("watched", recursive=True)
    sbx.files.write("watched/new.txt", "data")
    events = wait_for(
        lambda seen: any(e.name == "new.txt" and e.type.value == "write" for e in seen), handle.get_new_events
    )
    kinds = [e.type.value for e in events if e.name == "new.txt"]
    assert kinds[:3] == ["create", "chmod", "write"], "as envd reports an upload"
    sbx.files.remove("watched/new.txt")
    wait_for(lambda seen: any(e.name == "new.txt" and e.type.value == "remove" for e in seen), handle.get_new_events)
    handle.stop()


def test_a_polled_watcher_that_overflowed_raises_data_loss_then_returns_the_rest(plane):
    """Issue 32: more events between two polls than a watcher holds (10,000)
    are never dropped silently: the SDK's `get_new_events` raises with the
    exact count, and the next call returns the held events."""
    sbx = e2b.Sandbox.create()
    (plane.base / "burst").mkdir()
    handle = sbx.files.watch_dir("burst")
    files = 5300
    for i in range(files):
        (plane.base / "burst" / f"f{i:05}").write_bytes(b"")
    with pytest.raises(e2b.SandboxException) as lost:
        handle.get_new_events()
    message = str(lost.value)
    assert "data_loss" in message.lower() and f"{2 * files - 10_000} events of watcher" in message, message
    assert len(handle.get_new_events()) == 10_000
    assert handle.get_new_events() == []
    handle.stop()


def test_a_100_mib_file_streams_both_ways(plane):
    sbx = e2b.Sandbox.create()
    block = hashlib.sha256(b"seed").digest() * (MIB // 32)
    expected = hashlib.sha256()
    for _ in range(100):
        expected.update(block)

    def chunks():
        for _ in range(100):
            yield block

    sbx.files.write("big/100m.bin", chunks())
    assert (plane.base / "big" / "100m.bin").stat().st_size == 100 * MIB
    got, size = hashlib.sha256(), 0
    with sbx.files.read("big/100m.bin", format="stream") as reader:
        for chunk in reader:
            got.update(chunk)
            size += len(chunk)
    assert (size, got.hexdigest()) == (100 * MIB, expected.hexdigest())


def test_async_sdk_files_and_streamed_watch(plane):
    async def scenario():
        sbx = await AsyncSandbox.create()
        (plane.base / "aw").mkdir()
        seen = asyncio.Queue()
        handle = await sbx.files.watch_dir("aw", on_event=seen.put_nowait)
        await sbx.files.write("aw/x.txt", "async")
        kinds = []
        while "write" not in kinds:
            event = await asyncio.wait_for(seen.get(), 10)
            if event.name == "x.txt":
                kinds.append(event.type.value)
        await handle.stop()
        assert kinds[0] == "create"
        assert await sbx.files.read("aw/x.txt") == "async"
        entries = await sbx.files.list("aw")
        assert [e.name for e in entries] == ["x.txt"] and entries[0].type == E2bFileType.FILE
        assert await sbx.files.exists("aw/x.txt")
        await sbx.files.remove("aw")
        assert not await sbx.files.exists("aw")

    asyncio.run(scenario())


def secured(module, config_module, token):
    """A sandbox object as the SDK builds it for a secured sandbox (the platform hands it the envd token)."""
    from e2b.envd.versions import ENVD_DEBUG_FALLBACK

    config = config_module.ConnectionConfig(extra_sandbox_headers={"X-Access-Token": token})
    return module.Sandbox(
        sandbox_id="debug_sandbox_id",
        sandbox_domain=None,
        envd_version=ENVD_DEBUG_FALLBACK,
        envd_access_token=token,
        traffic_access_token=None,
        connection_config=config,
    )


def test_a_token_protects_the_plane_and_signs_file_urls(make_server, monkeypatch):
    srv = make_server()
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setattr(e2b_config.ConnectionConfig, "envd_port", envd_port(srv))
    with pytest.raises(e2b.AuthenticationException):
        e2b.Sandbox.create().files.list(".")
    sbx = secured(e2b, e2b_config, TOKEN)
    sbx.files.write("secret.txt", "s3")
    assert [e.name for e in sbx.files.list(".")] == ["secret.txt"]
    assert httpx.get(sbx.download_url("secret.txt")).text == "s3"
    assert httpx.get(sbx.download_url("secret.txt", use_signature_expiration=60)).text == "s3"
    unsigned = sbx.download_url("secret.txt").split("&signature=")[0]
    assert httpx.get(unsigned).status_code == 401
    uploaded = httpx.post(sbx.upload_url("up.txt"), files={"file": ("up.txt", b"via url")})
    assert uploaded.status_code == 200, uploaded.text
    assert (srv.base / "up.txt").read_bytes() == b"via url"


def test_init_sets_a_token_variables_and_a_workdir(make_server, monkeypatch):
    srv = make_server(token=None)
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setattr(e2b_config.ConnectionConfig, "envd_port", envd_port(srv))
    (srv.base / "work").mkdir()
    url = srv.listeners["envd"]
    body = {"accessToken": "from-init", "envVars": {"GREETING": "hi"}, "defaultWorkdir": str(srv.base / "work")}
    assert httpx.post(f"{url}/init", json=body).status_code == 204
    assert httpx.post(f"{url}/init", json={"accessToken": "hijack"}).status_code == 401
    with pytest.raises(e2b.AuthenticationException):
        e2b.Sandbox.create().files.list(".")
    sbx = secured(e2b, e2b_config, "from-init")
    assert httpx.get(f"{url}/envs", headers={"X-Access-Token": "from-init"}).json() == {"GREETING": "hi"}
    sbx.files.write("w.txt", "relative paths stay under the base directory")
    sbx.files.write("work/in.txt", "x")
    assert sorted(e.name for e in sbx.files.list(".")) == ["w.txt", "work"]
    assert [e.name for e in sbx.files.list("")] == ["in.txt"], "an empty path is the default workdir"


# --- process.Process ------------------------------------------------------------------------


def running_with(marker: str) -> bool:
    """Whether any process on this machine has `marker` in its command line."""
    import pathlib

    for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                return True
        except OSError:
            continue
    return False


def gone(marker: str, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while running_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def eventually(predicate, timeout: float = 5.0):
    """Calls `predicate` (which asks the server) until it holds. For states no
    event announces, such as a killed process leaving List a moment after the
    client's own deadline fired."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not reached in time"


def first_output(handle, text: str) -> str:
    """Reads a handle's events until `text` was printed."""
    seen = ""
    for out, _, _ in handle:
        seen += out or ""
        if text in seen:
            return seen
    raise AssertionError(f"the stream ended without {text!r}: {seen!r}")


def sdk_of(sbx):
    return e2b if isinstance(sbx, e2b.Sandbox) else _standard


def test_run_reports_stdout_stderr_exit_code_env_and_cwd(sandbox):
    srv, sbx = sandbox
    (srv.base / "sub").mkdir()
    result = sbx.commands.run("echo out; echo err >&2; echo $GREETING; pwd", envs={"GREETING": "hi"}, cwd="sub")
    assert (result.stdout, result.stderr, result.exit_code) == (f"out\nhi\n{srv.base / 'sub'}\n", "err\n", 0)
    with pytest.raises(sdk_of(sbx).CommandExitException) as failed:
        sbx.commands.run("echo partial; exit 3")
    assert (failed.value.exit_code, failed.value.stdout) == (3, "partial\n")
    assert sbx.commands.run("pwd").stdout == f"{srv.base.parent}\n", "the user's home (its HOME) by default, as envd"


def test_a_timeout_raises_the_sdk_error_and_kills_the_command(sandbox):
    _, sbx = sandbox
    marker = f"timeout-marker-{time.monotonic_ns()}"
    started = time.monotonic()
    with pytest.raises(sdk_of(sbx).TimeoutException):
        sbx.commands.run(f"sleep 60 # {marker}; sleep 61", timeout=1)
    assert time.monotonic() - started < 10
    assert gone(marker), "the command's process group was killed"
    eventually(lambda: all(marker not in " ".join(p.args) for p in sbx.commands.list()))


def test_background_connect_list_kill(sandbox):
    _, sbx = sandbox
    marker = f"bg-marker-{time.monotonic_ns()}"
    handle = sbx.commands.run(f"echo started; sleep 60 # {marker}", background=True)
    first_output(handle, "started")
    listed = {p.pid: p for p in sbx.commands.list()}
    assert handle.pid in listed
    info = listed[handle.pid]
    assert (info.cmd, info.args[-1]) == ("/bin/bash", f"echo started; sleep 60 # {marker}")
    other = sbx.commands.run("sleep 30", background=True)
    for pid in (handle.pid, other.pid):
        os.kill(pid, 0)  # OS pids, as E2B's envd reports them: `kill -0 <pid>` names the process
    assert other.pid != handle.pid
    assert sbx.commands.kill(other.pid)
    again = sbx.commands.connect(handle.pid)
    assert sbx.commands.kill(handle.pid) is True
    with pytest.raises(sdk_of(sbx).CommandExitException) as killed:
        again.wait()
    assert killed.value.exit_code == -1 and "killed" in (killed.value.error or "")
    assert killed.value.stdout == "started\n", "Connect replays what ran before it"
    assert handle.pid not in {p.pid for p in sbx.commands.list()}
    assert gone(marker)
    assert sbx.commands.kill(handle.pid + 100) is False


def test_output_made_while_nobody_listens_is_replayed_on_connect(sandbox):
    _, sbx = sandbox
    handle = sbx.commands.run("read go; echo one; echo two >&2; echo three", background=True, stdin=True)
    handle.disconnect()
    sbx.commands.send_stdin(handle.pid, "go\n")
    result = sbx.commands.connect(handle.pid).wait()
    assert (result.stdout, result.stderr, result.exit_code) == ("one\nthree\n", "two\n", 0)
    again = sbx.commands.connect(handle.pid).wait()
    assert again.stdout == "one\nthree\n", "an ended process stays reachable"


def test_a_slowly_read_large_output_returns_every_byte(sandbox):
    """20 MB read by a deliberately slow reader: the stdout the SDK returns
    has the checksum computed inside the sandbox (the process waits for the
    reader rather than the daemon dropping what it has not read)."""
    _, sbx = sandbox
    received = 0

    def slow(chunk: str) -> None:
        nonlocal received
        if received == 0:
            time.sleep(1.0)  # the process writes far more than the replay buffer meanwhile
        elif received // MIB != (received + len(chunk)) // MIB:
            time.sleep(0.02)
        received += len(chunk)

    result = sbx.commands.run("seq 1 3000000; seq 1 3000000 | sha256sum >&2", on_stdout=slow, timeout=120)
    assert result.exit_code == 0
    assert len(result.stdout) == 22888896
    assert hashlib.sha256(result.stdout.encode()).hexdigest() == result.stderr.split()[0]


def test_a_connect_after_the_buffer_moved_on_raises_data_loss(sandbox):
    _, sbx = sandbox
    handle = sbx.commands.run("seq 1 1000000", background=True)
    assert len(handle.wait().stdout) == 6888896
    with pytest.raises(sdk_of(sbx).SandboxException) as lost:
        sbx.commands.connect(handle.pid).wait()
    assert "data_loss" in str(lost.value).lower() and " bytes of output (" in str(lost.value), str(lost.value)
    assert "exit status 0" in str(lost.value)


def test_send_stdin_and_close_it(sandbox):
    _, sbx = sandbox
    handle = sbx.commands.run("read a; echo got-$a; cat", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "first\n")
    sbx.commands.send_stdin(handle.pid, b"rest")
    if isinstance(sbx, e2b.Sandbox):
        sbx.commands.close_stdin(handle.pid)
        assert handle.wait().stdout == "got-first\nrest"
    else:
        first_output(handle, "rest")
        assert sbx.commands.kill(handle.pid)
        with pytest.raises(_standard.CommandExitException) as killed:
            handle.wait()
        assert killed.value.stdout == "got-first\nrest"


def test_pty_create_send_resize_kill(sandbox):
    _, sbx = sandbox
    module = sdk_of(sbx)
    terminal = sbx.pty.create(module.PtySize(rows=24, cols=80))
    sbx.pty.send_stdin(terminal.pid, b"echo pty-$((40+2))\n")
    sbx.pty.resize(terminal.pid, module.PtySize(rows=33, cols=101))
    sbx.pty.send_stdin(terminal.pid, b"stty size; echo done-$((1+1))\n")
    seen = b""
    for _, _, pty in terminal:
        seen += bytes(pty or b"")
        if b"done-2" in seen:
            break
    assert b"pty-42" in seen and b"33 101" in seen
    assert terminal.pid in {p.pid for p in sbx.commands.list()}
    assert sbx.pty.kill(terminal.pid)
    with pytest.raises(module.CommandExitException):
        terminal.wait()
    assert terminal.pid not in {p.pid for p in sbx.commands.list()}


def test_async_sdk_commands_and_pty(plane):
    async def scenario():
        sbx = await AsyncSandbox.create()
        result = await sbx.commands.run("echo async-$((20+1))")
        assert result.stdout == "async-21\n"
        handle = await sbx.commands.run("sleep 30", background=True)
        assert handle.pid in {p.pid for p in await sbx.commands.list()}
        assert await sbx.commands.kill(handle.pid)
        with pytest.raises(e2b.CommandExitException):
            await handle.wait()
        with pytest.raises(e2b.TimeoutException):
            await sbx.commands.run("sleep 30", timeout=1)
        data = asyncio.Queue()
        terminal = await sbx.pty.create(e2b.PtySize(rows=20, cols=70), on_data=data.put_nowait)
        await sbx.pty.send_stdin(terminal.pid, b"echo tty-$((3*3))\n")
        seen = b""
        while b"tty-9" not in seen:
            seen += bytes(await asyncio.wait_for(data.get(), 10))
        await sbx.pty.resize(terminal.pid, e2b.PtySize(rows=40, cols=90))
        assert await sbx.pty.kill(terminal.pid)
        with pytest.raises(e2b.CommandExitException):
            await terminal.wait()

    asyncio.run(scenario())


def test_protocol_points_recorded_from_a_real_envd(plane):
    """List's config key is `envs`; pids are OS pids; unknown pids are 404 not_found;
    SIGKILL ends a stream with an end event and empties List; Stat of nothing is not_found."""
    url = plane.listeners["envd"]
    headers = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}

    def call(method, body):
        return httpx.post(f"{url}/{method}", json=body, headers=headers)

    sbx = e2b.Sandbox.create()
    handle = sbx.commands.run("sleep 30", background=True, envs={"K": "v"})
    listed = call("process.Process/List", {}).json()["processes"]
    mine = next(p for p in listed if p["pid"] == handle.pid)
    assert mine["config"]["envs"] == {"K": "v"} and mine["config"]["cmd"] == "/bin/bash"
    assert isinstance(mine["pid"], int)
    os.kill(mine["pid"], 0)
    refused = call("process.Process/SendInput", {"process": {"pid": 999999}, "input": {"stdin": "eA=="}})
    assert (refused.status_code, refused.json()["code"]) == (404, "not_found")
    killed = call("process.Process/SendSignal", {"process": {"pid": handle.pid}, "signal": "SIGNAL_SIGKILL"})
    assert killed.status_code == 200
    with pytest.raises(e2b.CommandExitException) as ended:
        handle.wait()
    assert (ended.value.exit_code, ended.value.error) == (-1, "signal: killed"), "the stream ended with an end event"
    assert call("process.Process/List", {}).json() == {}
    stat = call("filesystem.Filesystem/Stat", {"path": "nothing/here"})
    assert (stat.status_code, stat.json()["code"]) == (404, "not_found")
