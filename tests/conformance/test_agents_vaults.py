"""Vaults and vault credentials through the official ``openai`` SDK (pinned
in requirements.txt: ``client.beta.agents.vaults`` and its ``credentials``),
with ``base_url`` pointed at our server; then side by side with the
reference (0.4.0a6): the same requests give the same statuses, shapes and
refusal bodies. The differences kept on purpose are listed in
``docs/agents.md`` and removed here, each with its reason.
"""

from __future__ import annotations

import json
import os
import re
import sys

import openai
import pytest
from openai import OpenAI

from conftest import TOKEN
from test_agents_parity import Side, same, shape

SECRET = "vault-secret-conformance-51c0e7"
URL = "https://mcp.example.com/mcp"
VAULT = re.compile(r"^vlt_[0-9a-f]{24}$")
CRED = re.compile(r"^cred_[0-9a-f]{24}$")


@pytest.fixture
def client(make_server, tmp_path):
    server = make_server(env={"ABX_SERVER_ENABLED_GROUPS": "agents", "ABX_AGENTS_STATE_DIR": str(tmp_path / "state")})
    yield server, OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0, timeout=30)


def test_the_sdk_manages_vaults_and_credentials_and_never_sees_a_secret(client, tmp_path):
    server, sdk = client
    vaults = sdk.beta.agents.vaults
    vault = vaults.create(name="  team ", metadata={"team": "a"})
    assert VAULT.match(vault.id) and (vault.name, vault.metadata) == ("team", {"team": "a"})
    assert vaults.retrieve(vault.id).model_dump() == vault.model_dump()
    assert vaults.update(vault.id, name="renamed").name == "renamed"
    other = vaults.create()
    assert [v.id for v in vaults.list()] == [other.id, vault.id]
    assert [v.id for v in vaults.list(metadata={"team": "a"})] == [vault.id]
    assert [v.id for v in vaults.list(order="asc", limit=1)] == [vault.id, other.id], "the SDK follows the pages"
    assert list(vaults.list(status="archived")) == []

    creds = vaults.credentials
    auth = {"type": "static_bearer", "token": SECRET, "mcp_server_url": URL}
    cred = creds.create(vault.id, name="docs", auth=auth, metadata={"k": "v"})
    assert CRED.match(cred.id) and cred.vault_id == vault.id
    dumped = cred.model_dump()
    assert dumped["auth"]["type"] == "static_bearer" and dumped["auth"]["mcp_server_url"] == URL
    assert creds.retrieve(cred.id, vault_id=vault.id).id == cred.id
    assert [c.id for c in creds.list(vault.id)] == [cred.id]
    rotated = creds.update(cred.id, vault_id=vault.id, auth={"type": "static_bearer", "token": SECRET + "-2"}, metadata={"k": "w"})
    assert rotated.metadata == {"k": "w"}
    raw = creds.with_raw_response.retrieve(cred.id, vault_id=vault.id)
    assert raw.headers["x-agent-sandbox-local"] == "1"
    assert SECRET not in raw.text

    with pytest.raises(openai.NotFoundError) as missing:
        vaults.retrieve("vlt_000000000000000000000000")
    assert missing.value.response.json()["error"]["code"] == "resource_not_found"
    with pytest.raises(openai.NotFoundError):
        creds.retrieve("cred_nope", vault_id=vault.id)
    with pytest.raises(openai.BadRequestError) as refused:
        creds.create(vault.id, name="env", auth={"type": "environment_variable", "secret_name": "X", "networking": {"type": "unrestricted"}})
    assert refused.value.response.json()["error"]["param"] == "auth.type"

    assert creds.delete(cred.id, vault_id=vault.id).deleted is True
    assert vaults.delete(vault.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        creds.list(vault.id)
    server.stop()
    assert SECRET not in server.log(), "the server log holds the secret"
    for root, _, files in os.walk(tmp_path / "state"):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                assert SECRET.encode() not in f.read(), name


@pytest.fixture
def sides(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
    env.update({"ABX_SERVER_TOKEN": TOKEN, "ABX_SERVER_ENABLED_GROUPS": "agents"})
    from conftest import BIN

    ref = Side("reference", tmp_path / "ref", [sys.executable, "-m", "agent_sandbox.server", "serve"], env)
    ours = Side("ours", tmp_path / "ours", [BIN, "serve", "--code-port", "off", "--envd-port", "off"], env)
    yield ref, ours
    ref.stop()
    ours.stop()


def test_vaults_and_credentials_match_the_reference(sides):
    created = [s.call("POST", "/v1/vaults", json={"name": " v ", "metadata": {"team": "a"}}) for s in sides]
    same(*created)
    r, o = (x.json() for x in created)
    assert VAULT.match(o["id"]) and {**r, "id": 0, "created_at": 0} == {**o, "id": 0, "created_at": 0}
    vids = [x.json()["id"] for x in created]
    for suffix in ["", "?order=asc", "?metadata%5Bteam%5D=a", "?status=archived", "?status[]=active&limit=1"]:
        same(*[s.call("GET", f"/v1/vaults{suffix}") for s in sides])
    same(*[s.call("POST", f"/v1/vaults/{v}", json={"name": "renamed", "metadata": {}}) for s, v in zip(sides, vids)])
    same(*[s.call("GET", f"/v1/vaults/{v}") for s, v in zip(sides, vids)])

    bodies = [
        {"name": "docs", "auth": {"type": "static_bearer", "token": SECRET, "mcp_server_url": URL}},
        {"name": "o", "metadata": {"k": "v"}, "auth": {"type": "mcp_oauth", "access_token": SECRET, "mcp_server_url": "https://o.example.com/x",
         "expires_at": "2030-01-01T00:00:00Z", "networking": {"type": "limited", "allowed_hosts": ["O.example.com"]}}},
    ]
    cids = []
    for body in bodies:
        replies = [s.call("POST", f"/v1/vaults/{v}/credentials", json=body) for s, v in zip(sides, vids)]
        same(*replies)
        r, o = (x.json() for x in replies)
        assert CRED.match(o["id"]) and SECRET not in replies[1].text
        strip = {"id": 0, "vault_id": 0, "created_at": 0, "updated_at": 0}
        assert {**r, **strip} == {**o, **strip}, "the same object, field for field"
        cids.append([x.json()["id"] for x in replies])
    # Documented: records created in the same second list in creation order here; the reference
    # orders them by their random ids. Compared as sets of the same shapes.
    listed = [s.call("GET", f"/v1/vaults/{v}/credentials").json() for s, v in zip(sides, vids)]
    by_name = [sorted(x["data"], key=lambda c: c["name"]) for x in listed]
    assert [shape(c) for c in by_name[0]] == [shape(c) for c in by_name[1]]
    assert [x["has_more"] for x in listed] == [False, False]
    for i, update in enumerate([{"auth": {"type": "static_bearer", "token": "rotated-123456"}, "metadata": {"a": "b"}},
                                {"auth": {"type": "mcp_oauth", "access_token": "rotated-654321"}}]):
        replies = [s.call("POST", f"/v1/vaults/{v}/credentials/{c}", json=update) for s, v, c in zip(sides, vids, cids[i])]
        same(*replies)
        assert replies[0].json()["auth"] == replies[1].json()["auth"]
    same(*[s.call("GET", f"/v1/vaults/{v}/credentials/{c}") for s, v, c in zip(sides, vids, cids[0])])
    same(*[s.call("DELETE", f"/v1/vaults/{v}/credentials/{c}") for s, v, c in zip(sides, vids, cids[0])])

    # A session that uses the vault names it; its MCP tool is bound to the credential.
    tools = [{"type": "mcp", "server_label": "docs", "transport": {"type": "http", "server_url": "https://o.example.com/mcp"}}]
    sessions = [s.call("POST", "/v1/agents/sessions", json={"agent": {"runtime": "codex", "tools": tools}, "vault_ids": [v],
                "environment": {"type": "self_hosted", "workspace_directory": str(s.work)}}) for s, v in zip(sides, vids)]
    same(*sessions)
    assert [x.json()["vault_ids"] for x in sessions] == [[v] for v in vids]
    same(*[s.call("DELETE", f"/v1/vaults/{v}") for s, v in zip(sides, vids)])


REFUSALS = [
    ("GET", "/v1/vaults/vlt_nope", None),
    ("POST", "/v1/vaults/vlt_nope", {"name": "x"}),
    ("DELETE", "/v1/vaults/vlt_nope", None),
    ("GET", "/v1/vaults/vlt_nope/credentials", None),
    ("POST", "/v1/vaults/vlt_nope/credentials", {"name": "c"}),
    ("GET", "/v1/vaults/vlt_nope/credentials/cred_x", None),
    ("POST", "/v1/vaults/vlt_nope/credentials/cred_x", {}),
    ("DELETE", "/v1/vaults/vlt_nope/credentials/cred_x", None),
    ("GET", "/v1/vaults?limit=0", None),
    ("GET", "/v1/vaults?order=up", None),
    ("GET", "/v1/vaults?after=vlt_x", None),
    ("POST", "/v1/vaults", {"name": 5}),
    ("POST", "/v1/vaults", {"name": "  "}),
    ("POST", "/v1/vaults", {"name": "x" * 257}),
    ("POST", "/v1/vaults", {"metadata": {"k": 1}}),
    ("POST", "/v1/vaults", {"metadata": {"": "v"}}),
    ("POST", "/v1/vaults", {"bogus": 1}),
    ("POST", "/v1/agents/sessions", {"vault_ids": "vlt_x"}),
    ("POST", "/v1/agents/sessions", {"vault_ids": ["vlt_x"]}),
]

CREDENTIAL_REFUSALS = [
    ("POST", "", {"auth": {"type": "static_bearer", "token": SECRET, "mcp_server_url": URL}}),
    ("POST", "", {"name": "c"}),
    ("POST", "", {"name": "c", "auth": {"type": "basic"}}),
    ("POST", "", {"name": "c", "auth": {"type": "environment_variable"}}),
    ("POST", "", {"name": "c", "auth": {"type": "static_bearer", "token": 5, "mcp_server_url": URL}}),
    ("POST", "", {"name": "c", "auth": {"type": "static_bearer", "token": "a\nb", "mcp_server_url": URL}}),
    ("POST", "", {"name": "c", "auth": {"type": "static_bearer", "token": SECRET, "mcp_server_url": "http://mcp.example.com/"}}),
    ("POST", "", {"name": "c", "auth": {"type": "static_bearer", "token": SECRET, "mcp_server_url": "https://localhost/"}}),
    ("POST", "", {"name": "c", "auth": {"type": "static_bearer", "token": SECRET, "mcp_server_url": "https://10.0.0.1/"}}),
    ("POST", "", {"name": "c", "auth": {"type": "static_bearer", "token": SECRET, "mcp_server_url": URL + "?t=1"}}),
    ("POST", "", {"name": "c", "auth": {"type": "static_bearer", "token": SECRET, "mcp_server_url": URL, "x": 1}}),
    ("POST", "", {"name": "c", "auth": {"type": "mcp_oauth", "access_token": SECRET, "mcp_server_url": URL, "expires_at": "soon"}}),
    ("POST", "", {"name": "c", "auth": {"type": "mcp_oauth", "access_token": SECRET, "mcp_server_url": URL, "refresh": {"x": 1}}}),
    ("POST", "", {"name": "c", "auth": {"type": "static_bearer", "token": SECRET, "mcp_server_url": URL, "networking": {"type": "unrestricted"}}}),
    ("POST", "", {"name": "c", "auth": {"type": "static_bearer", "token": SECRET, "mcp_server_url": URL,
                                        "networking": {"type": "limited", "allowed_hosts": ["evil.example.com"]}}}),
    ("GET", "/cred_nope", None),
    ("POST", "/cred_nope", {}),
    ("DELETE", "/cred_nope", None),
    ("POST", "/{cid}", {"name": "x"}),
    ("POST", "/{cid}", {"auth": {"type": "mcp_oauth", "access_token": "t"}}),
    ("POST", "/{cid}", {"auth": {"type": "static_bearer"}}),
    ("POST", "/{cid}", {"auth": {"type": "static_bearer", "token": SECRET, "mcp_server_url": URL}}),
    ("GET", "?after=cred_x", None),
]


def test_refusals_match_the_reference_body_for_body(sides):
    for method, path, body in REFUSALS:
        replies = [s.call(method, path, json=body) for s in sides]
        same(*replies)
        assert replies[0].json() == replies[1].json(), (method, path)
        assert [r.headers.get("x-should-retry") for r in replies] == ["false"] * 2
    vids = [s.call("POST", "/v1/vaults", json={}).json()["id"] for s in sides]
    cids = [s.call("POST", f"/v1/vaults/{v}/credentials", json={"name": "c", "auth": {"type": "static_bearer", "token": SECRET,
            "mcp_server_url": URL}}).json()["id"] for s, v in zip(sides, vids)]
    for method, suffix, body in CREDENTIAL_REFUSALS:
        replies = [s.call(method, f"/v1/vaults/{v}/credentials{suffix.replace('{cid}', c)}", json=body)
                   for s, v, c in zip(sides, vids, cids)]
        same(*replies)
        assert replies[0].json() == replies[1].json(), (method, suffix, body)
        assert SECRET not in replies[1].text
    # Binding refusals at session creation: an ambiguous match, a credential from no attached vault.
    for s, v in zip(sides, vids):
        s.call("POST", f"/v1/vaults/{v}/credentials", json={"name": "twin", "auth": {"type": "static_bearer", "token": SECRET,
               "mcp_server_url": "https://mcp.example.com:443/other"}})
    tools = [{"type": "mcp", "server_label": "docs", "transport": {"type": "http", "server_url": URL}}]
    for tool_extra in [{}, {"credential_id": "cred_nope"}]:
        replies = [s.call("POST", "/v1/agents/sessions", json={"agent": {"runtime": "codex", "tools": [{**tools[0], **tool_extra}]},
                   "vault_ids": [v], "environment": {"type": "self_hosted", "workspace_directory": str(s.work)}}) for s, v in zip(sides, vids)]
        assert replies[0].json() == replies[1].json()
    # Documented: a body that is not a JSON object is refused (400) here; the reference reads it as {}.
    replies = [s.call("POST", "/v1/vaults", content=b"[1]", headers={"content-type": "application/json"}) for s in sides]
    assert [r.status_code for r in replies] == [200, 400]
