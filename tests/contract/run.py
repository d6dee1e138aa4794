"""Contract fuzzing: schemathesis against the real binary, from its own OpenAPI document.

Starts ``$ABX_SERVER_BIN`` (default ``target/debug/agent-sandbox-server``) on
ephemeral loopback ports in a fresh temporary directory (base dir, HOME and
TMPDIR inside it) under a policy that keeps the run from harming the machine
(see ``POLICY``), fetches ``GET /openapi.json`` with the token, and runs
schemathesis on every operation and method: examples, boundary coverage,
random fuzzing (valid and invalid input) and stateful sequences along the
document's links, for the time budget, on the groups that are on; then
five random cases per operation of the opt-in groups, which are off here
and answer 404 ``endpoint_disabled``. Checks: every schemathesis check except
``negative_data_rejection`` and ``positive_data_acceptance`` (the API reads
requests leniently, as the reference does, and a valid request may still
fail on the machine's state) and ``ignored_auth`` (its wrong tokens set off
the per-address throttle of failed authentications, which then answers 429
to every request from loopback; see docs/RELIABILITY.md). Afterwards the
server must still answer ``/health``.

Usage: run.py [--seconds N] [--workers N] [--seed N] [--report DIR] [-- schemathesis args]
Exit status: schemathesis's, or 1 when the server died or did not start.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("ABX_SERVER_BIN", str(ROOT / "target" / "debug" / "agent-sandbox-server"))
TOKEN = "contract-token-3b9a"
EXEC = ("shell", "shell_stream", "process_start")

# What the fuzzer may do: programs limited to a harmless few that end at
# once (no shell, so no redirections; tiny timeouts are raised in hooks.py),
# each run capped at 5 s; paths confined to the base dir
# (the default); terminals run /bin/sh only; watches and searches end within
# seconds; signals only reach processes this server started (the default).
# The opt-in groups (dev_tools: code runs; browser; agents) stay off: their
# operations answer 404 endpoint_disabled, which is checked against the schema too.
POLICY = {
    "version": 1,
    "description": "contract fuzzing: harmless commands, short runs, confined paths",
    "endpoints": {
        **{
            exec_id: {
                "params": {
                    "allow_commands": ["echo ...", "printf ...", "true", "false", "cat {path}", "ls ..."]
                },
                "limits": {"timeout_seconds": 5, "max_processes": 16, "max_output_bytes": "1MB"},
            }
            for exec_id in EXEC
        },
        "pty_create_session": {"params": {"shells": ["/bin/sh", "/bin/bash"]}, "limits": {"max_sessions": 8}},
        "files_watch": {"limits": {"max_duration_seconds": 2}},
        "files_search": {"limits": {"timeout_seconds": 5}},
        "files_*": {"limits": {"max_bytes": "8MB"}},
    },
}


def start(tmp: Path) -> tuple[subprocess.Popen, str]:
    base, home, scratch = tmp / "base", tmp / "home", tmp / "tmp"
    for d in (base, home, scratch):
        d.mkdir()
    (base / "hello.txt").write_text("hello\n")
    (base / "dir").mkdir()
    (base / "dir" / "a.py").write_text("print('a')\n")
    policy = tmp / "policy.json"
    policy.write_text(json.dumps(POLICY))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
    env.update(ABX_SERVER_TOKEN=TOKEN, HOME=str(home), TMPDIR=str(scratch), RUST_LOG="warn")
    command = [
        BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--pty-port", "0", "--code-port", "0",
        "--envd-port", "0", "--base-dir", str(base), "--policy", str(policy),
    ]
    log = open(tmp / "server.log", "wb")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env, cwd=tmp)
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            lines.put(raw.decode(errors="replace").strip())

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            parts = lines.get(timeout=1).split()
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        if len(parts) == 3 and parts[:2] == ["listening", "api"]:
            return process, parts[2]
    process.kill()
    raise SystemExit(f"server did not start:\n{(tmp / 'server.log').read_text()}")


def get(url: str, token: str | None = TOKEN) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=120, help="time budget of the run (default 120)")
    parser.add_argument("--workers", default="2", help="concurrent schemathesis workers (default 2)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed, for a reproducible run")
    parser.add_argument("--report", type=Path, default=None, help="directory for schemathesis's reports")
    parser.add_argument("extra", nargs="*", help="more schemathesis arguments (after --)")
    args = parser.parse_args()
    schemathesis = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"

    with tempfile.TemporaryDirectory(prefix="abx-contract-") as name:
        tmp = Path(name)
        process, url = start(tmp)
        try:
            status, body = get(f"{url}/openapi.json")
            if status != 200:
                print(f"GET /openapi.json answered {status}: {body[:200]!r}", file=sys.stderr)
                return 1
            document = tmp / "openapi.json"
            document.write_bytes(body)
            ops = sum(len(item) for item in json.loads(body)["paths"].values())
            print(f"contract: {ops} operations from {url}/openapi.json, {args.seconds} s budget", flush=True)
            doc = json.loads(body)
            opt_in = sorted({op["tags"][0] for item in doc["paths"].values() for op in item.values() if op.get("x-abx-opt-in")})
            common = [
                schemathesis, "run", str(document), "--url", url,
                "-H", f"Authorization: Bearer {TOKEN}",
                "--checks", "all",
                "--exclude-checks", "negative_data_rejection,positive_data_acceptance,ignored_auth",
                "--workers", str(args.workers),
                "--request-timeout", "20",
                "--suppress-health-check", "all",
                "--no-color",
            ]
            if args.seed is not None:
                common += ["--seed", str(args.seed)]
            if args.report is not None:
                args.report.mkdir(parents=True, exist_ok=True)
            hooks = dict(os.environ, PYTHONPATH=str(Path(__file__).parent), SCHEMATHESIS_HOOKS="hooks")
            # The groups that are on get the time budget; the opt-in groups, off
            # here, answer 404 endpoint_disabled to anything, so a few cases each
            # check that answer against the document.
            runs = [
                ("enabled groups", [
                    "--phases", "examples,coverage,fuzzing,stateful", "--max-time", str(args.seconds),
                    *[a for tag in opt_in for a in ("--exclude-tag", tag)],
                ]),
                (f"opt-in groups, off ({', '.join(opt_in)})", [
                    "--phases", "fuzzing", "--max-examples", "5",
                    *[a for tag in opt_in for a in ("--include-tag", tag)],
                ]),
            ]
            returncode = 0
            for index, (name, extra) in enumerate(runs):
                command = common + extra
                if args.report is not None:
                    command += ["--report", "junit,ndjson", "--report-dir", str(args.report / f"run{index}")]
                command += args.extra
                print(f"contract: {name}", flush=True)
                started = time.monotonic()
                result = subprocess.run(command, cwd=tmp, check=False, env=hooks)
                print(f"contract: {name}: schemathesis exited {result.returncode} after {time.monotonic() - started:.0f} s")
                returncode = returncode or result.returncode
            alive = process.poll() is None and get(f"{url}/health", None)[0] == 200
            if not alive:
                print("contract: the server is not healthy after the run", file=sys.stderr)
                print((tmp / "server.log").read_text()[-4000:], file=sys.stderr)
                return 1
            return returncode
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


if __name__ == "__main__":
    sys.exit(main())
