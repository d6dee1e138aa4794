"""Browser group: start, warm navigate + screenshot, and memory (ours only).

The reference's browser needs Playwright, which its package does not bring
(and its sync Playwright serves only the first request), so the reference
column is empty. Pages come from a small HTTP server on loopback; the policy
allows loopback only for this.

- first call: a fresh server's first `navigate` (Chromium starts), 5 servers;
- warm: `navigate` + `screenshot` of the same local page, 40 rounds, p50 and p99;
- RSS: the daemon process alone with the browser group on and no browser,
  then with a live browser; and the browser's own processes;
- a page of 50 sub-resources (images, each a request of its own), warm
  `navigate` until `load`, 30 rounds, p50: every connection goes through the
  daemon's network path (its proxy). With `ABX_BENCH_BEFORE=BIN` (a build
  without that path) the same page is loaded by it in alternating rounds, and
  the row compares the two ("before" in the reference column).
"""

from __future__ import annotations

import http.client
import os
import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import HOST, TOKEN, Server, descendants, parse_args, row, rss_of

PAGE = b"<!DOCTYPE html><html><head><title>bench</title></head><body>" + b"<p>Lorem ipsum dolor sit amet.</p>" * 200 + b"</body></html>"
POLICY = {"groups": {"browser": True}, "endpoints": {"browser_navigate": {"params": {"block_private_networks": False}}}}


GIF = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")
MANY = (
    b"<!DOCTYPE html><html><head><title>many</title></head><body>"
    + b"".join(b'<img src="/img/%d.gif">' % i for i in range(50))
    + b"</body></html>"
)


class _Page(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802
        body, kind = PAGE, "text/html"
        if self.path.startswith("/img/"):
            body, kind = GIF, "image/gif"
        elif self.path.startswith("/many"):
            body = MANY
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def post(server: Server, path: str, body: dict) -> dict:
    conn = http.client.HTTPConnection(HOST, server.port, timeout=60)
    try:
        conn.request("POST", path, json.dumps(body), {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        response = conn.getresponse()
        data = json.loads(response.read())
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status} {data}")
        return data
    finally:
        conn.close()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    args = parse_args(__doc__)
    httpd = ThreadingHTTPServer((HOST, 0), _Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://{HOST}:{httpd.server_address[1]}/"
    env = {"ABX_SERVER_POLICY": json.dumps(POLICY)}
    firsts = []
    for _ in range(5):
        with Server.start("ours", args.ours, env=env, args=["--code-port", "off", "--envd-port", "off"]) as server:
            started = time.perf_counter()
            post(server, "/browser/navigate", {"url": url, "wait_until": "load"})
            firsts.append((time.perf_counter() - started) * 1000)
    with Server.start("ours", args.ours, env=env, args=["--code-port", "off", "--envd-port", "off"]) as server:
        time.sleep(1.0)
        idle = rss_of(server.process.pid)
        post(server, "/browser/navigate", {"url": url, "wait_until": "load"})
        warm = []
        for _ in range(40):
            started = time.perf_counter()
            post(server, "/browser/navigate", {"url": url, "wait_until": "load"})
            post(server, "/browser/screenshot", {"full_page": False})
            warm.append((time.perf_counter() - started) * 1000)
        live = rss_of(server.process.pid)
        browser = sum(rss_of(pid) for pid in descendants(server.process.pid))
    many = many_subresources(args.ours, url + "many", env)
    httpd.shutdown()
    mib = 1 / (1 << 20)
    print(row("browser: first call (Chromium starts) p50", statistics.median(firsts), None, "ms", better="lower"))
    print(row("browser: warm navigate + screenshot p50", percentile(warm, 50), None, "ms", better="lower"))
    print(row("browser: warm navigate + screenshot p99", percentile(warm, 99), None, "ms", better="lower"))
    print(row("browser: daemon RSS, group on, no browser", idle * mib, None, "MiB", better="lower"))
    print(row("browser: daemon RSS with a live browser", live * mib, None, "MiB", better="lower"))
    print(row("browser: Chromium's processes RSS", browser * mib, None, "MiB", better="lower"))
    note = "reference column: ABX_BENCH_BEFORE, without the network path" if many[1] is not None else ""
    print(row("browser: page of 50 sub-resources, warm navigate p50", many[0], many[1], "ms", better="lower", note=note))


def many_subresources(ours: str, url: str, env: dict) -> tuple[float, float | None]:
    """Warm loads of a page with 50 images: p50 for ours and, with
    `ABX_BENCH_BEFORE`, for that build, in alternating rounds."""
    binaries = {"ours": ours}
    if os.environ.get("ABX_BENCH_BEFORE"):
        binaries["before"] = os.environ["ABX_BENCH_BEFORE"]
    times: dict[str, list[float]] = {name: [] for name in binaries}
    servers = {
        name: Server.start(name, binary, env=env, args=["--code-port", "off", "--envd-port", "off"])
        for name, binary in binaries.items()
    }
    try:
        for server in servers.values():
            post(server, "/browser/navigate", {"url": url, "wait_until": "load"})
        for _ in range(30):
            for name, server in servers.items():
                started = time.perf_counter()
                post(server, "/browser/navigate", {"url": url + f"?{time.perf_counter_ns()}", "wait_until": "load"})
                times[name].append((time.perf_counter() - started) * 1000)
    finally:
        for server in servers.values():
            server.stop()
    before = percentile(times["before"], 50) if "before" in times else None
    return percentile(times["ours"], 50), before


if __name__ == "__main__":
    main()
