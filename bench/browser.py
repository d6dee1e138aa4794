"""Browser group: start, warm navigate + screenshot, and memory (ours only).

The reference's browser needs Playwright, which its package does not bring
(and its sync Playwright serves only the first request), so the reference
column is empty. Pages come from a small HTTP server on loopback; the policy
allows loopback only for this.

- first call: a fresh server's first `navigate` (Chromium starts), 5 servers;
- warm: `navigate` + `screenshot` of the same local page, 40 rounds, p50 and p99;
- RSS: the daemon process alone with the browser group on and no browser,
  then with a live browser; and the browser's own processes.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import HOST, TOKEN, Server, descendants, parse_args, row, rss_of

PAGE = b"<!DOCTYPE html><html><head><title>bench</title></head><body>" + b"<p>Lorem ipsum dolor sit amet.</p>" * 200 + b"</body></html>"
POLICY = {"groups": {"browser": True}, "endpoints": {"browser_navigate": {"params": {"block_private_networks": False}}}}


class _Page(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

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
    httpd.shutdown()
    mib = 1 / (1 << 20)
    print(row("browser: first call (Chromium starts) p50", statistics.median(firsts), None, "ms", better="lower"))
    print(row("browser: warm navigate + screenshot p50", percentile(warm, 50), None, "ms", better="lower"))
    print(row("browser: warm navigate + screenshot p99", percentile(warm, 99), None, "ms", better="lower"))
    print(row("browser: daemon RSS, group on, no browser", idle * mib, None, "MiB", better="lower"))
    print(row("browser: daemon RSS with a live browser", live * mib, None, "MiB", better="lower"))
    print(row("browser: Chromium's processes RSS", browser * mib, None, "MiB", better="lower"))


if __name__ == "__main__":
    main()
