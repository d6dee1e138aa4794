"""Core group conformance: health, discovery, check and auth through the real ServerClient."""

from __future__ import annotations

import asyncio

import pytest
from agent_sandbox.models.errors import (
    EndpointNotAvailableError,
    ServerAPIError,
    ServerAuthError,
)

REFERENCE_GROUPS = {
    "core": True,
    "commands": True,
    "file_ops": True,
    "process": True,
    "terminal": True,
    "system": True,
    "dev_tools": False,
    "browser": False,
    "agents": False,
}


def test_health_is_true(server):
    assert server.client().health_sync() is True
    assert server.client(token=None).health_sync() is True, "health needs no credentials"


def test_health_is_false_when_nothing_listens(server):
    url = server.url
    server.stop()
    from agent_sandbox.api.server_client import ServerClient

    assert ServerClient(url, token="x").health_sync() is False


def test_discover_reports_the_reference_groups_and_endpoint_states(server):
    caps = server.client().discover_sync()
    assert caps.api_version == 2
    # The reference's groups unchanged, and this server's other ports in groups of their own.
    assert caps.groups == {**REFERENCE_GROUPS, "envd": True, "code_interpreter": True}
    assert caps.can("envd_stat") and caps.info("envd_stat").group == "envd"
    assert caps.info("code_execute").scopes == ["process:run"]
    assert caps.group_summary["agents"] == {"enabled": 0, "total": 70}
    assert caps.group_summary["file_ops"]["total"] == 14
    assert caps.identity_id == "server"
    assert caps.scopes == frozenset({"*"})
    assert caps.preset == "default"
    assert len(caps.revision) == 16
    assert caps.can("capabilities")
    assert not caps.can("code_run")
    assert caps.denial("code_run") == "endpoint_disabled"
    assert caps.rule("code_run") == "default:opt-in:dev_tools"
    assert caps.denial("no_such_endpoint") == "unknown_endpoint"
    info = caps.info("files_move")
    assert info.scopes == ["files:write", "files:delete"]
    assert info.group == "file_ops"


def test_discovery_makes_the_client_fail_fast_on_disabled_endpoints(server):
    client = server.client()
    client.discover_sync()
    with pytest.raises(EndpointNotAvailableError) as caught:
        client.devtools.run_code_sync("print(1)")
    assert caught.value.capability == "code_run"


def test_enabled_groups_show_in_discovery(make_server):
    srv = make_server(env={"ABX_SERVER_ENABLED_GROUPS": "dev_tools"})
    caps = srv.client().discover_sync()
    assert caps.groups["dev_tools"] is True
    assert caps.group_summary["dev_tools"] == {"enabled": 3, "total": 3}


def test_check_answers_like_enforcement(server):
    client = server.client()
    decision = client.check_sync("code_run")
    assert decision.allowed is False
    assert decision.code == "endpoint_disabled"
    assert "ABX_SERVER_ENABLED_GROUPS=dev_tools" in decision.reason
    assert client.check_sync("capabilities").allowed is True
    assert client.check_sync("nope").code == "unknown_endpoint"


def test_a_disabled_endpoint_raises_endpoint_not_available(server):
    client = server.client()
    with pytest.raises(EndpointNotAvailableError) as caught:
        client.devtools.git_status_sync(".")
    assert caught.value.error_code == "endpoint_disabled"
    assert caught.value.rule == "default:opt-in:dev_tools"


def test_a_wrong_token_raises_server_auth_error(server):
    with pytest.raises(ServerAuthError) as caught:
        server.client(token="wrong").discover_sync()
    assert caught.value.status_code == 401
    assert caught.value.error_code == "unauthorized"


def test_a_missing_token_raises_server_auth_error(server):
    with pytest.raises(ServerAuthError):
        server.client(token=None).check_sync("capabilities")


def test_a_server_without_a_token_accepts_anonymous_calls(make_server):
    srv = make_server(token=None)
    caps = srv.client(token=None).discover_sync()
    assert caps.identity_id == "anonymous"
    assert caps.scopes == frozenset({"*"})
    assert srv.client(token="whatever").check_sync("capabilities").allowed is True


def test_every_endpoint_is_implemented(make_server):
    # With the opt-in agents group on, discovery reports no endpoint as not
    # implemented, and the agents group answers through the real client.
    srv = make_server(env={"ABX_SERVER_ENABLED_GROUPS": "agents"})
    caps = asyncio.run(srv.client().discover())
    assert [e for e in caps.endpoints if "not_implemented" in str(caps.endpoints[e])] == []
    models = asyncio.run(srv.client()._request("agents_models_list", "GET", "/v1/models"))
    assert [m["id"] for m in models["data"]][-1] == "command"


def test_sigterm_exits_zero(server):
    assert server.stop() == 0
