"""Side by side with the reference for agent definitions, environments,
environment templates, their files and ``/v1/files``: the same requests to
the Python reference and to ours give the same statuses, shapes and
refusal bodies (message, type, param, code). The differences kept on
purpose are listed in ``docs/agents.md`` and asserted here, each with its
reason.
"""

from __future__ import annotations

import base64

import pytest

from test_agents_parity import same, sides, without  # noqa: F401 (the fixture)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def base_of(side) -> str:
    return str(side.work.parent / "base")


def both(sides, method, path, **kwargs):
    return [s.call(method, path, **kwargs) for s in sides]


def identical(replies):
    """Same status and the same body, byte for byte once parsed."""
    r, o = replies
    assert (r.status_code, r.json()) == (o.status_code, o.json()), (r.text, o.text)
    assert o.headers.get("x-agent-sandbox-local") == "1"


MCP = {"type": "mcp", "server_label": "docs",
       "transport": {"type": "http", "server_url": "https://mcp.example/mcp", "headers": {"X-Key": "hdr-value"}}}


def test_a_definition_sequence_matches_the_reference(sides):
    created = both(sides, "POST", "/v1/agents", json={"model": "gpt-5", "name": "n", "tools": [MCP], "metadata": {"a": "b"}})
    definition = same(*created)
    assert definition["tools"][0]["transport"]["headers"] == {"X-Key": "***"}
    ids = [r.json()["id"] for r in created]
    for suffix, method, body in [("", "GET", None), ("", "POST", {"instructions": "x", "name": None}), ("", "DELETE", None)]:
        same(*[s.call(method, f"/v1/agents/{i}{suffix}", json=body) for s, i in zip(sides, ids)])
    for path in ["/v1/agents", "/v1/agents?order=asc&limit=1"]:
        same(*both(sides, "GET", path))
    again = both(sides, "POST", "/v1/agents", json={"model": "gpt-5"})
    listed = [s.call("GET", "/v1/models").json()["data"][0] for s in sides]
    assert [m["id"] for m in listed] == [r.json()["id"] for r in again], "definitions come first"
    assert listed[0]["x_agent_sandbox"]["kind"] == listed[1]["x_agent_sandbox"]["kind"] == "agent_definition"


@pytest.mark.parametrize("method,path,body", [
    ("GET", "/v1/agents/agent_nope", None),
    ("POST", "/v1/agents/agent_nope", {"model": "m"}),
    ("DELETE", "/v1/agents/agent_nope", None),
    ("POST", "/v1/agents", {}),
    ("POST", "/v1/agents", {"model": ""}),
    ("POST", "/v1/agents", {"model": "m", "temperature": 1}),
    ("POST", "/v1/agents", {"model": "m", "tools": [{"type": "function"}]}),
    ("POST", "/v1/agents", {"model": "m", "tools": [{**MCP, "allowed_tools": ["x"]}]}),
    ("POST", "/v1/agents", {"model": "m", "multi_agent": {"enabled": True}}),
    ("POST", "/v1/agents", {"model": "m", "service_tier": "flex"}),
    ("POST", "/v1/agents", {"model": "m", "text": {"verbosity": "high"}}),
    ("POST", "/v1/agents", {"model": "m", "reasoning": {"effort": "huge"}}),
    ("POST", "/v1/agents", {"model": "m", "metadata": {"k": 1}}),
    ("GET", "/v1/agents?limit=0", None),
    ("GET", "/v1/agents?after=agent_x", None),
    ("GET", "/v1/agents/environments/env_nope", None),
    ("GET", "/v1/agents/environments/env_nope/files", None),
    ("POST", "/v1/agents/environments/env_nope/files", {}),
    ("POST", "/v1/agents/environments", {}),
    ("POST", "/v1/agents/environments", {"environment": {}, "x": 1}),
    ("POST", "/v1/agents/environments", {"environment": {"type": "cloud"}}),
    ("POST", "/v1/agents/environments", {"environment": {"type": "openai_hosted", "env": {"A": "1"}}}),
    ("POST", "/v1/agents/environments", {"environment": {"packages": {"npm": ["x"]}}}),
    ("POST", "/v1/agents/environments", {"environment": {"env": {"PATH": "/x"}}}),
    ("POST", "/v1/agents/environments", {"environment": {"env": {"1X": "a"}}}),
    ("POST", "/v1/agents/environments", {"environment": {"workspace_directory": "rel"}}),
    ("POST", "/v1/agents/environments", {"environment": {"workspace_directory": "/proc/x/../y"}}),
    ("POST", "/v1/agents/environments", {"environment": {"environment_template_id": "envtmpl_x"}}),
    ("POST", "/v1/agents/environments", {"environment": {}, "vault_ids": ["vlt_x"]}),
    ("POST", "/v1/agents/environments", {"environment": {"files": [{"type": "inline", "path": "/workspace/.git/x", "data": "eA=="}]}}),
    ("POST", "/v1/agents/environments", {"environment": {"files": [{"type": "inline", "path": "/a", "data": "!"}]}}),
    ("POST", "/v1/agents/environments", {"environment": {"files": [{"type": "tar", "path": "/a"}]}}),
    ("POST", "/v1/agents/environments", {"environment": {"files": [{"type": "file_id", "path": "/a", "file_id": "file-x"}]}}),
    ("GET", "/v1/agents/environments/templates/envtmpl_nope", None),
    ("POST", "/v1/agents/environments/templates/envtmpl_nope", {}),
    ("DELETE", "/v1/agents/environments/templates/envtmpl_nope", None),
    ("POST", "/v1/agents/environments/templates", {"name": 3}),
    ("POST", "/v1/agents/environments/templates", {"setup_commands": ["make"]}),
    ("POST", "/v1/agents/environments/templates", {"files": [{"type": "inline", "path": "/AGENTS.md", "data": ""}]}),
    ("POST", "/v1/files", {}),
    ("POST", "/v1/files", {"purpose": "user_data"}),
    ("POST", "/v1/files", {"purpose": "user_data", "data": "eA==", "extra": 1}),
    ("POST", "/v1/files", {"purpose": "user_data", "data": "eA==", "filename": 3}),
])
def test_refusals_match_the_reference(sides, method, path, body):
    identical(both(sides, method, path, json=body))


def test_environments_templates_and_files_match_the_reference(sides):
    blobs = both(sides, "POST", "/v1/files", json={"purpose": "user_data", "data": b64(b"blob bytes"), "filename": "b.txt"})
    same(*blobs)
    blob_ids = [r.json()["id"] for r in blobs]
    templates = [s.call("POST", "/v1/agents/environments/templates", json={
        "name": "t", "env": {"A": "1"}, "files": [{"type": "file_id", "file_id": b, "path": "/workspace/b.txt"},
                                                  {"type": "inline", "path": "/workspace/i.txt", "data": b64(b"inline")}],
    }) for s, b in zip(sides, blob_ids)]
    same(*templates)
    tids = [r.json()["id"] for r in templates]
    for method, body in [("GET", None), ("POST", {"name": None, "env": {}}), ("POST", {"files": []})]:
        same(*[s.call(method, f"/v1/agents/environments/templates/{t}", json=body) for s, t in zip(sides, tids)])
    same(*both(sides, "GET", "/v1/agents/environments/templates"))

    tids = [s.call("POST", "/v1/agents/environments/templates", json={
        "files": [{"type": "inline", "path": "/workspace/seed.txt", "data": b64(b"seed")}]}).json()["id"] for s in sides]
    envs = [s.call("POST", "/v1/agents/environments", json={"environment": {
        "workspace_directory": f"{base_of(s)}/ws", "environment_template_id": t, "env": {"B": "2"}}})
        for s, t in zip(sides, tids)]
    environment = same(*envs, "workspace_directory")
    assert [f["path"] for f in environment["files"]] == ["/workspace/seed.txt"]
    env_ids = [r.json()["id"] for r in envs]
    at = [f"/v1/agents/environments/{e}" for e in env_ids]
    for suffix, method, body in [
        ("", "GET", None),
        ("/files", "POST", {"type": "inline", "path": "/workspace/d/new.txt", "data": b64(b"new")}),
        ("/files", "POST", {"type": "inline", "path": "/workspace/d/new.txt", "data": b64(b"new")}),
        ("/files?order=asc&limit=1", "GET", None),
        ("/files?order=asc&limit=1&page=o1", "GET", None),
        ("/files?path=/workspace/d", "GET", None),
    ]:
        same(*[s.call(method, f"{a}{suffix}", json=body) for s, a in zip(sides, at)], "workspace_directory")
    for suffix, body in [
        ("/files", {"type": "inline", "path": "/workspace/d/new.txt", "data": b64(b"other")}),
        ("/files", {"type": "inline", "path": "/workspace/.codex/config.toml", "data": "eA=="}),
        ("/files", {"type": "inline", "path": "/workspace/x", "data": "eA==", "mode": 1}),
        ("/files?limit=500", None),
        ("/files?page=zz", None),
        ("/files?order=up", None),
    ]:
        method = "GET" if body is None else "POST"
        identical([s.call(method, f"{a}{suffix}", json=body) for s, a in zip(sides, at)])
    same(*both(sides, "GET", "/v1/agents/environments"))
    same(*both(sides, "GET", "/v1/agents/environments?type=openai_hosted"))

    # The policy's path guard refuses a workspace outside the base directory in both.
    outside = [s.call("POST", "/v1/agents/environments", json={"environment": {
        "workspace_directory": str(s.work.parent.parent / "outside"), "files": [{"type": "inline", "path": "/a.txt", "data": "eA=="}]}}) for s in sides]
    r, o = (without(x.json(), "error") for x in outside)
    assert (outside[0].status_code, r) == (outside[1].status_code, o) == (403, {
        "type": "PolicyDenied", "code": "path_not_allowed", "endpoint": "agents_environments_create"})

    # A session bound to the environment and a definition shows both ids, as the reference's does.
    defs = [s.call("POST", "/v1/agents", json={"model": "gpt-5", "name": "bound"}).json()["id"] for s in sides]
    sessions = [s.call("POST", "/v1/agents/sessions", json={"agent_id": d, "environment": {"id": e}})
                for s, d, e in zip(sides, defs, env_ids)]
    session = same(*sessions)
    assert [r.json()["agent"]["id"] for r in sessions] == defs
    assert [r.json()["environment"]["id"] for r in sessions] == env_ids
    assert session["agent"]["name"] == "bound"
    mismatch = [s.call("POST", "/v1/agents/sessions", json={"environment": {"id": e, "workspace_directory": "/elsewhere"}})
                for s, e in zip(sides, env_ids)]
    identical(mismatch)


def test_a_multipart_upload_matches_the_reference(sides):
    """What the ``openai`` SDK's ``files.create`` sends: ours streams the part to disk."""
    files = {"file": ("m.txt", b"multi", "text/plain")}
    replies = [s.call("POST", "/v1/files", data={"purpose": "user_data"}, files=files) for s in sides]
    uploaded = same(*replies)
    assert (uploaded["bytes"], uploaded["filename"]) == (5, "m.txt")
    for s in sides:
        assert s.call("POST", "/v1/files", data={"purpose": "assistants"}, files=files).status_code == 400
