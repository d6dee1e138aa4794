"""Soak: a mixed workload against every group of one daemon for a set time.

Workers call every group of the API port (core, files, processes, terminals
over the PTY WebSocket, system, registered commands, dev tools), the code
interpreter port and the envd port, each call checked end to end (bytes read
back equal bytes written, every line of a process's output arrives). A
controller paces them to about half the machine's CPU, counted over the
daemon, its children and this script. A sampler records the daemon's RSS,
open descriptors, threads and child tasks every few seconds.

It fails on: a 5xx, a lost or wrong answer, a request stuck past
`--stuck` seconds, or growth after the warm-up (the first quarter, at least
a minute: at this pace the runtime's blocking pool takes about 8 minutes to
reach the calls' concurrency, and RSS follows) from the first tenth after it
to the last tenth: the median RSS by
more than 5%, the median thread count, or the floor of open descriptors or
child tasks (what stays held while calls come and go) by more than 2. It writes
the samples (CSV), a summary (JSON) and a plot (PNG).

    scripts/soak [--minutes 60] [--out docs/soak.png] [--binary PATH]
    scripts/soak --judge docs/soak.png [--warmup 0.25]   (judges and plots a run again from its CSV and JSON)

Everything stays on loopback; every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import base64
import csv
import http.client
import json
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from common import HOST, TOKEN, descendants, stop_process  # noqa: E402

CONFIG = """
[[commands]]
name = "hello"
description = "Say hello"
argv = ["/bin/sh", "-c", 'printf "Hello, %s!" "$1"', "hello", "{name}"]
timeout_seconds = 10

[[commands.args]]
name = "name"
type = "string"
"""


class Wrong(Exception):
    """A call answered, but not what it must."""


class Daemon:
    """The daemon under test: its ports from its `listening` lines, its /proc figures."""

    def __init__(self, binary: str, work: Path):
        self.base = work / "base"
        self.base.mkdir()
        config = work / "config.toml"
        config.write_text(CONFIG)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
        env.update({"ABX_SERVER_TOKEN": TOKEN, "HOME": str(work), "RUST_LOG": "warn"})
        command = [binary, "serve", "--host", HOST, "--port", "0", "--pty-port", "0", "--code-port", "0"]
        command += ["--envd-port", "0", "--base-dir", str(self.base), "--config", str(config)]
        command += ["--enabled-groups", "dev_tools"]
        self.log = open(work / "server.log", "wb")
        self.process = subprocess.Popen(
            command, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log
        )
        self.ports: dict[str, int] = {}
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            parts = raw.decode().split()
            if len(parts) == 3 and parts[0] == "listening":
                self.ports[parts[1]] = int(parts[2].rsplit(":", 1)[1])
                if parts[1] == "api":
                    break
        if "api" not in self.ports:
            raise RuntimeError("the daemon did not start; see its log")
        threading.Thread(target=lambda: [None for _ in self.process.stdout], daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def status(self, field: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def sample(self) -> dict[str, float]:
        kids = descendants(self.pid)
        return {
            "rss_mib": self.status("VmRSS") / 1024,
            "fds": len(os.listdir(f"/proc/{self.pid}/fd")),
            "threads": self.status("Threads"),
            "tasks": len(kids),
        }

    def cpu_seconds(self) -> float:
        """CPU time of the daemon and of its children once reaped (utime, stime, cutime, cstime)."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat[stat.rfind(")") + 2 :].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class Calls:
    """One worker's calls, every answer checked."""

    def __init__(self, daemon: Daemon, worker: int, stuck: float):
        self.d, self.worker, self.stuck = daemon, worker, stuck
        self.rng = random.Random(worker)
        self.n = 0

    # --- plumbing ---
    def request(self, port: str, method: str, path: str, body=None, headers=None, raw=False):
        conn = http.client.HTTPConnection(HOST, self.d.ports[port], timeout=self.stuck)
        try:
            h = {"Authorization": f"Bearer {TOKEN}", "X-Access-Token": TOKEN}
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
                h["Content-Type"] = "application/json"
            h.update(headers or {})
            conn.request(method, path, body=body, headers=h)
            response = conn.getresponse()
            data = response.read()
        except TimeoutError as e:
            raise TimeoutError(f"stuck: {method} {path}") from e
        finally:
            conn.close()
        if response.status >= 500:
            raise Wrong(f"{response.status} from {method} {path}: {data[:200]!r}")
        if raw:
            return response.status, data
        return response.status, (json.loads(data) if data and data[:1] in b"{[" else data)

    def ok(self, port, method, path, body=None, headers=None, expect=(200,), raw=False):
        status, data = self.request(port, method, path, body, headers, raw)
        if status not in expect:
            raise Wrong(f"{status} from {method} {path}: {str(data)[:200]}")
        return data

    def name(self, stem: str) -> str:
        self.n += 1
        return f"w{self.worker}/{stem}{self.n % 50}"

    # --- the workload: one method per kind of call ---
    def core(self):
        if self.ok("api", "GET", "/health").get("status") != "ok":
            raise Wrong("health is not ok")
        self.ok("api", "GET", "/capabilities")

    def files(self):
        data = self.rng.randbytes(self.rng.choice([0, 1, 4096, 65536, 300_000]))
        path = self.name("f")
        self.ok("api", "PUT", f"/files/content?path={path}", data, expect=(200, 201))
        if self.ok("api", "GET", f"/files/content?path={path}", raw=True) != data:
            raise Wrong(f"lost bytes: {path}")
        moved = path + ".moved"
        self.ok("api", "POST", "/files/move", {"source": path, "destination": moved})
        if self.ok("api", "GET", f"/files/stat?path={moved}")["size"] != len(data):
            raise Wrong("stat size")
        self.ok("api", "GET", f"/files/list?path=w{self.worker}")
        self.ok("api", "DELETE", f"/files?path={moved}")

    def json_upload(self):
        data = self.rng.randbytes(self.rng.choice([1, 10_000, 700_000]))
        path = self.name("j")
        body = {"path": path, "content_base64": base64.b64encode(data).decode()}
        self.ok("api", "POST", "/files/upload-stream", body)
        document = self.ok("api", "GET", f"/files/download-stream?path={path}")
        if base64.b64decode(document["content_base64"]) != data or document["bytes"] != len(data):
            raise Wrong(f"lost bytes: {path}")
        archive = self.ok("api", "POST", "/files/archive", {"paths": [path], "format": "zip"})
        if archive["bytes"] < len(data) // 2 and len(data) > 1000:
            raise Wrong("archive too small")
        self.ok("api", "POST", "/files/search", {"path": f"w{self.worker}", "pattern": "j*"})

    def shell(self):
        token = f"t{self.rng.randrange(10**9)}"
        result = self.ok("api", "POST", "/shell", {"command": f"echo {token}"})
        if (result["stdout"], result["exit_code"]) != (token + "\n", 0):
            raise Wrong(f"shell answered {result}")

    def process_output(self):
        lines = self.rng.choice([10, 2000, 20000])
        started = self.ok("api", "POST", "/process/start", {"command": f"seq 1 {lines}", "capture_output": True})
        pid, since, text = started["pid"], 0, []
        deadline = time.monotonic() + self.stuck
        while time.monotonic() < deadline:
            out = self.ok("api", "GET", f"/process/{pid}/output?since={since}&wait=5")
            text += [e["data"] for e in out["events"]]
            since = out["next"]
            if out["dropped"] or out["lagged"]:
                raise Wrong(f"output dropped below the retention limit ({lines} lines)")
            if out["state"] == "exited" and not out["events"]:
                break
        else:
            raise TimeoutError(f"stuck: process {pid}")
        expected = "".join(f"{i}\n" for i in range(1, lines + 1))
        if "".join(text) != expected:
            raise Wrong(f"lost output: {len(''.join(text))} of {len(expected)} bytes")

    def terminal(self):
        from websockets.sync.client import connect

        created = self.ok("api", "POST", "/pty/sessions", {"shell": "/bin/sh"}, expect=(200, 201))
        sid = created["session_id"]
        mark = f"m{self.rng.randrange(10**9)}"
        url = f"ws://{HOST}:{self.d.ports['pty']}/pty?session_id={sid}"
        try:
            with connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"}, open_timeout=self.stuck) as ws:
                ws.send(json.dumps({"type": "input", "data": f"echo {mark}-$((6*7))\n"}))
                seen = ""
                deadline = time.monotonic() + self.stuck
                while f"{mark}-42" not in seen:
                    if time.monotonic() > deadline:
                        raise TimeoutError("stuck: terminal echo")
                    message = json.loads(ws.recv(timeout=self.stuck))
                    seen += message.get("data") or ""
        finally:
            self.ok("api", "DELETE", f"/pty/sessions/{sid}")

    def system(self):
        self.ok("api", "GET", "/system/info")
        self.ok("api", "GET", "/system/metrics")
        self.ok("api", "GET", "/env")
        self.ok("api", "GET", "/ports")

    def commands(self):
        self.ok("api", "GET", "/commands")
        if self.ok("api", "POST", "/commands/hello", {"name": "soak"})["result"] != "Hello, soak!":
            raise Wrong("command result")

    def dev_tools(self):
        result = self.ok("api", "POST", "/code/run", {"language": "python", "code": "print(6*7)"})
        if "42" not in json.dumps(result):
            raise Wrong(f"code/run answered {result}")

    def code_port(self):
        data = self.ok("code", "POST", "/execute", {"code": "print(6*7)"}, raw=True)
        lines = [json.loads(line) for line in data.splitlines() if line.strip()]
        if not any(e.get("type") == "stdout" and "42" in e.get("text", "") for e in lines):
            raise Wrong(f"execute answered {lines[:3]}")
        if lines[-1].get("type") != "end_of_execution":
            raise Wrong("execute did not end with end_of_execution")

    def envd(self):
        path = str(self.d.base / self.name("e"))
        data = self.rng.randbytes(self.rng.choice([0, 5000, 200_000]))
        headers = {"Content-Type": "application/octet-stream"}
        self.ok("envd", "POST", f"/files?path={path}", data, headers)
        if self.ok("envd", "GET", f"/files?path={path}", raw=True) != data:
            raise Wrong("envd lost bytes")
        self.ok("envd", "POST", "/filesystem.Filesystem/Stat", {"path": path})
        message = json.dumps({"process": {"cmd": "/bin/echo", "args": ["envd-soak"]}}).encode()
        body = struct.pack(">BI", 0, len(message)) + message
        raw = self.ok(
            "envd", "POST", "/process.Process/Start", body, {"Content-Type": "application/connect+json"}, raw=True
        )
        out, at, ended = b"", 0, False
        while at + 5 <= len(raw):
            flags, length = struct.unpack(">BI", raw[at : at + 5])
            payload = json.loads(raw[at + 5 : at + 5 + length])
            at += 5 + length
            if flags & 2:
                ended = "error" not in payload
                break
            data_event = payload.get("event", {}).get("data", {})
            out += base64.b64decode(data_event.get("stdout", ""))
        if not ended or out != b"envd-soak\n":
            raise Wrong(f"envd process: ended={ended} out={out!r}")


#: Calls and their weights: cheap ones often, expensive ones now and then.
WORKLOAD = [
    ("core", 6),
    ("files", 6),
    ("json_upload", 2),
    ("shell", 4),
    ("process_output", 2),
    ("terminal", 1),
    ("system", 2),
    ("commands", 2),
    ("dev_tools", 1),
    ("code_port", 1),
    ("envd", 3),
]


class Soak:
    def __init__(self, daemon: Daemon, args: argparse.Namespace):
        self.d, self.args = daemon, args
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.pause = 0.05  # seconds between a worker's calls, set by the controller
        self.calls: dict[str, int] = {name: 0 for name, _ in WORKLOAD}
        self.failures: list[str] = []
        self.samples: list[dict[str, float]] = []

    def worker(self, index: int) -> None:
        calls = Calls(self.d, index, self.args.stuck)
        names = [n for n, _ in WORKLOAD]
        weights = [w for _, w in WORKLOAD]
        while not self.stop.is_set():
            name = calls.rng.choices(names, weights)[0]
            try:
                getattr(calls, name)()
                with self.lock:
                    self.calls[name] += 1
            except Exception as e:  # every failure is recorded and fails the run
                with self.lock:
                    self.failures.append(f"{time.monotonic() - self.t0:.0f}s {name}: {type(e).__name__}: {e}")
            self.stop.wait(self.pause * calls.rng.uniform(0.5, 1.5))

    def run(self) -> None:
        self.t0 = time.monotonic()
        target = os.cpu_count() / 2 * self.args.cpu_share  # cores
        workers = [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(self.args.workers)]
        for w in workers:
            w.start()
        end = self.t0 + self.args.minutes * 60
        last_cpu, last_t = self.d.cpu_seconds() + sum(os.times()[:2]), time.monotonic()
        while time.monotonic() < end and self.d.process.poll() is None:
            self.stop.wait(self.args.interval)
            now = time.monotonic()
            cpu = self.d.cpu_seconds() + sum(os.times()[:2])
            cores = (cpu - last_cpu) / (now - last_t)
            last_cpu, last_t = cpu, now
            # Pace toward the target: more pause when above, less when below.
            self.pause = min(2.0, max(0.001, self.pause * (cores / target) ** 0.5 if cores > 0 else self.pause))
            sample = {"t": now - self.t0, **self.d.sample(), "cores": cores, "calls": sum(self.calls.values())}
            sample["failures"] = len(self.failures)
            self.samples.append(sample)
            print(
                f"{sample['t']:7.0f}s rss {sample['rss_mib']:6.1f} MiB fds {sample['fds']:4} threads "
                f"{sample['threads']:3} tasks {sample['tasks']:3} cpu {cores:4.2f} calls {sample['calls']:7} "
                f"failures {len(self.failures)}",
                flush=True,
            )
        self.stop.set()
        for w in workers:
            w.join(timeout=self.args.stuck + 10)
        if self.d.process.poll() is not None:
            self.failures.append(f"the daemon exited with {self.d.process.returncode}")

    def warm(self) -> float:
        """Seconds of warm-up, not judged."""
        return max(60.0, self.args.minutes * 60 * self.args.warmup)

    def verdict(self) -> dict:
        warm = self.warm()
        after = [s for s in self.samples if s["t"] >= warm]
        span = max(len(after) // 10, 3)
        early, late = after[:span], after[-span:]
        problems = list(self.failures[:20])
        figures = {}
        if len(after) >= 2 * span:
            # Calls in flight come and go: fds and child tasks are judged by their floor (what
            # stays held), RSS and threads by their median.
            for key, slack, measure in [
                ("rss_mib", None, statistics.median),
                ("fds", 2, min),
                ("threads", 2, statistics.median),
                ("tasks", 2, min),
            ]:
                a, b = measure(s[key] for s in early), measure(s[key] for s in late)
                figures[key] = {"after_warmup": a, "end": b, "max": max(s[key] for s in after)}
                limit = a * 1.05 if slack is None else a + slack
                if b > limit:
                    problems.append(f"{key} grew from {a:g} to {b:g} (limit {limit:g})")
        else:
            problems.append("too few samples after the warm-up to judge growth")
        return {
            "minutes": self.args.minutes,
            "workers": self.args.workers,
            "calls": self.calls,
            "failures": len(self.failures),
            "mean_cores": statistics.mean(s["cores"] for s in self.samples) if self.samples else 0,
            "figures": figures,
            "problems": problems,
            "passed": not problems,
        }

    def plot(self, out: Path, verdict: dict) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        t = [s["t"] / 60 for s in self.samples]
        fig, axes = plt.subplots(5, 1, figsize=(9, 11), sharex=True)
        panels = [
            ("rss_mib", "RSS (MiB)"),
            ("fds", "open fds"),
            ("threads", "threads"),
            ("tasks", "child tasks"),
            ("cores", "CPU (cores)"),
        ]
        warm = self.warm() / 60
        for ax, (key, label) in zip(axes, panels):
            ax.plot(t, [s[key] for s in self.samples], lw=1)
            ax.set_ylabel(label)
            ax.axvline(warm, color="grey", ls=":", lw=1)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        axes[-1].set_xlabel("minutes")
        total = sum(verdict["calls"].values())
        state = "passed" if verdict["passed"] else "FAILED"
        fig.suptitle(
            f"Soak, {self.args.minutes:g} min, {self.args.workers} workers: {total} checked calls, "
            f"{verdict['failures']} failures, {state}"
        )
        fig.tight_layout()
        fig.savefig(out, dpi=80)


def judge_again(args: argparse.Namespace) -> int:
    """Judges and plots an earlier run again, from the CSV and JSON beside `args.judge`."""
    earlier = json.loads(args.judge.with_suffix(".json").read_text())
    with open(args.judge.with_suffix(".csv"), newline="") as f:
        samples = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    args.minutes, args.workers = earlier["minutes"], earlier["workers"]
    soak = Soak.__new__(Soak)
    soak.args, soak.samples, soak.calls = args, samples, earlier["calls"]
    soak.failures = [f"failure {i + 1} of the run" for i in range(earlier["failures"])]
    verdict = soak.verdict()
    args.judge.with_suffix(".json").write_text(json.dumps(verdict, indent=2) + "\n")
    soak.plot(args.judge, verdict)
    print(json.dumps(verdict, indent=2))
    return 0 if verdict["passed"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", help="the agent-sandbox-server binary (required unless --judge)")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--cpu-share", type=float, default=1.0, help="of half the machine's cores")
    parser.add_argument("--stuck", type=float, default=60.0, help="seconds after which a call is stuck")
    parser.add_argument("--warmup", type=float, default=0.25, help="share of the run not judged (at least 1 min)")
    parser.add_argument("--out", type=Path, default=Path("soak.png"), help="the plot (CSV and JSON beside it)")
    parser.add_argument("--judge", type=Path, help="judge and plot an earlier run again from this plot's CSV and JSON")
    args = parser.parse_args()
    if args.judge:
        return judge_again(args)
    if not args.binary:
        parser.error("--binary is required")
    with tempfile.TemporaryDirectory(prefix="soak-") as work:
        daemon = Daemon(args.binary, Path(work))
        soak = Soak(daemon, args)
        try:
            soak.run()
        finally:
            stop_process(daemon.process)
        verdict = soak.verdict()
    with open(args.out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(soak.samples[0]))
        writer.writeheader()
        writer.writerows(soak.samples)
    args.out.with_suffix(".json").write_text(json.dumps(verdict, indent=2) + "\n")
    soak.plot(args.out, verdict)
    print(json.dumps(verdict, indent=2))
    return 0 if verdict["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
