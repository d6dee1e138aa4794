"""envd parity: what E2B's own SDK suite expects of envd, driven with the real
``e2b`` SDK in its debug mode against the envd port of the server under test.

Terminals and processes as another user, working directories anywhere the
process's user may enter (unless a policy confines them), the defaults of a
started process, file metadata, watch events as envd delivers them, listing
order and argument sizes. The as-another-user cases need the server to run as
root (they use the ``nobody`` account) and are skipped otherwise.
"""

from __future__ import annotations

import json
import os
import pwd
import stat

import httpx
import pytest

import e2b
from e2b import FilesystemEventType as Ev
from e2b import connection_config as e2b_config
from e2b.sandbox.commands.command_handle import PtySize

ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="acting as another user needs the server to run as root")


def envd_url(srv) -> str:
    return srv.listeners["envd"]


def connect(srv, monkeypatch) -> e2b.Sandbox:
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setattr(e2b_config.ConnectionConfig, "envd_port", int(envd_url(srv).rsplit(":", 1)[1]))
    return e2b.Sandbox.create()


@pytest.fixture
def plane(make_server, monkeypatch):
    srv = make_server(token=None)
    return srv, connect(srv, monkeypatch)


def init(srv, **body) -> None:
    assert httpx.post(f"{envd_url(srv)}/init", json=body).status_code == 204


def pty_output(sbx, command: str, marker: str, **kwargs) -> str:
    """Runs ``command`` in a new terminal and returns its output up to ``marker``."""
    out = bytearray()
    handle = sbx.pty.create(PtySize(rows=24, cols=120), timeout=20, **kwargs)
    sbx.pty.send_stdin(handle.pid, f"{command}; echo {marker}-$((40+2))\nexit\n".encode())
    for _stdout, _stderr, data in handle:
        if data:
            out += data
        if f"{marker}-42".encode() in out:
            break
    handle.kill()
    return out.decode(errors="replace")


# --- terminals and working directories ---------------------------------------------------


@as_root
def test_terminals_and_processes_run_as_the_default_user(plane):
    srv, sbx = plane
    init(srv, defaultUser="nobody")
    text = pty_output(sbx, "id -un; pwd", "done", cwd="/")
    assert "nobody\r\n/\r\ndone-42" in text, text
    assert sbx.commands.run("id -un", cwd="/").stdout.strip() == "nobody"
    assert sbx.commands.run("id -un", user="root", cwd="/").stdout.strip() == "root"


def test_a_process_and_a_terminal_may_start_in_the_root_directory(plane):
    _srv, sbx = plane
    assert sbx.commands.run("pwd", cwd="/").stdout.strip() == "/"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout.strip() == "/tmp"
    assert "/" in pty_output(sbx, "pwd", "root", cwd="/")


@as_root
def test_the_working_directory_is_the_users_to_enter(plane, tmp_path):
    srv, sbx = plane
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    with pytest.raises(e2b.SandboxException, match="cannot enter the working directory"):
        sbx.commands.run("pwd", cwd=str(closed), user="nobody")
    assert sbx.commands.run("pwd", cwd=str(closed), user="root").stdout.strip() == str(closed)


def test_a_policy_still_confines_the_working_directory(make_server, monkeypatch, tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"endpoints": {"process_start": {"paths": {"allow": [str(tmp_path)]}}}}))
    srv = make_server(token=None, args=["--policy", str(policy)])
    sbx = connect(srv, monkeypatch)
    with pytest.raises(e2b.SandboxException, match="outside the allowed directories"):
        sbx.commands.run("pwd", cwd="/")
    assert sbx.commands.run("pwd", cwd=str(tmp_path)).stdout.strip() == str(tmp_path)


@pytest.mark.parametrize("preset", ["read-only", "locked"])
def test_presets_still_hold_on_the_envd_port(make_server, monkeypatch, preset):
    srv = make_server(token=None, args=["--preset", preset])
    sbx = connect(srv, monkeypatch)
    with pytest.raises(e2b.SandboxException):
        sbx.commands.run("pwd", cwd="/")
    with pytest.raises(e2b.SandboxException):
        sbx.pty.create(PtySize(rows=24, cols=80), cwd="/")


def test_a_started_process_has_its_users_home_and_login_variables(plane):
    srv, sbx = plane
    me = pwd.getpwuid(os.geteuid()).pw_name
    home = str(srv.base.parent)  # the server's own user: the HOME it runs with (conftest sets it)
    result = sbx.commands.run('pwd; echo "$USER|$LOGNAME|$HOME|$SHELL"; echo "$PATH"', envs={"SHELL": "/bin/sh"})
    where, names, path = result.stdout.strip().split("\n")
    assert where == home, "no cwd: the user's home"
    assert names == f"{me}|{me}|{home}|/bin/sh", "USER and LOGNAME set, the request's own SHELL kept"
    assert "/usr/bin" in path.split(":")


@as_root
def test_another_users_process_has_that_users_variables(plane):
    srv, sbx = plane
    init(srv, defaultUser="nobody", defaultWorkdir="/")
    nobody = pwd.getpwnam("nobody")
    result = sbx.commands.run('pwd; echo "$USER|$HOME|$SHELL"')
    assert result.stdout.split() == ["/", f"nobody|{nobody.pw_dir}|{nobody.pw_shell}"]


# --- argument sizes -----------------------------------------------------------------------


def test_arguments_as_large_as_the_kernel_takes(plane):
    _srv, sbx = plane
    long = "a" * 8191
    assert sbx.commands.run(f'printf "{long}\\xe2"').stdout == long + "\ufffd"
    big = "b" * (128 * 1024 - 100)
    assert len(sbx.commands.run(f"printf %s {big}").stdout) == len(big)
    with pytest.raises(e2b.InvalidArgumentException, match="per argument"):
        sbx.commands.run(f"printf %s {'c' * (128 * 1024)}")


# --- listing, metadata --------------------------------------------------------------------


def test_list_dir_is_sorted_by_name(plane):
    srv, sbx = plane
    for name in ["zeta", "alpha.txt", "Beta", "mid"]:
        sbx.files.write(f"sorted/{name}", "x")
    sbx.files.make_dir("sorted/alpha")
    sbx.files.write("sorted/alpha/inner", "x")
    assert [e.name for e in sbx.files.list("sorted")] == ["Beta", "alpha", "alpha.txt", "mid", "zeta"]
    deep = [e.path.rsplit("sorted/", 1)[1] for e in sbx.files.list("sorted", depth=2)]
    assert deep == ["Beta", "alpha", "alpha/inner", "alpha.txt", "mid", "zeta"]


def xattrs_supported(directory) -> bool:
    probe = directory / ".xattr-probe"
    probe.write_text("")
    try:
        os.setxattr(probe, "user.e2b.probe", b"1")
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


def test_metadata_is_kept_as_extended_attributes(plane):
    srv, sbx = plane
    if not xattrs_supported(srv.base):
        pytest.skip("the base directory's file system keeps no user extended attributes")
    meta = {"author": "mish", "purpose": "upload"}
    info = sbx.files.write("m.txt", "content", metadata=meta)
    assert info.metadata == meta
    assert os.getxattr(srv.base / "m.txt", "user.e2b.author") == b"mish"
    assert sbx.files.get_info("m.txt").metadata == meta
    raw = sbx.files.write("raw.txt", "x", metadata={"k": "v"}, use_octet_stream=True)
    assert raw.metadata == {"k": "v"}
    listed = {e.name: e.metadata for e in sbx.files.list(".")}
    assert listed["m.txt"] == meta and listed["raw.txt"] == {"k": "v"}
    assert sbx.files.rename("m.txt", "n.txt").metadata == meta
    assert sbx.files.write("n.txt", "again").metadata is None, "an overwrite replaces the whole set"
    assert sbx.files.get_info("n.txt").metadata is None
    os.setxattr(srv.base / "n.txt", "user.e2b.set-by", b"setfattr")
    os.setxattr(srv.base / "n.txt", "user.other", b"not ours")
    assert sbx.files.get_info("n.txt").metadata == {"set-by": "setfattr"}
    many = sbx.files.write_files(
        [{"path": "w1.txt", "data": "1"}, {"path": "w2.txt", "data": "2"}], metadata={"source": "suite"}
    )
    assert [w.metadata for w in many] == [{"source": "suite"}] * 2


def test_invalid_metadata_is_refused_and_nothing_is_written(plane):
    srv, sbx = plane
    url = f"{envd_url(srv)}/files"
    refused = httpx.post(url, params={"path": "bad.txt"}, content=b"x",
                         headers={"content-type": "application/octet-stream", "X-Metadata-Key": "caf\u00e9".encode()})
    assert refused.status_code == 400 and "printable" in refused.json()["message"]
    too_big = {f"X-Metadata-K{i}": "v" * 500 for i in range(10)}
    refused = httpx.post(url, params={"path": "bad.txt"}, content=b"x",
                         headers={"content-type": "application/octet-stream", **too_big})
    assert refused.status_code == 400
    assert not (srv.base / "bad.txt").exists()


# --- watch --------------------------------------------------------------------------------


def test_a_polled_watcher_sees_a_write_as_soon_as_it_returns(plane):
    srv, sbx = plane
    sbx.files.make_dir("w")
    handle = sbx.files.watch_dir("w")
    sbx.files.write("w/f.txt", "new file")
    # No retry loop: the events are there on the first poll after the write returned.
    assert [(e.name, e.type) for e in handle.get_new_events()] == [
        ("f.txt", Ev.CREATE), ("f.txt", Ev.CHMOD), ("f.txt", Ev.WRITE)
    ]
    sbx.files.write("w/f.txt", "changed")
    assert [(e.name, e.type) for e in handle.get_new_events()] == [("f.txt", Ev.WRITE)]
    os.chmod(srv.base / "w" / "f.txt", stat.S_IRUSR | stat.S_IWUSR)
    assert [(e.name, e.type) for e in handle.get_new_events()] == [("f.txt", Ev.CHMOD)]
    sbx.files.rename("w/f.txt", "w/g.txt")
    assert [(e.name, e.type) for e in handle.get_new_events()] == [("f.txt", Ev.RENAME), ("g.txt", Ev.CREATE)]
    sbx.files.remove("w/g.txt")
    assert [(e.name, e.type) for e in handle.get_new_events()] == [("g.txt", Ev.REMOVE)]
    handle.stop()


def test_a_recursive_watcher_sees_a_new_directorys_files(plane):
    _srv, sbx = plane
    sbx.files.make_dir("r")
    handle = sbx.files.watch_dir("r", recursive=True)
    sbx.files.make_dir("r/nested")
    sbx.files.write("r/nested/f.txt", "x")
    seen = [(e.name, e.type) for e in handle.get_new_events()]
    assert ("nested", Ev.CREATE) in seen and ("nested/f.txt", Ev.WRITE) in seen, seen
    sbx.files.write("r/nested/g.txt", "y")
    assert [(e.name, e.type) for e in handle.get_new_events()] == [
        ("nested/g.txt", Ev.CREATE), ("nested/g.txt", Ev.CHMOD), ("nested/g.txt", Ev.WRITE)
    ]
    handle.stop()
