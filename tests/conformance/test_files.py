"""file_ops conformance: every ServerFilesApi method of the real client, happy paths and errors."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import tarfile
import threading
import time
import zipfile

import pytest
from agent_sandbox.models.errors import (
    FileNotFoundError_,
    FilePolicyDeniedError,
    PayloadTooLargeError,
    ServerAPIError,
)

MIB = 1024 * 1024


def blob(size: int, seed: int = 0) -> bytes:
    return bytes((i * 31 + seed) % 256 for i in range(size))


@pytest.fixture
def files(server):
    return server.client().files


def test_list_and_stat(server, files):
    (server.base / "d" / "sub").mkdir(parents=True)
    (server.base / "d" / "a.txt").write_text("abc")
    entries = files.list_sync("d")
    assert sorted((e.name, e.type, e.is_dir) for e in entries) == [("a.txt", "file", False), ("sub", "directory", True)]
    assert {e.name for e in files.list_sync(str(server.base), recursive=True)} == {"d", "a.txt", "sub"}
    assert len(files.list_sync("d", max_entries=1)) == 1
    info = files.stat_sync("d/a.txt")
    assert (info.name, info.path, info.type, info.size, info.exists) == ("a.txt", str(server.base / "d" / "a.txt"), "file", 3, True)
    assert len(info.permissions) == 3 and info.modified.endswith("+00:00")
    missing = files.stat_sync("d/nope")
    assert (missing.exists, missing.type) == (False, "unknown")
    assert files.exists_sync("d/a.txt") is True
    assert files.exists_sync("d/nope") is False


def test_listing_a_missing_directory_is_file_not_found(files):
    with pytest.raises(FileNotFoundError_):
        files.list_sync("missing")


@pytest.mark.parametrize(
    "path", ["../outside", "/etc/passwd", "d/../../x", "/tmp", "./../../etc", "/proc/self/environ", "escape/passwd"]
)
def test_paths_outside_the_base_dir_are_denied(server, files, path):
    (server.base / "d").mkdir()
    (server.base / "escape").symlink_to("/etc")
    with pytest.raises(FilePolicyDeniedError) as caught:
        files.stat_sync(path)
    assert caught.value.status_code == 403
    assert caught.value.error_code in {"path_not_allowed", "path_denied"}
    with pytest.raises(FilePolicyDeniedError):
        files.exists_sync(path)
    with pytest.raises(FilePolicyDeniedError):
        files.upload_sync(path + "-new", b"x")
    with pytest.raises(FilePolicyDeniedError):
        files.download_sync(path)


def test_encoded_traversal_stays_a_name(server, files):
    info = files.stat_sync("%2e%2e%2fetc")
    assert info.exists is False
    assert info.path == str(server.base / "%2e%2e%2fetc")


def test_invalid_paths_are_value_errors(files):
    with pytest.raises(ServerAPIError) as caught:
        files.stat_sync("a\x00b")
    assert (caught.value.status_code, caught.value.error_code) == (400, "invalid_path")
    with pytest.raises(ServerAPIError) as caught:
        files.stat_sync("a" * 5000)
    assert caught.value.error_code == "invalid_path"


def test_mkdir_delete_move(server, files):
    made = files.mkdir_sync("x/y/z")
    assert (made.path, made.created) == (str(server.base / "x" / "y" / "z"), True)
    assert files.mkdir_sync("x/y/z").created is True
    files.upload_sync("x/f.txt", "hello")
    moved = files.move_sync("x/f.txt", "x/y/g.txt")
    assert (moved.source, moved.destination) == (str(server.base / "x" / "f.txt"), str(server.base / "x" / "y" / "g.txt"))
    assert files.read_text_sync("x/y/g.txt") == "hello"
    with pytest.raises(FileNotFoundError_):
        files.move_sync("x/nope", "x/other")
    with pytest.raises(FilePolicyDeniedError):
        files.move_sync("x/y/g.txt", "/etc/g.txt")
    deleted = files.delete_sync("x")
    assert (deleted.path, deleted.deleted) == (str(server.base / "x"), True)
    assert not (server.base / "x").exists()
    with pytest.raises(FileNotFoundError_):
        files.delete_sync("x")
    with pytest.raises(FilePolicyDeniedError) as caught:
        files.delete_sync(str(server.base))
    assert caught.value.error_code == "path_denied"


def test_search(server, files):
    (server.base / "s" / "deep").mkdir(parents=True)
    (server.base / "s" / "a.py").write_text("x")
    (server.base / "s" / "deep" / "b.py").write_text("y")
    (server.base / "s" / "c.txt").write_text("z")
    found = files.search_sync("s", "*.py")
    assert sorted(hit.name for hit in found.results) == ["a.py", "b.py"]
    assert found.timed_out is False
    assert [hit.name for hit in files.search_sync("s", "*.py", max_depth=1).results] == ["a.py"]
    assert len(files.search_sync("s", "*", max_results=1).results) == 1
    with pytest.raises(FileNotFoundError_):
        files.search_sync("nope", "*")


@pytest.mark.parametrize("size", [0, 1, 3 * 1024 + 7, 5 * MIB])
def test_upload_download_round_trips_are_byte_exact(files, size):
    data = blob(size, seed=size % 7)
    result = files.upload_sync(f"rt/{size}.bin", data)
    assert result.size == size
    assert files.download_sync(f"rt/{size}.bin") == data


def test_text_and_local_files(server, files, tmp_path):
    files.upload_sync("t/note.txt", "héllo\n")
    assert files.read_text_sync("t/note.txt") == "héllo\n"
    local = tmp_path / "local.bin"
    local.write_bytes(blob(2 * MIB + 3, seed=9))
    assert files.upload_file_sync(str(local), "t/copy.bin").size == 2 * MIB + 3
    out = tmp_path / "out.bin"
    assert files.download_file_sync("t/copy.bin", str(out)) == 2 * MIB + 3
    assert out.read_bytes() == local.read_bytes()
    with pytest.raises(FileNotFoundError_):
        files.download_sync("t/missing.bin")
    with pytest.raises(FileNotFoundError_):
        files.read_text_sync("t")


def test_overwrite_is_refused_when_the_policy_says_so_and_oversize_bodies_are_413(server, files):
    files.upload_sync("o/file.txt", b"first")
    files.upload_sync("o/file.txt", b"second")
    assert files.download_sync("o/file.txt") == b"second"
    with pytest.raises(PayloadTooLargeError) as caught:
        files.upload_sync("o/huge.bin", b"\0" * (8 * MIB))
    assert caught.value.status_code == 413
    assert not (server.base / "o" / "huge.bin").exists()


def test_symlink_escape_is_refused_for_writes(server, files):
    (server.base / "link").symlink_to("/tmp")
    with pytest.raises(FilePolicyDeniedError) as caught:
        files.upload_sync("link/escape.txt", b"x")
    assert caught.value.error_code == "path_not_allowed"


def test_archive(server, files):
    (server.base / "ar" / "sub").mkdir(parents=True)
    (server.base / "ar" / "a.txt").write_text("alpha")
    (server.base / "ar" / "sub" / "b.txt").write_text("beta")
    (server.base / "ar" / "leak").symlink_to("/etc/passwd")
    tgz = files.archive_sync(["ar"])
    assert tgz.format == "tar.gz" and tgz.size == len(tgz.data)
    with tarfile.open(fileobj=io.BytesIO(tgz.data)) as tar:
        names = sorted(m.name.rstrip("/") for m in tar.getmembers())
        assert names == ["ar", "ar/a.txt", "ar/sub", "ar/sub/b.txt"]
        assert tar.extractfile("ar/a.txt").read() == b"alpha"
    zipped = files.archive_sync(["ar/sub", "ar/a.txt"], format="zip")
    with zipfile.ZipFile(io.BytesIO(zipped.data)) as zf:
        assert sorted(zf.namelist()) == ["a.txt", "sub/", "sub/b.txt"]
        assert zf.read("sub/b.txt") == b"beta"
    with pytest.raises(ServerAPIError) as caught:
        files.archive_sync(["ar"], format="rar")
    assert caught.value.status_code == 400
    with pytest.raises(FileNotFoundError_):
        files.archive_sync(["nope"])
    with pytest.raises(FilePolicyDeniedError):
        files.archive_sync(["/etc"])


def test_watch_for_collects_created_modified_deleted(server, files):
    (server.base / "w").mkdir()

    def act() -> None:
        time.sleep(0.5)
        (server.base / "w" / "new.txt").write_text("1")
        time.sleep(0.3)
        with open(server.base / "w" / "new.txt", "a") as f:
            f.write("more")
        time.sleep(0.6)
        os.remove(server.base / "w" / "new.txt")

    worker = threading.Thread(target=act)
    worker.start()
    events = files.watch_for_sync("w", 2.5)
    worker.join()
    path = str(server.base / "w" / "new.txt")
    kinds = [e.type.value for e in events if e.path == path]
    assert kinds[0] == "created" and kinds[-1] == "deleted" and "modified" in kinds, kinds
    assert all(e.is_dir is False for e in events)


def test_watch_streams_until_closed(server):
    (server.base / "w2").mkdir()

    async def scenario() -> list:
        client = server.client()
        seen = []

        async def keep_making() -> None:
            # The client yields no "ready" event: create until the watch reports one.
            for i in range(100):
                (server.base / "w2" / f"inner{i}").mkdir()
                await asyncio.sleep(0.2)

        maker = asyncio.create_task(keep_making())
        async with contextlib.aclosing(client.files.watch("w2", recursive=True, timeout=30)) as stream:
            async for event in stream:
                seen.append(event)
                break
        maker.cancel()
        return seen

    started = time.monotonic()
    seen = asyncio.run(scenario())
    assert time.monotonic() - started < 10, "closing the stream ends the watch"
    assert (seen[-1].type.value, seen[-1].is_dir) == ("created", True)
    assert "inner" in seen[-1].path
    with pytest.raises(FileNotFoundError_):
        server.client().files.watch_for_sync("nope", 0.2)
