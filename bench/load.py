"""Load rows: a mixed workload under concurrency, ours against the reference.

wrk drives one server at a time with a mix of calls both serve, cycled in
the same order on every connection: `GET /health` (4 of 14), a 64 KiB
`GET /files/download-stream` (3), a 4 KiB `POST /files/upload-stream` (2,
each wrk thread writing its own file), `GET /files/list` (2),
`GET /system/info` (1), `POST /shell` running `echo` (1) and
`GET /files/stat` (1), absolute paths as the reference wants them. Each level of
concurrency runs for `SECONDS` on a fresh server of each side, alternating.
Rows: calls per second, mean, p50 and p99 latency (a server that serves
cheap calls first and makes the others wait has a low p50 and a long tail), CPU time per 1,000 calls (the
server and the children it reaped), peak RSS during the run (the server and
its descendants), and any errors (a non-2xx answer or a socket error).

Usage: python bench/load.py --ours BIN --ref BIN   (prints markdown rows)
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

from common import TOKEN, Server, alternate, parse_args, row, wrk

SECONDS = 10
LEVELS = (16, 64)
ROUNDS = 2

LUA = r"""
local token = "Bearer " .. os.getenv("LOAD_TOKEN")
local base = os.getenv("LOAD_BASE")
local auth = { ["Authorization"] = token }
local post = { ["Authorization"] = token, ["Content-Type"] = "application/json" }
local counter = 0
local mix = {}

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end

function init(args)
  local own = base .. "/load/c" .. id .. ".bin"
  -- 4 KiB of content: 4096 bytes of "A" base64-encoded are 5464 characters "QUFB" plus "QQ==".
  local upload = '{"path": "' .. own .. '", "content_base64": "' .. string.rep("QUFB", 1365) .. 'QQ=="}'
  local shared = base .. "/load/64k.bin"
  mix = {
    wrk.format("GET", "/health"),
    wrk.format("GET", "/files/download-stream?path=" .. shared, auth),
    wrk.format("POST", "/files/upload-stream", post, upload),
    wrk.format("GET", "/health"),
    wrk.format("GET", "/files/list?path=" .. base .. "/load", auth),
    wrk.format("GET", "/system/info", auth),
    wrk.format("GET", "/health"),
    wrk.format("GET", "/files/download-stream?path=" .. shared, auth),
    wrk.format("POST", "/shell", post, '{"command": "echo load"}'),
    wrk.format("GET", "/files/stat?path=" .. own, auth),
    wrk.format("GET", "/health"),
    wrk.format("POST", "/files/upload-stream", post, upload),
    wrk.format("GET", "/files/download-stream?path=" .. shared, auth),
    wrk.format("GET", "/files/list?path=" .. base .. "/load", auth),
  }
  at = id % #mix
end

function request()
  at = at % #mix + 1
  return mix[at]
end
"""


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` and of the children it reaped (cutime + cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class PeakRss(threading.Thread):
    """Samples a server's RSS (with its descendants) every 100 ms until stopped."""

    def __init__(self, server: Server):
        super().__init__(daemon=True)
        self.server, self.peak, self.done = server, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            self.peak = max(self.peak, self.server.rss_bytes())

    def stop(self) -> float:
        self.done.set()
        self.join()
        return self.peak / 2**20


def main() -> None:
    args = parse_args(__doc__)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(LUA)
    os.environ["LOAD_TOKEN"] = TOKEN
    try:
        for connections in LEVELS:
            runs: dict[str, list[dict[str, float]]] = {"ours": [], "reference": []}

            def mixed(server: Server) -> float:
                (server.base / "load").mkdir()
                (server.base / "load" / "64k.bin").write_bytes(os.urandom(64 * 1024))
                os.environ["LOAD_BASE"] = str(server.base.resolve())
                before, rss = cpu_seconds(server.process.pid), PeakRss(server)
                rss.start()
                result = wrk(server.url + "/", seconds=SECONDS, connections=connections, script=script.name)
                peak = rss.stop()
                cpu = cpu_seconds(server.process.pid) - before
                runs[server.name].append(
                    {
                        "rps": result.requests_per_second,
                        "mean": result.mean_ms,
                        "p50": result.p50_ms,
                        "p99": result.p99_ms,
                        "cpu_ms_per_1000": cpu * 1000 / max(result.requests, 1) * 1000,
                        "rss": peak,
                        "errors": result.errors,
                    }
                )
                return result.requests_per_second

            alternate(args, mixed, rounds=ROUNDS)
            med = {n: {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0]} for n, rs in runs.items()}
            errors = {n: sum(r["errors"] for r in rs) for n, rs in runs.items()}
            note = f"{connections} connections, {ROUNDS} x {SECONDS} s, errors {errors['ours']} / {errors['reference']}"
            o, r = med["ours"], med["reference"]
            print(row("mixed load throughput", o["rps"], r["rps"], "req/s", better="higher", note=note))
            print(row("mixed load mean latency", o["mean"], r["mean"], "ms", better="lower", note=f"{connections} connections"))
            print(row("mixed load p50", o["p50"], r["p50"], "ms", better="lower", note=f"{connections} connections"))
            print(row("mixed load p99", o["p99"], r["p99"], "ms", better="lower", note=f"{connections} connections"))
            cpu_note = f"{connections} connections, server and reaped children"
            print(row("CPU per 1,000 calls", o["cpu_ms_per_1000"], r["cpu_ms_per_1000"], "ms", better="lower", note=cpu_note))
            print(row("peak RSS under load", o["rss"], r["rss"], "MiB", better="lower", note=f"{connections} connections"))
            sys.stdout.flush()
    finally:
        os.unlink(script.name)


if __name__ == "__main__":
    main()
