#!/usr/bin/env python3
"""Code-execution benchmark (not a test): our daemon's code contexts against
a bare jupyter_client + ipykernel doing the same executions.

    python3 -m venv /tmp/bench && /tmp/bench/bin/pip install -r bench/requirements.txt
    /tmp/bench/bin/python bench/code.py --ours target/release/agent-sandbox-server \
        [--ref /path/to/reference/agent-sandbox-server]

Workloads:
- warm round trip: `x = x + 1; x` in a warm Python context, p50 and p99;
- new context: create a Python context and run its first execution;
- memory: the daemon plus one idle Python context (RSS of the whole process
  tree), against the ipykernel process;
- rich results: `display(df)` of a 1,000-row data frame (text, HTML and the
  frame's columns as `data`), and `plt.show()` of a 1,000-point line figure
  (PNG and chart), p50 of round trips, against ipykernel (which sends text and
  HTML, and a PNG without chart); and the chart extraction alone, timed in
  this process on the same figure with the driver's extractor;
- with --ref: `POST /code/run` of `print(1)` against the reference server.

Both sides use this interpreter (its directory leads PATH), so the numbers
compare the runners, not two Pythons. Prints markdown table rows; ratio is
ours / reference (below 1 is better for us).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOKEN = "bench-token"


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree(pid: int) -> list[int]:
    """pid and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


class Server:
    """A server process started on free ports; its `listening` lines give the URLs."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.base = tempfile.mkdtemp(prefix="abx-bench-")
        self.process = subprocess.Popen(
            [*argv, "--base-dir", self.base] if "--base-dir" not in argv else argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.base,
        )
        self.urls: dict[str, str] = {}

    def wait_for(self, *names: str) -> None:
        assert self.process.stdout is not None
        while not all(n in self.urls for n in names):
            line = self.process.stdout.readline().decode()
            if not line:
                raise RuntimeError("the server exited before listening")
            parts = line.split()
            if len(parts) == 3 and parts[0] == "listening":
                self.urls[parts[1]] = parts[2]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.base, ignore_errors=True)


class Http:
    """One keep-alive connection."""

    def __init__(self, url: str):
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port))
        self.headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: dict | None = None) -> bytes:
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
        return data


def ours(binary: str, env: dict[str, str], rounds: int) -> dict[str, float]:
    server = Server([binary, "serve", "--host", "127.0.0.1", "--port", "0", "--pty-port", "0", "--code-port", "0"], env)
    try:
        server.wait_for("code", "api")
        client = Http(server.urls["code"])
        starts = []
        for _ in range(7):
            began = time.perf_counter()
            context = json.loads(client.call("POST", "/contexts", {"language": "python"}))
            client.call("POST", "/execute", {"code": "1", "context_id": context["id"]})
            starts.append(time.perf_counter() - began)
            client.call("DELETE", f"/contexts/{context['id']}")
        context = json.loads(client.call("POST", "/contexts", {"language": "python"}))["id"]
        client.call("POST", "/execute", {"code": "x = 0", "context_id": context})
        times = []
        for _ in range(rounds):
            began = time.perf_counter()
            lines = client.call("POST", "/execute", {"code": "x = x + 1; x", "context_id": context})
            times.append(time.perf_counter() - began)
        assert b'"text":"%d"' % rounds in lines, lines
        time.sleep(1.0)
        memory = sum(rss_kib(pid) for pid in tree(server.process.pid))
        run = lambda code: client.call("POST", "/execute", {"code": code, "context_id": context})  # noqa: E731
        rich = rich_rows(run, b'"data":{', b'"chart":{')
        return {"p50": statistics.median(times), "p99": quantile(times, 0.99), "start": statistics.median(starts), "rss": memory, **rich}
    finally:
        server.stop()


FRAME = "import numpy as np, pandas as pd\ndf = pd.DataFrame(np.random.default_rng(1).random((1000, 5)), columns=list('abcde'))"
FIGURE = "import numpy as np, matplotlib.pyplot as plt\nplt.plot(np.linspace(0, 10, 1000), np.sin(np.linspace(0, 10, 1000)), label='sin')\nplt.title('t')\nplt.show()"


def rich_rows(run, frame_mark: bytes, figure_mark: bytes) -> dict[str, float]:
    """The rich-result rows a side can produce (a side without them, or without pandas, gets none)."""
    rows = {}
    for name, mark, figure in (("display", frame_mark, False), ("figure", figure_mark, True)):
        try:
            rows[name] = rich_rounds(run, mark, figure)
        except (AssertionError, RuntimeError) as e:
            print(f"{name}: {e}", file=sys.stderr)
    return rows


def rich_rounds(run, expect: bytes, figure: bool = False, rounds: int = 30) -> float:
    """p50 of `display(df)` (or of showing FIGURE) through `run`, which returns the answer's bytes."""
    run(FRAME if not figure else "import matplotlib.pyplot")
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        out = run(FIGURE if figure else "display(df)")
        times.append(time.perf_counter() - began)
        assert expect in out, out[:300]
    return statistics.median(times)


def chart_extraction(rounds: int = 30) -> float | None:
    """p50 of the driver's chart extractor on FIGURE's figure, in this process."""
    try:
        import matplotlib

        matplotlib.use("agg")
        import io
        import types

        import matplotlib.pyplot as plt
    except ImportError:
        return None
    charts = types.ModuleType("charts")
    source = Path(__file__).resolve().parents[1] / "src/code/drivers/python_charts.py"
    exec(compile(source.read_text(), str(source), "exec"), charts.__dict__)
    exec(FIGURE.replace("plt.show()", "fig = plt.gcf()"), namespace := {})
    fig = namespace["fig"]
    fig.savefig(io.BytesIO(), format="png", bbox_inches="tight")
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        chart = charts.figure_chart(fig)
        times.append(time.perf_counter() - began)
    assert chart["type"] == "line" and len(chart["elements"][0]["points"]) == 1000
    plt.close("all")
    return statistics.median(times)


def jupyter(rounds: int) -> dict[str, float] | None:
    try:
        from jupyter_client.manager import start_new_kernel
    except ImportError:
        return None
    starts = []
    for _ in range(5):
        began = time.perf_counter()
        km, kc = start_new_kernel(kernel_name="python3", stderr=subprocess.DEVNULL)
        kc.execute_interactive("1", timeout=30, output_hook=lambda _: None)
        starts.append(time.perf_counter() - began)
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    km, kc = start_new_kernel(kernel_name="python3", stderr=subprocess.DEVNULL)
    try:
        kc.execute_interactive("x = 0", timeout=30, output_hook=lambda _: None)
        times = []
        for _ in range(rounds):
            began = time.perf_counter()
            reply = kc.execute_interactive("x = x + 1; x", timeout=30, output_hook=lambda _: None)
            times.append(time.perf_counter() - began)
            assert reply["content"]["status"] == "ok"
        time.sleep(1.0)
        pid = km.provisioner.process.pid  # type: ignore[union-attr]
        memory = sum(rss_kib(p) for p in tree(pid))

        def run(code: str) -> bytes:
            outputs: list[dict] = []
            reply = kc.execute_interactive(code, timeout=60, output_hook=outputs.append)
            assert reply["content"]["status"] == "ok", reply["content"]
            return json.dumps([o["content"] for o in outputs]).encode()

        rich = rich_rows(run, b"text/html", b"image/png")
        return {"p50": statistics.median(times), "p99": quantile(times, 0.99), "start": statistics.median(starts), "rss": memory, **rich}
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def one_shot(binary: str, extra: list[str], env: dict[str, str], rounds: int) -> float:
    """p50 of `POST /code/run` of `print(1)` on a server started on a fixed free port."""
    port = free_port()
    server = Server([binary, "serve", "--host", "127.0.0.1", "--port", str(port), *extra], env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                Http(f"http://127.0.0.1:{port}").call("GET", "/health")
                break
            except (OSError, RuntimeError, http.client.HTTPException):
                if time.monotonic() > deadline or server.process.poll() is not None:
                    raise RuntimeError(f"{binary} did not start") from None
                time.sleep(0.05)
        client = Http(f"http://127.0.0.1:{port}")
        times = []
        for _ in range(rounds):
            began = time.perf_counter()
            out = json.loads(client.call("POST", "/code/run", {"code": "print(1)", "language": "python"}))
            times.append(time.perf_counter() - began)
            assert out["stdout"] == "1\n", out
        return statistics.median(times)
    finally:
        server.stop()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(name: str, mine: float | None, theirs: float | None, unit: str) -> str:
    def show(v: float | None) -> str:
        if v is None:
            return "n/a"
        return f"{v * 1000:.2f} ms" if unit == "s" else f"{v / 1024:.1f} MiB"

    # How many times better ours is (all these rows are lower-is-better), as every other row.
    ratio = f"{theirs / mine:.2f}x" if mine and theirs else "n/a"
    return f"| {name} | {show(mine)} | {show(theirs)} | {ratio} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", required=True, help="our agent-sandbox-server binary")
    parser.add_argument("--ref", help="the reference agent-sandbox-server, for the /code/run row")
    parser.add_argument("--rounds", type=int, default=500)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["ABX_SERVER_TOKEN"] = TOKEN
    mine = ours(args.ours, env, args.rounds)
    theirs = jupyter(args.rounds) or {}
    print("| workload | ours | reference | ratio |")
    print("|---|---|---|---|")
    print(row("warm round trip `x = x + 1; x`, p50 (vs jupyter_client + ipykernel)", mine["p50"], theirs.get("p50"), "s"))
    print(row("warm round trip `x = x + 1; x`, p99", mine["p99"], theirs.get("p99"), "s"))
    print(row("new Python context + first execution, median", mine["start"], theirs.get("start"), "s"))
    print(row("memory: daemon + one idle Python context (vs the ipykernel process), RSS", mine["rss"], theirs.get("rss"), "kib"))
    print(row("`display(df)` of a 1,000-row frame (text, HTML, data), p50", mine.get("display"), theirs.get("display"), "s"))
    print(row("`plt.show()` of a 1,000-point line (PNG + chart; ipykernel: PNG), p50", mine.get("figure"), theirs.get("figure"), "s"))
    print(row("chart extraction of that figure alone, p50", chart_extraction(), None, "s"))
    if args.ref:
        groups = {**env, "ABX_SERVER_ENABLED_GROUPS": "dev_tools"}
        mine_run = one_shot(args.ours, ["--pty-port", "0", "--code-port", "off"], groups, 30)
        theirs_run = one_shot(args.ref, ["--pty-port", str(free_port())], groups, 30)
        print(row("`POST /code/run` of `print(1)`, p50 (vs the reference server)", mine_run, theirs_run, "s"))


if __name__ == "__main__":
    main()
