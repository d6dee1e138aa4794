"""Runs every workload script in bench/ against both servers and writes the
table, with the date and the machine, to BENCHMARKS.md.

A workload script is any `bench/*.py` other than this one, `common.py` and
names starting with `_` (private helpers): it takes `--ours BIN --ref BIN`
and prints markdown rows `| workload | ours | reference | ratio |`. `core.py` runs first, the others in
name order; each is bounded by a timeout, and one that fails is reported in
the table rather than stopping the run.

Usage: python bench/report.py --ours BIN --ref BIN [--out BENCHMARKS.md] [--note TEXT]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import io
import os
import platform
import signal
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
NOT_WORKLOADS = {"common.py", "report.py"}
#: A workload script still running after this is stopped and reported.
SCRIPT_TIMEOUT = 900
HEADER = "| workload | ours | reference | ratio |\n|---|---|---|---|"


def workload_scripts() -> list[Path]:
    scripts = sorted(p for p in BENCH.glob("*.py") if p.name not in NOT_WORKLOADS and not p.name.startswith("_"))
    return sorted(scripts, key=lambda p: (p.name != "core.py", p.name))


def run_script(script: Path, ours: str, ref: str) -> list[str]:
    """The rows one script prints (its other output goes to stderr)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, str(script), "--ours", ours, "--ref", ref]
    rows: list[str] = []
    # Its own process group, so a timeout also stops the servers it started.
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        os.killpg(process.pid, signal.SIGKILL)

    timer = threading.Timer(SCRIPT_TIMEOUT, stop)
    timer.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.strip()
            if is_row(line):
                rows.append(line)
                print(line, flush=True)
            elif line:
                print(f"  {script.name}: {line}", file=sys.stderr)
        code = process.wait()
    finally:
        timer.cancel()
    if code != 0:
        why = f"timed out after {SCRIPT_TIMEOUT} s" if timed_out.is_set() else f"exit status {code}"
        failed = f"| {script.stem}: the script failed ({why}); see its output | n/a | n/a | n/a |"
        rows.append(failed)
        print(failed, flush=True)
    return rows


def is_row(line: str) -> bool:
    """A data row: four cells, not the header or its separator."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    return (
        line.startswith("|")
        and len(cells) == 4
        and cells[0] != "workload"
        and not all(set(c) <= set("-: ") for c in cells)
    )


def machine() -> str:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor() or "unknown",
    )
    mem_kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:")
    )
    load = Path("/proc/loadavg").read_text().split()[:3]
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {mem_kib / 2**20:.1f} GiB memory, Linux {platform.release()}; "
        f"load average at start {' '.join(load)}"
    )


def version_of(binary: str) -> str:
    try:
        return subprocess.run([binary, "version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def sizes(binary: str) -> str:
    """The binary's size, and the size of an image layer holding only it
    (a tar of usr/local/bin/agent-sandbox-server, gzip level 6 as Docker)."""
    data = io.BytesIO()
    with gzip.GzipFile(fileobj=data, mode="wb", compresslevel=6, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w") as tar:
            info = tar.gettarinfo(binary, arcname="usr/local/bin/agent-sandbox-server")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(binary, "rb") as f:
                tar.addfile(info, f)
    size = os.path.getsize(binary)
    return f"binary {size / 2**20:.2f} MiB ({size:,} bytes), image layer {data.tell() / 2**20:.2f} MiB gzip-compressed"


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    # The report's own output file does not count: the previous run left it changed.
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!BENCHMARKS.md")
    return head + (" (with uncommitted changes)" if dirty else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--note", default="", help="a sentence about the conditions, added to the report")
    args = parser.parse_args()

    started = datetime.datetime.now(datetime.timezone.utc)
    context = machine()
    print(f"machine: {context}", file=sys.stderr)
    print(HEADER, flush=True)
    rows: list[str] = []
    for script in workload_scripts():
        print(f"  running {script.name}", file=sys.stderr, flush=True)
        rows += run_script(script, args.ours, args.ref)

    minutes = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60
    lines = [
        "# Benchmarks",
        "",
        "Our daemon and the Python reference server, side by side on loopback, the same",
        "workloads in alternation. Produced by `bench/run` (see docs/benchmarks.md).",
        "**ratio** is how many times better ours is: reference ÷ ours for times and",
        "memory, ours ÷ reference for rates; above 1 means ours is better.",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC (run took {minutes:.1f} min)",
        f"- machine: {context}",
        f"- ours: agent-sandbox-server {version_of(args.ours)}, static musl release build, commit {commit()}; "
        f"{sizes(args.ours)}",
        f"- reference: agent-sandbox-server {version_of(args.ref)} (Python {platform.python_version()})",
    ]
    if args.note:
        lines.append(f"- note: {args.note}")
    lines += ["", HEADER, *rows, ""]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
