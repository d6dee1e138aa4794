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
    assert kinds[:2] == ["create", "write"]
    sbx.files.remove("watched/new.txt")
    wait_for(lambda seen: any(e.name == "new.txt" and e.type.value == "remove" for e in seen), handle.get_new_events)
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
