#!/usr/bin/env python3
"""File-transfer benchmark: ours against the Python reference and this machine's own limits.

Usage: bench/files.py --ours target/release/agent-sandbox-server --ref /tmp/ref/bin/agent-sandbox-server
       [--rounds 5] [--size BYTES] [--durability off|on|both] [--workloads up,down,json]

Starts the servers on loopback (ABX_SERVER_TOKEN set, fresh base directories under --workdir),
then measures, alternating ours and the baseline in every round (medians reported):
  * a 1 GiB streaming upload (PUT /files/content) against `dd` writing the same bytes to the
    same disk with the same durability: plain `dd` against the server's default (no sync),
    `dd conv=fsync` against a server started with ABX_SERVER_SYNC_WRITES=true (fdatasync
    before the rename). Every upload and every dd starts from a clean page cache state: the
    previous output is removed and `sync` runs, untimed;
  * a 1 GiB streaming download (GET /files/content) against sending the same cached file over
    loopback with sendfile(2) to the same receiver;
  * the server's peak RSS growth during each (VmHWM after resetting it, minus VmRSS before) and
    its CPU time per GiB (user + system, from /proc), which the machine's load disturbs less;
  * the reference's JSON/base64 transfers of a 5 MiB file, ours and the reference's
    (a fresh connection per request for both, bodies read but not decoded).
Prints the load average to stderr and markdown rows `| workload | ours | reference | ratio |`
(the ratio is ours over the baseline: above 1 is better). Standalone: stdlib only.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import read_head

TOKEN = "bench-token"
GIB = 1024**3
MIB = 1024**2
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary: str, base: Path, log: Path, env_extra: dict[str, str] | None = None) -> None:
        self.port, pty = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
        env.update(ABX_SERVER_TOKEN=TOKEN, ABX_SERVER_BASE_DIR=str(base), RUST_LOG="warn", ABX_CODE_PORT="off")
        env.update(env_extra or {})
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

    def cpu(self) -> float:
        """User plus system CPU seconds of the server so far (all threads)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS


class Sample:
    """One measured transfer of ours: seconds, peak RSS growth, CPU seconds."""

    def __init__(self, server: Server, run) -> None:
        before, cpu = server.reset_peak(), server.cpu()
        self.seconds = run()
        self.growth = server.peak() - before
        self.cpu = server.cpu() - cpu


def receive(sock: socket.socket, length: int, already: int = 0) -> None:
    buffer = bytearray(4 * MIB)
    view = memoryview(buffer)
    left = length - already
    while left > 0:
        n = sock.recv_into(view, min(len(buffer), left))
        if n == 0:
            raise RuntimeError(f"connection closed with {left} bytes left")
        left -= n


def http_download(port: int, path: str) -> float:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.perf_counter()
        sock.sendall(f"GET /files/content?path={path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        _, status, headers, rest = read_head(sock)
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
        _, status, _, _ = read_head(sock)
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


def dd_baseline(source: Path, target: Path, fsync: bool) -> float:
    command = ["dd", f"if={source}", f"of={target}", "bs=1M"] + (["conv=fsync"] if fsync else [])
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def clean(*paths: Path) -> None:
    """Removes earlier outputs and flushes every dirty page, so each write starts alike (untimed)."""
    for path in paths:
        path.unlink(missing_ok=True)
    os.sync()


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


def median(values: list[float]) -> float:
    return statistics.median(values)


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--workdir", default=None, help="where files go (default: a temp dir on /tmp's disk)")
    parser.add_argument("--size", type=int, default=GIB, help="streaming file size in bytes")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--durability",
        choices=["off", "on", "both"],
        default="both",
        help="upload with the server's default (off), with ABX_SERVER_SYNC_WRITES=true (on), or both",
    )
    parser.add_argument("--workloads", default="up,down,json", help="comma-separated: up, down, json")
    args = parser.parse_args()
    workloads = set(args.workloads.split(","))

    work = Path(args.workdir or tempfile.mkdtemp(prefix="abx-bench-files-"))
    ours_base, ref_base = work / "ours", work / "ref"
    ours_base.mkdir(parents=True, exist_ok=True)
    ref_base.mkdir(parents=True, exist_ok=True)
    source = work / "source.bin"
    rows: list[tuple[str, str, str, str]] = []
    mb = args.size / 1e6
    gib = args.size / GIB
    label = f"{args.size / GIB:g} GiB" if args.size >= GIB else f"{args.size / MIB:g} MiB"
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.durability]
    try:
        if workloads & {"up", "down"}:
            with open(source, "wb") as f:
                chunk = os.urandom(MIB)
                for _ in range(args.size // MIB):
                    f.write(chunk)
            warm(source)
        print(f"load average at start: {load()}", file=sys.stderr)
        if "up" in workloads:
            for sync in modes:
                env = {"ABX_SERVER_SYNC_WRITES": "true" if sync else "false"}
                ours = Server(args.ours, ours_base, work / "ours.log", env)
                try:
                    target, dd_target = ours_base / "up.bin", ours_base / "dd.bin"
                    samples, dd_times = [], []
                    for i in range(args.rounds):
                        for first in ([True, False] if i % 2 == 0 else [False, True]):
                            clean(target, dd_target)
                            if first:
                                samples.append(Sample(ours, lambda: http_upload(ours.port, str(target), source)))
                            else:
                                dd_times.append(dd_baseline(source, dd_target, sync))
                    clean(target, dd_target)
                finally:
                    ours.stop()
                up, dd = median([s.seconds for s in samples]), median(dd_times)
                what = "sync_writes on vs dd conv=fsync" if sync else "default (no sync) vs dd"
                rows.append((f"{label} upload, PUT /files/content, {what} (machine limit)", f"{mb / up:.0f} MB/s", f"{mb / dd:.0f} MB/s", f"{dd / up:.2f}"))
                rows.append((f"server CPU per GiB uploaded, {what.split(' vs')[0]}", f"{median([s.cpu for s in samples]) / gib:.2f} s", "—", "—"))
                rows.append((f"server RSS growth, {label} upload, {what.split(' vs')[0]} (max of {args.rounds})", f"{max(s.growth for s in samples) / MIB:.1f} MiB", "—", "—"))
        if "down" in workloads:
            ours = Server(args.ours, ours_base, work / "ours.log")
            try:
                shutil.copyfile(source, ours_base / "down.bin")
                warm(ours_base / "down.bin")
                samples, base_times = [], []
                for i in range(args.rounds):
                    for first in ([True, False] if i % 2 == 0 else [False, True]):
                        if first:
                            samples.append(Sample(ours, lambda: http_download(ours.port, f"{ours_base}/down.bin")))
                        else:
                            base_times.append(sendfile_baseline(ours_base / "down.bin"))
            finally:
                ours.stop()
            down, base = median([s.seconds for s in samples]), median(base_times)
            rows.append((f"{label} download, GET /files/content vs sendfile over loopback (machine limit)", f"{mb / down:.0f} MB/s", f"{mb / base:.0f} MB/s", f"{base / down:.2f}"))
            rows.append(("server CPU per GiB downloaded", f"{median([s.cpu for s in samples]) / gib:.2f} s", "—", "—"))
            rows.append((f"server RSS growth, {label} download (max of {args.rounds})", f"{max(s.growth for s in samples) / MIB:.1f} MiB", "—", "—"))
        if "json" in workloads:
            rows.extend(json_rows(args, work, ours_base, ref_base))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"load average at end: {load()}", file=sys.stderr)
    print("| workload | ours | reference | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def json_rows(args: argparse.Namespace, work: Path, ours_base: Path, ref_base: Path) -> list[tuple[str, str, str, str]]:
    """The 5 MiB JSON/base64 transfers, ours (default durability) and the reference's, alternating."""
    payload = os.urandom(5 * MIB)
    encoded = base64.b64encode(payload).decode()
    ours = Server(args.ours, ours_base, work / "ours.log", {"ABX_SERVER_SYNC_WRITES": "false"})
    ref = Server(args.ref, ref_base, work / "ref.log")
    servers = (("ours", ours, ours_base), ("ref", ref, ref_base))
    results: dict[tuple[str, str], list[float]] = {}
    try:
        bodies = {}
        for name, server, base_dir in servers:
            (base_dir / "j.bin").write_bytes(payload)
            bodies[name] = json.dumps({"path": f"{base_dir}/ju.bin", "content_base64": encoded}).encode()
            json_request(server.port, "POST", "/files/upload-stream", bodies[name])
            json_request(server.port, "GET", f"/files/download-stream?path={base_dir}/j.bin")
        for i in range(10):
            for name, server, base_dir in servers if i % 2 == 0 else servers[::-1]:
                results.setdefault((name, "up"), []).append(json_request(server.port, "POST", "/files/upload-stream", bodies[name]))
                results.setdefault((name, "down"), []).append(json_request(server.port, "GET", f"/files/download-stream?path={base_dir}/j.bin"))
    finally:
        ours.stop()
        ref.stop()
    rows = []
    for kind, what in (("up", "upload, POST /files/upload-stream"), ("down", "download, GET /files/download-stream")):
        o, r = median(results[("ours", kind)]), median(results[("ref", kind)])
        rows.append((f"5 MiB JSON/base64 {what}", f"{5 * MIB / 1e6 / o:.0f} MB/s ({o * 1000:.1f} ms)", f"{5 * MIB / 1e6 / r:.0f} MB/s ({r * 1000:.1f} ms)", f"{r / o:.1f}x"))
    return rows


if __name__ == "__main__":
    main()
