"""Every byte of a large output, with the real `e2b` SDK and a slow reader.

Starts our binary with its envd port on loopback (no token, as a platform's
envd behind its gateway), then for each size runs `commands.run` of a
command that prints that many bytes of base64 text and, on stderr, the
SHA-256 of what it printed. The reader is slowed on purpose: it sleeps one
second before its first chunk (the process writes far past the replay
buffer meanwhile) and `--pause` ms after every MiB. Each row prints the size
delivered, the checksum match, the time and the daemon's peak RSS; the
script exits 1 on any mismatch or error.

    python bench/reliability/e2b_outputs.py --ours target/release/agent-sandbox-server \
        [--sizes 1M,10M,100M,1G] [--pause 20]

Needs the conformance venv (`e2b`). Loopback only; bounded in size and time
(1 GiB takes about a minute and about 3 GiB of the client's memory, since
the SDK returns stdout as one string).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import e2b
from e2b import connection_config as e2b_config

MIB = 1024 * 1024
UNITS = {"K": 1000, "M": 1000**2, "G": 1024**3}


def parse_size(text: str) -> int:
    text = text.strip().upper()
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss(pid: int) -> int:
    """The daemon's peak resident memory so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def start(binary: str, workdir: Path) -> tuple[subprocess.Popen, int]:
    base = workdir / "base"
    base.mkdir()
    envd = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
    command = [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--pty-port", "0", "--code-port", "off"]
    command += ["--envd-port", str(envd), "--base-dir", str(base)]
    process = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", envd), timeout=0.2).close()
            return process, envd
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"the daemon exited with {process.returncode}") from None
            time.sleep(0.01)
    process.kill()
    raise RuntimeError("the envd port did not open within 10 s")


def run_one(sbx: e2b.Sandbox, size: int, pause: float) -> tuple[int, bool, float]:
    # base64 of `size * 3 / 4` random bytes is `size` bytes of text plus one newline per 76.
    raw = size * 3 // 4
    command = f"f=$(mktemp); head -c {raw} /dev/urandom | base64 > $f; cat $f; sha256sum < $f >&2; rm -f $f"
    received = 0

    def slow(chunk: str) -> None:
        nonlocal received
        if received == 0:
            time.sleep(1.0)
        elif received // MIB != (received + len(chunk)) // MIB:
            time.sleep(pause)
        received += len(chunk)

    started = time.perf_counter()
    result = sbx.commands.run(command, on_stdout=slow, timeout=0)
    elapsed = time.perf_counter() - started
    digest = hashlib.sha256(result.stdout.encode()).hexdigest()
    return len(result.stdout), result.exit_code == 0 and digest == result.stderr.split()[0], elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", required=True, help="the daemon binary")
    parser.add_argument("--sizes", default="1M,10M,100M,1G")
    parser.add_argument("--pause", type=float, default=20.0, help="ms the reader sleeps after each MiB")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    failed = False
    with tempfile.TemporaryDirectory(prefix="e2b-outputs-") as tmp:
        process, envd = start(args.ours, Path(tmp))
        try:
            os.environ["E2B_DEBUG"] = "true"
            e2b_config.ConnectionConfig.envd_port = envd
            sbx = e2b.Sandbox.create()
            print(f"{'size':>12} {'delivered':>12} {'checksum':>9} {'seconds':>8} {'peak RSS MiB':>13}")
            for size in sizes:
                try:
                    delivered, same, elapsed = run_one(sbx, size, args.pause / 1000)
                except Exception as error:  # noqa: BLE001 - a row reports any failure and the run goes on
                    print(f"{size:>12} failed: {type(error).__name__}: {error}")
                    failed = True
                    continue
                rss = peak_rss(process.pid) / MIB
                print(f"{size:>12} {delivered:>12} {'same' if same else 'DIFFERS':>9} {elapsed:>8.1f} {rss:>13.1f}")
                failed |= not same
        finally:
            process.terminate()
            process.wait(timeout=10)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
