#!/usr/bin/env python3
"""File-transfer benchmark: ours against the Python reference and this machine's own limits.

Usage: bench/files.py --ours target/release/agent-sandbox-server --ref /tmp/ref/bin/agent-sandbox-server

Starts both servers on loopback (ABX_SERVER_TOKEN set, fresh base directories under --workdir),
then measures:
  * a 1 GiB streaming upload (PUT /files/content) against `dd ... conv=fsync` writing the same
    bytes to the same disk (the server fdatasyncs before renaming into place: same durability);
  * a 1 GiB streaming download (GET /files/content) against sending the same cached file over
    loopback with sendfile(2) to the same receiver;
  * the server's peak RSS growth during each (VmHWM after resetting it, minus VmRSS before);
  * the reference's JSON/base64 transfers of a 5 MiB file, ours and the reference's
    (a fresh connection per request for both, bodies read but not decoded).
Prints markdown rows `| workload | ours | reference | ratio |`. Standalone: stdlib only.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

TOKEN = "bench-token"
GIB = 1024**3
MIB = 1024**2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary: str, base: Path, log: Path) -> None:
        self.port, pty = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
        env.update(ABX_SERVER_TOKEN=TOKEN, ABX_SERVER_BASE_DIR=str(base), RUST_LOG="warn")
        args = [binary, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--pty-port", str(pty)]
        self.process = subprocess.Popen(args, env=env, cwd=base, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{binary} did not start; see {log}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def _status(self, key: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def reset_peak(self) -> int:
        """Resets the peak RSS (VmHWM) and returns the current RSS."""
        try:
            Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")
        except OSError:
            pass
        return self._status("VmRSS")

    def peak(self) -> int:
        return self._status("VmHWM")


def receive(sock: socket.socket, length: int, already: int = 0) -> None:
    buffer = bytearray(4 * MIB)
    view = memoryview(buffer)
    left = length - already
    while left > 0:
        n = sock.recv_into(view, min(len(buffer), left))
        if n == 0:
            raise RuntimeError(f"connection closed with {left} bytes left")
        left -= n


def read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed in the headers")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return status, headers, rest


def http_download(port: int, path: str) -> float:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.perf_counter()
        sock.sendall(f"GET /files/content?path={path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        status, headers, rest = read_head(sock)
        assert status == 200, status
        receive(sock, int(headers["content-length"]), len(rest))
        return time.perf_counter() - started


def http_upload(port: int, path: str, source: Path) -> float:
    size = source.stat().st_size
    with socket.create_connection(("127.0.0.1", port)) as sock, open(source, "rb") as f:
        started = time.perf_counter()
        head = f"PUT /files/content?path={path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {size}\r\n\r\n"
        sock.sendall(head.encode())
        sock.sendfile(f)
        status, _, _ = read_head(sock)
        assert status in (200, 201), status
        return time.perf_counter() - started


def sendfile_baseline(source: Path) -> float:
    """The same cached file over loopback with sendfile(2), into the same receiver."""
    size = source.stat().st_size
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, open(source, "rb") as f:
            conn.sendfile(f)

    thread = threading.Thread(target=serve)
    thread.start()
    with socket.create_connection(listener.getsockname()) as sock:
        started = time.perf_counter()
        receive(sock, size)
        elapsed = time.perf_counter() - started
    thread.join()
    listener.close()
    return elapsed


def dd_baseline(source: Path, target: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["dd", f"if={source}", f"of={target}", "bs=1M", "conv=fsync"], check=True, capture_output=True)
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


def json_request(port: int, method: str, url: str, body: bytes | None = None) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    started = time.perf_counter()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    conn.request(method, url, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    elapsed = time.perf_counter() - started
    conn.close()
    assert response.status == 200, (response.status, data[:200])
    return elapsed


def warm(path: Path) -> None:
    """Reads a file once so the page cache holds it."""
    with open(path, "rb") as f:
        while f.read(8 * MIB):
            pass


def best(times: list[float]) -> float:
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--workdir", default=None, help="where files go (default: a temp dir on /tmp's disk)")
    parser.add_argument("--size", type=int, default=GIB, help="streaming file size in bytes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="abx-bench-files-"))
    ours_base, ref_base = work / "ours", work / "ref"
    ours_base.mkdir(parents=True, exist_ok=True)
    ref_base.mkdir(parents=True, exist_ok=True)
    source = work / "source.bin"
    with open(source, "wb") as f:
        chunk = os.urandom(MIB)
        for _ in range(args.size // MIB):
            f.write(chunk)
    warm(source)
    rows: list[tuple[str, str, str, str]] = []
    ours = Server(args.ours, ours_base, work / "ours.log")
    ref = Server(args.ref, ref_base, work / "ref.log")
    try:
        mb = args.size / 1e6
        label = f"{args.size / GIB:g} GiB" if args.size >= GIB else f"{args.size / MIB:g} MiB"
        up_times, up_growth = [], []
        for i in range(args.rounds):
            before = ours.reset_peak()
            up_times.append(http_upload(ours.port, f"{ours_base}/up{i}.bin", source))
            up_growth.append(ours.peak() - before)
            (ours_base / f"up{i}.bin").unlink()
        dd = best([dd_baseline(source, ours_base / "dd.bin") for _ in range(args.rounds)])
        up = best(up_times)
        rows.append((f"{label} upload, PUT /files/content vs dd conv=fsync (machine limit)", f"{mb / up:.0f} MB/s", f"{mb / dd:.0f} MB/s", f"{dd / up:.2f}"))
        shutil.copyfile(source, ours_base / "down.bin")
        warm(ours_base / "down.bin")
        down_times, down_growth = [], []
        for _ in range(args.rounds):
            before = ours.reset_peak()
            down_times.append(http_download(ours.port, f"{ours_base}/down.bin"))
            down_growth.append(ours.peak() - before)
        base = best([sendfile_baseline(ours_base / "down.bin") for _ in range(args.rounds)])
        down = best(down_times)
        rows.append((f"{label} download, GET /files/content vs sendfile over loopback (machine limit)", f"{mb / down:.0f} MB/s", f"{mb / base:.0f} MB/s", f"{base / down:.2f}"))
        rows.append((f"server RSS growth, {label} upload (max of {args.rounds})", f"{max(up_growth) / MIB:.1f} MiB", "—", "—"))
        rows.append((f"server RSS growth, {label} download (max of {args.rounds})", f"{max(down_growth) / MIB:.1f} MiB", "—", "—"))

        payload = os.urandom(5 * MIB)
        (ours_base / "j.bin").write_bytes(payload)
        (ref_base / "j.bin").write_bytes(payload)
        encoded = base64.b64encode(payload).decode()
        for name, server, base_dir in (("ours", ours, ours_base), ("ref", ref, ref_base)):
            body = json.dumps({"path": f"{base_dir}/ju.bin", "content_base64": encoded}).encode()
            json_request(server.port, "POST", "/files/upload-stream", body)
            json_request(server.port, "GET", f"/files/download-stream?path={base_dir}/j.bin")
        results = {}
        for name, server, base_dir in (("ours", ours, ours_base), ("ref", ref, ref_base)):
            body = json.dumps({"path": f"{base_dir}/ju.bin", "content_base64": encoded}).encode()
            results[(name, "up")] = best([json_request(server.port, "POST", "/files/upload-stream", body) for _ in range(10)])
            results[(name, "down")] = best([json_request(server.port, "GET", f"/files/download-stream?path={base_dir}/j.bin") for _ in range(10)])
        for kind, what in (("up", "upload, POST /files/upload-stream"), ("down", "download, GET /files/download-stream")):
            o, r = results[("ours", kind)], results[("ref", kind)]
            rows.append((f"5 MiB JSON/base64 {what}", f"{5 * MIB / 1e6 / o:.0f} MB/s ({o * 1000:.1f} ms)", f"{5 * MIB / 1e6 / r:.0f} MB/s ({r * 1000:.1f} ms)", f"{r / o:.1f}x"))
    finally:
        ours.stop()
        ref.stop()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print("| workload | ours | reference | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
