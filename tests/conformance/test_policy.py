"""Policy conformance: what the real ServerClient discovers and checks under policy
files and presets, and the typed exceptions each denial raises."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess

import pytest
from agent_sandbox.models.errors import (
    EndpointNotAvailableError,
    FilePolicyDeniedError,
    PayloadTooLargeError,
    PolicyDeniedError,
    RateLimitedError,
    ServerAuthError,
)

from conftest import BIN

ADMIN = "admin-token-6d0e"
READER = "reader-token-19ab"

#: Two identities (an admin whose token comes from the environment, a reader by
#: digest), the terminal group off, file endpoints read-only and denied ``*.pem``.
MAIN_POLICY = {
    "description": "conformance policy",
    "auth": {
        "tokens": [
            {"id": "admin", "scopes": ["*"], "token_env": "CONFORMANCE_ADMIN_TOKEN"},
            {"id": "reader", "scopes": ["files:read"], "token_sha256": hashlib.sha256(READER.encode()).hexdigest()},
        ]
    },
    "groups": {"terminal": False},
    "endpoints": {"files_*": {"paths": {"deny": ["*.pem"], "read_only": True}}},
}

PRESETS = ["default", "transfer-only", "read-only", "hardened", "locked"]


def policy_server(make_server, tmp_path, policy, **kwargs):
    """A server reading *policy* from a file; policy tokens replace the server token."""
    path = tmp_path / f"policy-{len(list(tmp_path.glob('policy-*.json')))}.json"
    path.write_text(json.dumps(policy))
    env = {"CONFORMANCE_ADMIN_TOKEN": ADMIN, **kwargs.pop("env", {})}
    return make_server(token=None, args=["--policy", str(path), *kwargs.pop("args", [])], env=env, **kwargs)


@pytest.mark.parametrize("preset", PRESETS)
def test_check_agrees_with_discovery_for_every_endpoint(make_server, preset):
    srv = make_server(args=["--preset", preset])

    async def run():
        async with srv.client() as client:
            caps = await client.discover()
            assert caps.preset == preset
            assert caps.configured is True
            assert len(caps.endpoints) == 153, (
                "the reference's 116, our 4 streaming transfers, /openapi.json, /metrics, /mcp, envd's 23 and the code port's 7"
            )
            for endpoint in caps.endpoints:
                decision = await client.check(endpoint)
                assert decision.allowed == caps.can(endpoint), endpoint
                if not decision.allowed:
                    assert decision.code == caps.denial(endpoint), endpoint

    asyncio.run(run())


def test_presets_mean_what_the_reference_means(make_server):
    def caps_of(preset):
        return make_server(args=["--preset", preset]).client().discover_sync()

    locked = caps_of("locked")
    assert locked.groups["commands"] and not locked.groups["file_ops"] and not locked.groups["process"]
    assert locked.rule("files_stat") == "preset:locked:endpoints.*"
    assert locked.can("capabilities"), "core endpoints cannot be switched off"
    transfer = caps_of("transfer-only")
    # The reference's two transfer endpoints, and the four streaming ones they govern.
    assert transfer.group_summary["file_ops"] == {"enabled": 6, "total": 14}
    assert transfer.can("files_content_read") and transfer.can("files_content_write")
    assert transfer.rule("shell") == "preset:transfer-only:endpoints.*"
    read_only = caps_of("read-only")
    assert read_only.rule("shell") == "preset:read-only:groups.process"
    assert read_only.rule("files_upload_stream") == "preset:read-only:endpoints.files_upload_stream"
    assert read_only.rule("files_content_write") == "preset:read-only:endpoints.files_upload_stream"
    assert read_only.denial("env_set") == "endpoint_disabled"
    assert read_only.info("env_get").enabled
    hardened = caps_of("hardened")
    assert hardened.rule("pty_create_session") == "preset:hardened:groups.terminal"
    assert hardened.info("files_upload_stream").enabled


def test_identities_and_scopes_from_the_policy(make_server, tmp_path):
    srv = policy_server(make_server, tmp_path, MAIN_POLICY)
    reader = srv.client(token=READER).discover_sync()
    assert reader.identity_id == "reader"
    assert reader.scopes == frozenset({"files:read"})
    assert reader.warnings == []
    assert reader.denial("files_mkdir") == "missing_scope"
    assert reader.rule("pty_create_session") == "policy:groups.terminal"
    admin = srv.client(token=ADMIN).discover_sync()
    assert admin.identity_id == "admin"
    assert admin.warnings == ["identity holds the wildcard scope '*'"]
    assert admin.revision == reader.revision and len(admin.revision) == 16


def test_denials_raise_the_clients_typed_exceptions(make_server, tmp_path):
    srv = policy_server(make_server, tmp_path, MAIN_POLICY)
    with pytest.raises(ServerAuthError) as auth:
        srv.client(token="wrong").discover_sync()
    assert auth.value.error_code == "unauthorized"
    with pytest.raises(ServerAuthError):
        srv.client(token=None).discover_sync()

    # Admission comes before the handler, so these hold whether or not the endpoint is implemented.
    reader = srv.client(token=READER)
    with pytest.raises(PolicyDeniedError) as denied:
        reader.files.mkdir_sync("made")
    assert (denied.value.error_code, denied.value.scope, denied.value.endpoint) == ("missing_scope", "files:write", "files_mkdir")
    assert not isinstance(denied.value, FilePolicyDeniedError)
    with pytest.raises(EndpointNotAvailableError) as unavailable:
        srv.client(token=ADMIN).pty.list_sync()
    assert unavailable.value.capability == "pty_list_sessions"
    assert unavailable.value.rule == "policy:groups.terminal"

    # After discovery the client fails fast with the same types.
    reader.discover_sync()
    with pytest.raises(PolicyDeniedError):
        reader.files.mkdir_sync("made")


def test_rate_limits_raise_rate_limited_with_retry_after(make_server, tmp_path):
    policy = {"endpoints": {"capabilities_check": {"limits": {"rate_per_minute": 2}}}}
    client = policy_server(make_server, tmp_path, policy).client(token=None)
    assert client.check_sync("capabilities").allowed
    assert client.check_sync("capabilities").allowed
    with pytest.raises(RateLimitedError) as limited:
        client.check_sync("capabilities")
    assert limited.value.error_code == "rate_limited"
    assert 1 <= limited.value.retry_after <= 30


def test_bodies_over_the_limit_raise_payload_too_large(make_server, tmp_path):
    policy = {"endpoints": {"capabilities_check": {"limits": {"max_request_bytes": "200B"}}}}
    client = policy_server(make_server, tmp_path, policy).client(token=None)
    with pytest.raises(PayloadTooLargeError) as too_large:
        client.check_sync("files_stat", path="a" * 500)
    assert too_large.value.limit == 200
    assert client.check_sync("capabilities").allowed, "the connection was closed cleanly"


def test_path_denials_raise_file_policy_denied(make_server, tmp_path):
    srv = policy_server(make_server, tmp_path, MAIN_POLICY)
    client = srv.client(token=ADMIN)
    with pytest.raises(FilePolicyDeniedError) as denied:
        client.files.stat_sync("keys/server.pem")
    assert denied.value.error_code == "path_denied"
    decision = client.check_sync("files_stat", path="keys/server.pem")
    assert (decision.allowed, decision.code) == (False, "path_denied")
    with pytest.raises(FilePolicyDeniedError) as outside:
        client.files.stat_sync("/etc/passwd")
    assert outside.value.error_code == "path_not_allowed"
    assert client.check_sync("files_stat", path="notes.txt").allowed


def test_read_only_rules_raise_file_policy_denied(make_server, tmp_path):
    srv = policy_server(make_server, tmp_path, MAIN_POLICY)
    with pytest.raises(FilePolicyDeniedError) as denied:
        srv.client(token=ADMIN).files.mkdir_sync("new-dir")
    assert denied.value.error_code == "read_only"


def test_an_invalid_policy_stops_the_server_with_its_json_path(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"endpoints": {"files_lst": {"enabled": True}}}))
    result = subprocess.run(
        [BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--pty-port", "0", "--policy", str(path)],
        capture_output=True,
        text=True,
        timeout=20,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1
    assert "policy.endpoints.files_lst: unknown endpoint (did you mean 'files_list'?)" in result.stderr


def test_inline_policy_from_the_environment(make_server):
    srv = make_server(env={"ABX_SERVER_POLICY": json.dumps({"preset": "locked", "groups": ["dev_tools"]})})
    caps = srv.client().discover_sync()
    assert caps.preset == "locked"
    assert caps.rule("code_run") == "preset:locked:endpoints.*", "a preset's glob beats a policy's group"
