"""Webhooks with the official ``openai`` SDK (pinned in requirements.txt):
``client.webhooks`` registers, reads, changes, tests, rotates and deletes
endpoints on our ``/v1/webhook_endpoints``, and ``client.webhooks.unwrap``
verifies what our server delivers to a receiver on loopback (so these
servers allow private URLs and plain http). Then side by side with the
reference: the same requests give the same statuses and shapes, and the
same refusal bodies; the differences kept on purpose are in docs/webhooks.md.
"""

from __future__ import annotations

import http.server
import os
import queue
import sys
import threading

import openai
import pytest
from openai import OpenAI

from conftest import TOKEN
from test_agents_parity import Side, same, shape, without
from test_agents_responses import agents_env

OPEN = {"ABX_AGENTS_ALLOW_PRIVATE_URLS": "1", "ABX_AGENTS_WEBHOOK_ALLOW_HTTP": "1"}
ALL = ["agent.session.created", "agent.session.in_progress", "agent.session.idle", "agent.session.failed"]


class Receiver:
    """An HTTP receiver on loopback that keeps what it gets (headers, body)."""

    def __init__(self) -> None:
        self.got: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()
        got = self.got

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                got.put(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next(self, event_type: str | None = None) -> tuple[dict[str, str], bytes]:
        while True:
            headers, body = self.got.get(timeout=30)
            if event_type is None or event_type.encode() in body:
                return headers, body

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def client(make_server, tmp_path):
    server = make_server(env={**agents_env(tmp_path), **OPEN})
    return OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0, timeout=60)


def test_the_sdk_manages_endpoints_and_unwraps_what_we_sign(client, receiver):
    assert client.webhooks.event_types.list().data == ALL
    created = client.webhooks.create(url=receiver.url, event_types=["agent.session.idle"], name="ci")
    assert created.object == "webhook_endpoint" and created.id.startswith("we_")
    assert created.signing_secret.startswith("whsec_")
    got = client.webhooks.retrieve(created.id)
    assert (got.url, got.name, got.event_types) == (receiver.url, "ci", ["agent.session.idle"])
    assert "signing_secret" not in got.model_dump(exclude_unset=True)
    assert [e.id for e in client.webhooks.list()] == [created.id]
    changed = client.webhooks.update(created.id, name="renamed")
    assert changed.name == "renamed"

    result = client.webhooks.test(created.id, event_type="agent.session.idle")
    assert (result.object, result.status_code, result.success) == ("webhook_endpoint.test", 200, True)
    headers, body = receiver.next()
    event = client.webhooks.unwrap(body, headers, secret=created.signing_secret)
    assert (event.type, event.data.id, event.data.environment_type) == ("agent.session.idle", "agsess_test", "self_hosted")

    rotated = client.webhooks.rotate_secret(created.id)
    assert rotated.signing_secret != created.signing_secret
    client.webhooks.test(created.id, event_type="agent.session.failed")
    headers, body = receiver.next()
    assert client.webhooks.unwrap(body, headers, secret=rotated.signing_secret).type == "agent.session.failed"
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.unwrap(body, headers, secret=created.signing_secret)

    with pytest.raises(openai.BadRequestError) as refused:
        client.webhooks.rotate_secret(created.id, keep_old_secret_active_for_24_hours=True)
    assert refused.value.body["param"] == "keep_old_secret_active_for_24_hours"
    deleted = client.webhooks.delete(created.id)
    assert (deleted.id, deleted.deleted) == (created.id, True)
    with pytest.raises(openai.NotFoundError) as missing:
        client.webhooks.retrieve(created.id)
    assert missing.value.body["code"] == "resource_not_found"


def test_a_response_turn_sends_session_events_the_sdk_unwraps(client, receiver):
    endpoint = client.webhooks.create(url=receiver.url, event_types=ALL, name="turns")
    response = client.responses.create(model="command", input="hello")
    assert response.status == "completed"
    seen = {}
    for event_type in ("agent.session.in_progress", "agent.session.idle"):
        headers, body = receiver.next(event_type)
        event = client.webhooks.unwrap(body, headers, secret=endpoint.signing_secret)
        seen[event.type] = event
        assert event.data.id.startswith("agsess_") and event.id.startswith("evt_")
    assert seen["agent.session.in_progress"].data.id == seen["agent.session.idle"].data.id


@pytest.fixture
def sides(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
    env.update({"ABX_SERVER_TOKEN": TOKEN, "ABX_SERVER_ENABLED_GROUPS": "agents", **OPEN})
    from conftest import BIN

    made = []
    for name, command in [("ref", [sys.executable, "-m", "agent_sandbox.server", "serve"]),
                          ("ours", [BIN, "serve", "--code-port", "off", "--envd-port", "off"])]:
        made.append(Side(name, tmp_path / name, command, env))
    yield made
    for side in made:
        side.stop()


# Kept differences (docs/webhooks.md): ours keeps endpoints across a restart, so its label does
# not say `memory_only`.
LABEL = "x_agent_sandbox.differences"


def unlabelled(page: dict) -> dict:
    """A list page without the kept label difference of its items."""
    return {**page, "data": [without(item, LABEL) for item in page["data"]]}


def test_endpoints_match_the_reference(sides, receiver):
    def both(method: str, path: str, **kwargs):
        return [s.call(method, path, **kwargs) for s in sides]

    created = both("POST", "/v1/webhook_endpoints", json={"url": receiver.url, "event_types": ALL, "name": "n"})
    same(*created, LABEL)
    ids = [r.json()["id"] for r in created]
    same(*both("GET", "/v1/webhook_event_types"))
    for query in ("", "?limit=1&order=asc"):
        ref, ours = (r.json() for r in both("GET", f"/v1/webhook_endpoints{query}"))
        assert shape(unlabelled(ours)) == shape(unlabelled(ref)), (ref, ours)
    pairs = [
        [s.call("GET", f"/v1/webhook_endpoints/{i}") for s, i in zip(sides, ids)],
        [s.call("POST", f"/v1/webhook_endpoints/{i}", json={"name": None, "event_types": ALL[:1]}) for s, i in zip(sides, ids)],
        [s.call("POST", f"/v1/webhook_endpoints/{i}/rotate_secret", json={}) for s, i in zip(sides, ids)],
        [s.call("POST", f"/v1/webhook_endpoints/{i}/test", json={"event_type": "agent.session.idle"}) for s, i in zip(sides, ids)],
    ]
    for ref, ours in pairs:
        same(ref, ours, LABEL)
    for _ in sides:
        receiver.next()
    # Refusals: the same status and the same body, word for word.
    unknown = "we_000000000000000000000000"
    for method, path, body in [
        ("GET", f"/v1/webhook_endpoints/{unknown}", None),
        ("POST", f"/v1/webhook_endpoints/{unknown}", {"name": "x"}),
        ("DELETE", f"/v1/webhook_endpoints/{unknown}", None),
        ("POST", f"/v1/webhook_endpoints/{unknown}/rotate_secret", {}),
        ("POST", f"/v1/webhook_endpoints/{unknown}/test", {"event_type": "agent.session.idle"}),
        ("POST", "/v1/webhook_endpoints", {"event_types": ALL}),
        ("POST", "/v1/webhook_endpoints", {"url": "ftp://h.example.com/", "event_types": ALL}),
        ("POST", "/v1/webhook_endpoints", {"url": "https://h.example.com/?a=1", "event_types": ALL}),
        ("POST", "/v1/webhook_endpoints", {"url": "https://u:p@h.example.com/", "event_types": ALL}),
        ("POST", "/v1/webhook_endpoints", {"url": "https://h.example.com/", "event_types": []}),
        ("POST", "/v1/webhook_endpoints", {"url": "https://h.example.com/", "event_types": ["agent.session.action_required"]}),
        ("POST", "/v1/webhook_endpoints", {"url": "https://h.example.com/", "event_types": ALL, "name": 5}),
        ("POST", "/v1/webhook_endpoints", {"url": "https://h.example.com/", "event_types": ALL, "extra": 1}),
        ("POST", f"/v1/webhook_endpoints/{ids[0]}/rotate_secret", {"keep_old_secret_active_for_24_hours": True}),
        ("GET", "/v1/webhook_endpoints?limit=0", None),
        ("GET", "/v1/webhook_endpoints?after=we_nope", None),
    ]:
        ref, ours = (s.call(method, path.replace(ids[0], i), json=body) for s, i in zip(sides, ids))
        assert (ref.status_code, ref.json()) == (ours.status_code, ours.json()), (method, path, body)
        assert ours.headers.get("x-should-retry") == "false"
    tests = [s.call("POST", f"/v1/webhook_endpoints/{i}/test", json={"event_type": "nope"}) for s, i in zip(sides, ids)]
    assert tests[0].json() == tests[1].json()
    deleted = [s.call("DELETE", f"/v1/webhook_endpoints/{i}") for s, i in zip(sides, ids)]
    same(*deleted, LABEL)
    assert without(deleted[0].json(), "id", "x_agent_sandbox") == without(deleted[1].json(), "id", "x_agent_sandbox")
