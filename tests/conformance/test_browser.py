"""Browser group conformance: the real client's eight browser calls against
Debian's Chromium, on pages a small HTTP server on loopback serves.

The policy allows loopback (``block_private_networks: false``) and denies the
metadata address by pattern, so nothing leaves loopback.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from agent_sandbox.models.errors import CommandTimeoutError, PolicyDeniedError, ServerAPIError

PAGE = (
    b"<!DOCTYPE html><html><head><title>Conformance</title></head><body><p id=p>Hello</p>"
    b"<input id=q><button id=b onclick=\"document.title='pressed'\">Press</button>"
    b"<img src='http://169.254.169.254/latest/x.png'><script>console.info('loaded', 7)</script></body></html>"
)
POLICY = {
    "groups": {"browser": True},
    "endpoints": {
        "browser_navigate": {
            "params": {"block_private_networks": False, "url_deny": ["http://169.254.169.254/*"]}
        }
    },
}


class _Pages(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture
def browser(make_server):
    return make_server(env={"ABX_SERVER_POLICY": json.dumps(POLICY)}).client().browser


def test_the_eight_calls(browser, site):
    page = browser.navigate_sync(f"{site}/")
    assert (page.url, page.title, page.status) == (f"{site}/", "Conformance", 200)
    assert page.model_extra["blocked"][0]["url"] == "http://169.254.169.254/latest/x.png"
    logs = browser.console_sync()
    assert [(entry["type"], entry["text"]) for entry in logs] == [("info", "loaded 7")]
    assert browser.console_sync() == []
    content = browser.content_sync("text")
    assert (content.content, content.title) == ("Hello\n\nPress", "Conformance")
    assert browser.content_sync().content.startswith("<!DOCTYPE html><html><head><title>Conformance")
    assert browser.type_sync("#q", "typed text", delay=0) == {"typed": True, "selector": "#q", "text": "typed text"}
    assert browser.click_sync("#b") == {"clicked": True, "selector": "#b"}
    assert browser.evaluate_sync("[document.title, document.querySelector('#q').value]") == ["pressed", "typed text"]
    assert browser.evaluate_sync("() => Promise.resolve({n: 1})") == {"n": 1}
    png = browser.screenshot_sync()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert browser.screenshot_sync(selector="#p", format="jpeg").startswith(b"\xff\xd8\xff")
    assert browser.pdf_sync().startswith(b"%PDF-")


def test_faults_become_the_clients_errors(browser, site):
    with pytest.raises(PolicyDeniedError) as denied:
        browser.navigate_sync(f"{site}/redirect")
    assert denied.value.error_code == "url_not_allowed"
    assert denied.value.rule == "url_deny:http://169.254.169.254/*"
    assert "http://169.254.169.254/latest/meta-data/" in denied.value.message
    browser.navigate_sync(f"{site}/", wait_until="load")
    with pytest.raises(ServerAPIError) as missing:
        browser.screenshot_sync(selector="#nope")
    assert (missing.value.status_code, missing.value.error_code) == (404, "selector_not_found")
    with pytest.raises(ServerAPIError) as thrown:
        browser.evaluate_sync("throw new Error('boom')")
    assert (thrown.value.status_code, thrown.value.message) == (400, "Error: boom")
    with pytest.raises(CommandTimeoutError):
        browser.click_sync("#nope", timeout=200)
    assert browser.evaluate_sync("fetch('http://169.254.169.254/').catch(e => e.name)") == "TypeError"


def test_loopback_is_refused_without_a_policy_that_allows_it(make_server, site):
    browser = make_server(env={"ABX_SERVER_ENABLED_GROUPS": "browser"}).client().browser
    with pytest.raises(PolicyDeniedError) as denied:
        browser.navigate_sync(f"{site}/")
    assert (denied.value.error_code, denied.value.rule) == ("url_denied", "private_address")
