#!/usr/bin/env python3
"""Policy decision overhead: requests/s and latency with a full policy versus none.

Starts each server three times on loopback: with no policy and no token
(`none`), with only `ABX_SERVER_TOKEN` (`token`), and with a policy file that
uses every kind of rule (`full`: token identities by digest and by
environment variable, group, glob and exact rules, the hardened deny list plus
more patterns on every file endpoint, rate and concurrency limits high enough
never to refuse, audit modes). Then it drives each with wrk, in alternation,
and reports the medians.

The default workload is `GET /files/stat` of an existing file, named by its
absolute path (the reference resolves a relative one against its working
directory, not its base directory), the same request on both sides. The
other ports' workloads measure the same pipeline in front of them (ours
only; the reference serves neither port):

- `--workload envd-stat`: envd's `filesystem.Filesystem/Stat` of the same
  file (a Connect unary call on the envd port), governed by `files_stat`;
- `--workload code-execute`: `POST /execute {"code": "1"}` on the code port,
  in the warm default Python context (the first call starts it, during the
  warm-up), governed by `process_start`. The kernel's own time is the same
  in every configuration and its CPU is a child's, not counted per request.

Usage:
    bench/policy.py --ours target/release/agent-sandbox-server [--ref /path/to/agent-sandbox-server]
                    [--workload files-stat|envd-stat|code-execute]
                    [--seconds 4] [--rounds 5] [--connections 16] [--threads 2] [--no-pin] [--json FILE]

Besides throughput and latency it reports the server's CPU time per request
(from /proc, user + system), which a busy machine disturbs much less than
throughput, and the overhead of each configuration over `none` as the median
of per-round ratios (configurations run back to back within a round).

Prints markdown rows `| workload | ours | reference | ratio |` on stdout
(bench/run collects them); progress goes to stderr. Not a test: the numbers
depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from common import stop_process

HOST = "127.0.0.1"
TOKEN = "bench-token-policy-3f8a"
TOKEN_ENV = "BENCH_POLICY_TOKEN"
START_TIMEOUT = 30.0
CONFIGS = ("none", "token", "full")
HIGH = 1_000_000_000  # a limit that never refuses, so the limiter still runs

FULL_POLICY = {
    "description": "benchmark: every kind of rule",
    "auth": {
        "tokens": [
            {"id": "bench", "scopes": ["files:*", "process:run", "system:read"], "token_env": TOKEN_ENV},
            {"id": "ops", "scopes": ["*"], "token_sha256": hashlib.sha256(b"ops-token").hexdigest()},
            {"id": "reader", "scopes": ["files:read"], "token_sha256": hashlib.sha256(b"reader-token").hexdigest()},
        ]
    },
    "groups": {"terminal": False, "dev_tools": True},
    "defaults": {"audit": "deny", "limits": {"max_request_bytes": "1MiB"}},
    "endpoints": {
        "files_*": {
            "paths": {
                "deny": [
                    "/proc", "/sys", "/dev", "**/.ssh", "**/.env", "**/.env.*", "**/*.pem",
                    "**/id_rsa*", "**/id_ed25519*", "**/secrets", "*.key", "/srv/private",
                ],
                "symlinks": "within",
            },
            "limits": {"rate_per_minute": HIGH, "max_concurrency": HIGH},
        },
        "files_stat": {"scopes": ["files:read"], "audit": "deny"},
        "capabilities_check": {"limits": {"rate_per_minute": HIGH, "max_concurrency": HIGH}},
        "shell": {"params": {"deny_commands": ["rm", "dd"]}, "limits": {"timeout_seconds": 30}},
        "group:system": {"audit": "all"},
    },
}

LUA = """
wrk.method = "{method}"
wrk.body = {body}
{headers}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK-JSON {{"requests":%d,"duration_us":%d,"non_2xx":%d,"socket_errors":%d,' ..
    '"p50_us":%.1f,"p90_us":%.1f,"p99_us":%.1f,"mean_us":%.1f}}\\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean))
end
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def request(port: int, method: str, path: str, body: bytes | None, token: str | None) -> int:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(f"http://{HOST}:{port}{path}", data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


class Server:
    """One server (ours or the reference) in one configuration, on loopback."""

    def __init__(self, side: str, binary: str, config: str, pin: str | None, ports: bool = False) -> None:
        self.side, self.config = side, config
        self._tmp = tempfile.TemporaryDirectory(prefix=f"bench-policy-{side}-{config}-")
        root = Path(self._tmp.name)
        self.base = root / "base"
        (self.base / "bench").mkdir(parents=True)
        (self.base / "bench" / "notes.txt").write_text("hello\n")
        self.port, pty_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
        env["ABX_SERVER_BASE_DIR"] = str(self.base)
        args = [binary, "serve", "--host", HOST, "--port", str(self.port), "--pty-port", str(pty_port)]
        args += ["--base-dir", str(self.base)]
        self.envd_port = self.code_port = 0
        if ports:
            # Our other listeners, on free ports (the reference has neither).
            self.envd_port, self.code_port = free_port(), free_port()
            args += ["--envd-port", str(self.envd_port), "--code-port", str(self.code_port)]
        self.token: str | None = None
        if config == "token":
            env["ABX_SERVER_TOKEN"] = self.token = TOKEN
        elif config == "full":
            policy = root / "policy.json"
            policy.write_text(json.dumps(FULL_POLICY))
            env[TOKEN_ENV] = self.token = TOKEN
            args += ["--policy", str(policy)]
        if pin:
            args = ["taskset", "-c", pin, *args]
        self.process = subprocess.Popen(
            args, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{side} ({config}) exited with {self.process.returncode}")
            try:
                if request(self.port, "GET", "/health", None, None) == 200:
                    return
            except OSError:
                pass
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"{side} ({config}) not healthy within {START_TIMEOUT} s")

    def stop(self) -> None:
        stop_process(self.process)
        self._tmp.cleanup()


LABELS = {
    "files-stat": "GET /files/stat",
    "envd-stat": "envd Filesystem/Stat",
    "code-execute": "code POST /execute (warm context)",
}


def workload(server: Server, kind: str) -> tuple[str, int, str, bytes | None, str]:
    """(method, port, path, body, label) of the measured request on `server`."""
    notes = str(server.base / "bench" / "notes.txt")
    if kind == "envd-stat":
        body = json.dumps({"path": notes}).encode()
        return "POST", server.envd_port, "/filesystem.Filesystem/Stat", body, LABELS[kind]
    if kind == "code-execute":
        return "POST", server.code_port, "/execute", b'{"code": "1"}', LABELS[kind]
    return "GET", server.port, "/files/stat?path=" + urllib.parse.quote(notes), None, LABELS[kind]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(server: Server, work: tuple, args: argparse.Namespace, seconds: float) -> dict:
    method, port, path, body, _ = work
    headers = [("Content-Type", "application/json")] if body is not None else []
    if server.token:
        headers.append(("Authorization", f"Bearer {server.token}"))
    lua = LUA.format(
        method=method,
        body=json.dumps(body.decode()) if body is not None else "nil",
        headers="\n".join(f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers),
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    command = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{int(seconds)}s", "--timeout", "5s", "-s", script.name]
    if args.pin:
        command = ["taskset", "-c", args.client_cpus, *command]
    cpu_before = cpu_seconds(server.process.pid)
    try:
        out = subprocess.run(
            [*command, f"http://{HOST}:{port}{path}"], capture_output=True, text=True, timeout=seconds + 60, check=True
        ).stdout
    finally:
        os.unlink(script.name)
    line = next(l for l in out.splitlines() if l.startswith("WRK-JSON "))
    result = json.loads(line[len("WRK-JSON "):])
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    result["cpu_us"] = (cpu_seconds(server.process.pid) - cpu_before) * 1e6 / max(result["requests"], 1)
    return result


def measure(side: str, binary: str, args: argparse.Namespace) -> tuple[dict, str]:
    """Medians per configuration for one side, configurations alternating within each round."""
    ports = args.workload != "files-stat"
    servers = {c: Server(side, binary, c, args.server_cpus if args.pin else None, ports) for c in CONFIGS}
    try:
        works = {config: workload(server, args.workload) for config, server in servers.items()}
        for config, server in servers.items():
            work = works[config]
            status = request(work[1], work[0], work[2], work[3], server.token)
            if status != 200:
                raise RuntimeError(f"{side} ({config}): {work[4]} answers {status}, expected 200")
            run_wrk(server, work, args, 1)  # warm-up
        runs: dict[str, list[dict]] = {c: [] for c in CONFIGS}
        for r in range(args.rounds):
            order = CONFIGS[r % 3 :] + CONFIGS[: r % 3]
            for config in order:
                result = run_wrk(servers[config], works[config], args, args.seconds)
                runs[config].append(result)
                log(f"  {side:9} {config:5} round {r + 1}: {result['rps']:9.0f} req/s  {result['cpu_us']:6.1f} us CPU/req  "
                    f"p50 {result['p50_us']:7.0f} us  "
                    f"p99 {result['p99_us']:7.0f} us  non-2xx {result['non_2xx']}  socket errors {result['socket_errors']}")
        medians = {}
        # Each round's configurations ran back to back: their ratios cancel most of the machine's drift.
        paired = {c: statistics.median(runs[c][i]["cpu_us"] / runs["none"][i]["cpu_us"] - 1 for i in range(args.rounds)) * 100
                  for c in ("token", "full")}
        for config, results in runs.items():
            medians[config] = {
                key: statistics.median(r[key] for r in results)
                for key in ("rps", "cpu_us", "p50_us", "p90_us", "p99_us", "mean_us")
            }
            medians[config]["failed"] = sum(r["non_2xx"] + r["socket_errors"] for r in results)
            medians[config]["requests"] = sum(r["requests"] for r in results)
            medians[config]["cpu_overhead_percent"] = paired.get(config, 0.0)
        return medians, LABELS[args.workload]
    finally:
        for server in servers.values():
            server.stop()


def overhead(medians: dict, config: str) -> float:
    """Extra time per request of `config` over `none`, as a percentage of the request time with none."""
    return (medians["none"]["rps"] / medians[config]["rps"] - 1) * 100


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "%":
        return f"{value:+.1f} %"
    if unit == "req/s" or value >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.2f} {unit}"


def row(label: str, ours: float | None, ref: float | None, unit: str, better: str) -> str:
    ratio = "n/a"
    if unit != "%" and ours and ref and ours > 0 and ref > 0:
        factor = ref / ours if better == "lower" else ours / ref
        ratio = f"{factor:.2f}x"
    return f"| {label} | {fmt(ours, unit)} | {fmt(ref, unit)} | {ratio} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", required=True, help="our agent-sandbox-server binary (a release build)")
    parser.add_argument("--ref", help="the reference agent-sandbox-server entry point (optional)")
    parser.add_argument("--workload", choices=sorted(LABELS), default="files-stat",
                        help="the measured request (default files-stat; the others are ours only)")
    parser.add_argument("--seconds", type=int, default=4, help="seconds per wrk run (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="runs per configuration; medians are reported (default 5)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--pin", action=argparse.BooleanOptionalAction, default=(os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None,
        help="pin servers and wrk to separate CPUs with taskset (default on with 2 or more CPUs): the overhead "
             "being measured is a few percent, less than the noise of unpinned runs")
    parser.add_argument("--server-cpus", default="0", help="CPUs for the server with --pin (default 0)")
    parser.add_argument("--client-cpus", default="1", help="CPUs for wrk with --pin (default 1)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install -y wrk)")

    if args.ref and args.workload != "files-stat":
        sys.exit("the reference serves neither the envd nor the code port: drop --ref")
    sides = {"ours": args.ours, **({"reference": args.ref} if args.ref else {})}
    results, label = {}, ""
    for side, binary in sides.items():
        log(f"{side}: {binary}")
        results[side], label = measure(side, binary, args)
    ours, ref = results["ours"], results.get("reference")
    setting = f"wrk {args.connections} connections, median of {args.rounds} x {args.seconds:g} s"
    for config in CONFIGS:
        print(row(f"policy bench, {label}, {config}: throughput ({setting})", ours[config]["rps"],
                  ref[config]["rps"] if ref else None, "req/s", "higher"))
        print(row(f"policy bench, {label}, {config}: p50 latency", ours[config]["p50_us"],
                  ref[config]["p50_us"] if ref else None, "us", "lower"))
        print(row(f"policy bench, {label}, {config}: p99 latency", ours[config]["p99_us"],
                  ref[config]["p99_us"] if ref else None, "us", "lower"))
    for config in CONFIGS:
        print(row(f"policy bench, {label}, {config}: server CPU per request", ours[config]["cpu_us"],
                  ref[config]["cpu_us"] if ref else None, "us", "lower"))
    for config in ("token", "full"):
        print(row(f"policy bench, {label}: server CPU per request, {config} vs none (median of paired rounds)",
                  ours[config]["cpu_overhead_percent"], ref[config]["cpu_overhead_percent"] if ref else None, "%", "lower"))
        print(row(f"policy bench, {label}: time per request from throughput, {config} vs none", overhead(ours, config),
                  overhead(ref, config) if ref else None, "%", "lower"))
    failed = {side: {c: m["failed"] for c, m in r.items() if m["failed"]} for side, r in results.items()}
    if any(failed.values()):
        log(f"failed requests (non-2xx or socket errors): {failed}")
    if args.json:
        args.json.write_text(json.dumps({
            "workload": label,
            "settings": {"seconds": args.seconds, "rounds": args.rounds, "connections": args.connections,
                         "threads": args.threads, "pinned": args.pin, "cpus": os.cpu_count()},
            "results": results,
            "overhead_percent": {side: {c: overhead(r, c) for c in ("token", "full")} for side, r in results.items()},
        }, indent=2))


if __name__ == "__main__":
    main()
