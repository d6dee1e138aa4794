"""Shared helpers of the side-by-side benchmarks (bench/run).

Every workload script `bench/<name>.py` takes `--ours BIN --ref BIN` and
prints markdown rows `| workload | ours | reference | ratio |`; `bench/run`
runs them all. Scripts import this module (bench/ is on `PYTHONPATH`):

    from common import Server, alternate, parse_args, row

    args = parse_args(__doc__)
    def health_ms(server): ...
    ours, ref = alternate(args, health_ms, rounds=5)
    print(row("GET /health latency", ours, ref, "ms", better="lower"))

Everything stays on loopback, and every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
TOKEN = "bench-token-6b1f"
#: A server that is not healthy by then is reported as failed.
START_TIMEOUT = 30.0


def parse_args(description: str | None = None) -> argparse.Namespace:
    """The workload scripts' common arguments: `--ours BIN --ref BIN`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--ours", required=True, help="our agent-sandbox-server binary")
    parser.add_argument("--ref", required=True, help="the reference agent-sandbox-server (Python) entry point")
    return parser.parse_args()


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def http_get(port: int, path: str, token: str | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    """One GET on a fresh connection; returns the status and the body."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@dataclass
class Server:
    """One running server, ours or the reference, on loopback ports.

    `name` is "ours" or "reference". The server gets a fresh base directory,
    the token `TOKEN`, and discards its logs (both the same way).
    """

    name: str
    process: subprocess.Popen
    port: int
    base: Path
    started: float
    ready_after: float = 0.0
    _tmp: Any = field(default=None, repr=False)

    @classmethod
    def start(cls, name: str, binary: str, *, env: dict[str, str] | None = None, args: list[str] | None = None) -> Server:
        """Starts `binary serve` on free ports and waits until `/health` answers 200."""
        tmp = tempfile.TemporaryDirectory(prefix=f"bench-{name}-")
        base = Path(tmp.name) / "base"
        base.mkdir()
        port, pty_port = free_port(), free_port()
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
        child_env.update({"ABX_SERVER_TOKEN": TOKEN, "ABX_SERVER_BASE_DIR": str(base)})
        child_env.update(env or {})
        command = [binary, "serve", "--host", HOST, "--port", str(port), "--pty-port", str(pty_port)]
        command += ["--base-dir", str(base), *(args or [])]
        started = time.perf_counter()
        process = subprocess.Popen(
            command,
            cwd=tmp.name,  # never inside a package directory
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        server = cls(name, process, port, base, started, _tmp=tmp)
        server.ready_after = server._wait_healthy()
        return server

    def _wait_healthy(self) -> float:
        """Polls `/health` until it answers 200; returns seconds since spawn."""
        deadline = self.started + START_TIMEOUT
        while time.perf_counter() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode} before it was healthy")
            try:
                if http_get(self.port, "/health", timeout=1.0)[0] == 200:
                    return time.perf_counter() - self.started
            except OSError:
                pass
            time.sleep(0.001)
        self.stop()
        raise RuntimeError(f"{self.name} not healthy within {START_TIMEOUT} s")

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def rss_bytes(self) -> int:
        """Resident memory of the server and every descendant, from /proc."""
        return sum(rss_of(pid) for pid in [self.process.pid, *descendants(self.process.pid)])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; removes the base directory."""
        stop_process(self.process)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s, and reaps it."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def read_head(sock: socket.socket) -> tuple[str, int, dict[str, str], bytes]:
    """Reads an HTTP response head: (version, status, lower-cased header fields, body bytes read past it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ", 2)[:2]
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return version, int(status), fields, rest


def rss_of(pid: int) -> int:
    """VmRSS of one process in bytes (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    """Every descendant PID of `pid`, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alternate(
    args: argparse.Namespace,
    measure: Callable[[Server], float | None],
    *,
    rounds: int = 3,
    fresh: bool = True,
    env: dict[str, str] | None = None,
) -> tuple[float | None, float | None]:
    """Runs `measure` on ours and on the reference in alternation, `rounds`
    times each (the side that goes first alternates too), and returns the
    medians. With `fresh`, every measurement gets a newly started server.
    `measure` returns None when the workload is not available (e.g. 501)."""
    results = alternate_all({"ours": args.ours, "reference": args.ref}, measure, rounds=rounds, fresh=fresh, env=env)
    return median_or_none(results["ours"]), median_or_none(results["reference"])


def alternate_all(
    binaries: dict[str, str],
    measure: Callable[[Server], float | None],
    *,
    rounds: int = 3,
    fresh: bool = True,
    env: dict[str, str] | None = None,
) -> dict[str, list[float | None]]:
    """`alternate` over any number of servers (`name -> binary`): each round
    measures every one, the order rotating from round to round; returns every
    measurement by name."""
    names = list(binaries)
    results: dict[str, list[float | None]] = {name: [] for name in names}
    servers: dict[str, Server] = {}
    try:
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                if fresh or name not in servers:
                    servers[name] = Server.start(name, binaries[name], env=env)
                results[name].append(measure(servers[name]))
                if fresh:
                    servers.pop(name).stop()
    finally:
        for server in servers.values():
            server.stop()
    return results


def percentile(values: list[float], p: float) -> float:
    """The `p`th percentile of `values` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def each_side(args: argparse.Namespace, label: str, run: Callable[[str, str, Path], dict[str, float]]) -> tuple[dict, dict]:
    """`run(name, binary, scratch directory)` for ours, then the reference;
    a side that fails is reported on stderr and gives `{}` (its rows read n/a)."""
    results = {}
    for name, binary in (("ours", args.ours), ("reference", args.ref)):
        with tempfile.TemporaryDirectory(prefix=f"bench-{label}-{name}-") as tmp:
            try:
                results[name] = run(name, binary, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - a side that cannot run is reported, not fatal
                print(f"{label}: {name} failed: {exc}", file=sys.stderr)
                results[name] = {}
    return results["ours"], results["reference"]


def load_average() -> float:
    """The machine's one-minute load average (other work skews a round)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def median_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known and len(known) == len(values) else None


@dataclass
class WrkResult:
    """What wrk measured."""

    requests_per_second: float
    mean_ms: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int


_WRK_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def wrk(
    url: str,
    *,
    seconds: int = 5,
    connections: int = 16,
    threads: int = 2,
    headers: dict[str, str] | None = None,
    script: str | None = None,
) -> WrkResult:
    """Runs wrk against `url` (loopback only), with a Lua `script` if given, and parses its report."""
    if not url.startswith(f"http://{HOST}:"):
        raise ValueError("benchmarks only target loopback")
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk is not installed (apt-get install -y wrk)")
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "5s"]
    for key, value in (headers or {}).items():
        command += ["-H", f"{key}: {value}"]
    if script:
        command += ["-s", script]
    out = subprocess.run(command + [url], capture_output=True, text=True, timeout=seconds + 30, check=True).stdout

    def latency(percent: str) -> float:
        m = re.search(rf"^\s*{percent}%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)
        return float(m.group(1)) * _WRK_UNITS[m.group(2)] if m else float("nan")

    mean = re.search(r"^\s*Latency\s+([\d.]+)(us|ms|s|m)\s", out, re.M)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors += int(non_2xx.group(1)) if non_2xx else 0
    return WrkResult(
        requests_per_second=float(rps.group(1)) if rps else 0.0,
        mean_ms=float(mean.group(1)) * _WRK_UNITS[mean.group(2)] if mean else float("nan"),
        p50_ms=latency("50"),
        p99_ms=latency("99"),
        requests=int(total.group(1)) if total else 0,
        errors=errors,
    )


def fmt(value: float | None, unit: str) -> str:
    """A figure with its unit, or n/a."""
    if value is None:
        return "n/a"
    if unit in ("req/s", "MB/s") or value >= 100:
        return f"{value:,.0f} {unit}"
    if value >= 10:
        return f"{value:.1f} {unit}"
    return f"{value:.2f} {unit}"


def ratio(ours: float | None, ref: float | None, better: str) -> str:
    """How many times better ours is (>1 means ours is better)."""
    if ours is None or ref is None or ours <= 0 or ref <= 0:
        return "n/a"
    factor = ref / ours if better == "lower" else ours / ref
    if factor >= 100:
        return f"{factor:,.0f}x"
    return f"{factor:.1f}x" if factor >= 10 else f"{factor:.2f}x"


def row(workload: str, ours: float | None, ref: float | None, unit: str, *, better: str, note: str = "") -> str:
    """One markdown row: `| workload | ours | reference | ratio |`.

    `better` is "lower" (times, memory) or "higher" (rates); the ratio is how
    many times better ours is. `note` is appended to the workload cell.
    """
    if better not in ("lower", "higher"):
        raise ValueError("better is 'lower' or 'higher'")
    label = f"{workload} ({note})" if note else workload
    return f"| {label} | {fmt(ours, unit)} | {fmt(ref, unit)} | {ratio(ours, ref, better)} |"
