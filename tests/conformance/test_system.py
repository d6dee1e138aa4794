"""System group conformance: info, metrics, env, ports and packages through the real ServerClient."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from agent_sandbox.models.errors import PolicyDeniedError, ServerAPIError


def test_info_describes_this_machine(server):
    info = server.client().system.info_sync()
    assert info.os == platform.system()
    assert info.arch == platform.machine()
    assert info.cpu_count == os.cpu_count()
    assert info.hostname == socket.gethostname()
    assert info.memory_total_mb > 0
    assert 0 < info.memory_available_mb <= info.memory_total_mb
    assert info.disk_total_gb > 0
    assert 0 <= info.disk_free_gb <= info.disk_total_gb
    extra = info.model_extra
    assert extra["kernel"] == platform.release()
    assert extra["server_version"]
    assert "cgroup" in extra


def test_info_reports_the_python_children_would_run(server):
    found = subprocess.run(["python3", "--version"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        pytest.skip("no python3 on PATH")
    assert server.client().system.info_sync().python_version == found.stdout.split()[1]


def test_metrics_are_sane(server):
    metrics = server.client().system.metrics_sync()
    assert metrics.memory_total_mb > 0
    assert 0 < metrics.memory_used_mb <= metrics.memory_total_mb
    assert 0 < metrics.memory_percent <= 100
    assert 0 < metrics.disk_used_gb <= metrics.disk_total_gb
    assert 0 < metrics.disk_percent <= 100
    assert metrics.cpu_load_1m >= 0 and metrics.cpu_load_15m >= 0
    assert 0 <= metrics.uptime_seconds < 600, "seconds since the server started"
    extra = metrics.model_extra
    assert 0 <= extra["cpu_percent"] <= 100
    assert extra["cpu_sample_seconds"] >= 0.1
    assert extra["system_uptime_seconds"] > metrics.uptime_seconds


def test_env_set_then_read_back(server):
    system = server.client().system
    assert system.set_env_sync({"CONF_B": "2", "CONF_A": "one two"}) == ["CONF_A", "CONF_B"]
    assert system.env_sync(["CONF_A", "CONF_B", "CONF_MISSING"]) == {"CONF_A": "one two", "CONF_B": "2"}
    assert system.env_sync()["CONF_A"] == "one two"
    assert system.set_env_sync({}) == []


def test_secrets_and_credential_names_are_never_shown(make_server):
    srv = make_server(env={"PLAIN_VAR": "p", "MY_API_KEY": "k", "DB_PASSWORD": "pw", "ABX_SERVER_EXTRA": "x"})
    shown = srv.client().system.env_sync()
    assert shown["PLAIN_VAR"] == "p"
    for hidden in ("ABX_SERVER_TOKEN", "ABX_SERVER_EXTRA", "MY_API_KEY", "DB_PASSWORD"):
        assert hidden not in shown
    assert srv.client().system.env_sync(["MY_API_KEY", "ABX_SERVER_TOKEN"]) == {}


@pytest.mark.parametrize(
    ("variables", "status", "code", "error_type"),
    [
        ({"ABX_SERVER_TOKEN": "stolen"}, 403, "env_var_denied", "PolicyDenied"),
        ({"abx_anything": "x"}, 403, "env_var_denied", "PolicyDenied"),
        ({"PATH": "/tmp"}, 403, "", "PermissionError"),
    ],
)
def test_denied_variables_are_refused_as_the_reference(server, variables, status, code, error_type):
    with pytest.raises(PolicyDeniedError) as caught:
        server.client().system.set_env_sync(variables)
    assert caught.value.status_code == status
    assert caught.value.error_code == code
    assert caught.value.error_type == error_type


@pytest.mark.parametrize("variables", [{"1BAD": "x"}, {"A B": "x"}, {"": "x"}, {"NUL": "a\x00b"}])
def test_malformed_assignments_are_400_env_invalid(server, variables):
    with pytest.raises(ServerAPIError) as caught:
        server.client().system.set_env_sync(variables)
    assert (caught.value.status_code, caught.value.error_code) == (400, "env_invalid")
    assert caught.value.endpoint == "env_set"


def test_a_refused_request_sets_nothing(server):
    system = server.client().system
    with pytest.raises(PolicyDeniedError):
        system.set_env_sync({"CONF_OK": "1", "ABX_NO": "1"})
    assert system.env_sync(["CONF_OK"]) == {}


def test_a_port_the_test_opens_is_listed_with_its_pid(server):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        ports = server.client().system.ports_sync()
    mine = [p for p in ports if p.port == port]
    assert len(mine) == 1, ports
    assert (mine[0].protocol, mine[0].address, mine[0].pid) == ("tcp", "127.0.0.1", os.getpid())
    assert mine[0].model_extra["process"]
    api_port = int(server.url.rsplit(":", 1)[1])
    assert any(p.port == api_port and p.pid == server.process.pid for p in ports), "the server's own port"


def test_ipv6_listeners_are_listed(server):
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        listener.bind(("::1", 0))
    except OSError as err:
        pytest.skip(f"cannot bind ::1: {err}")
    with listener:
        listener.listen()
        port = listener.getsockname()[1]
        # Another process may listen on the same port number over IPv4: only ours is this test's.
        mine = [p for p in server.client().system.ports_sync() if p.port == port and p.pid == os.getpid()]
    assert [(p.protocol, p.address, p.pid) for p in mine] == [("tcp6", "[::1]", os.getpid())]


def test_pip_packages_are_those_of_python3(server):
    probe = subprocess.run(["python3", "-m", "pip", "--version"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("python3 has no pip")
    listing = server.client().system.packages_sync()
    assert listing.manager == "pip"
    assert "pip" in {p.name for p in listing.packages}
    assert all(p.version for p in listing.packages)


def test_dpkg_packages(server):
    if shutil.which("dpkg-query") is None:
        pytest.skip("no dpkg")
    listing = server.client().system.packages_sync("dpkg")
    names = {p.name: p.version for p in listing.packages}
    assert listing.manager == "dpkg"
    assert names.get("dpkg")


def test_npm_lists_the_project_in_the_base_dir(server):
    if shutil.which("npm") is None:
        pytest.skip("no npm")
    (server.base / "package.json").write_text('{"name": "app", "version": "1.0.0", "dependencies": {"tiny": "^1.0.0"}}')
    module = server.base / "node_modules" / "tiny"
    module.mkdir(parents=True)
    (module / "package.json").write_text('{"name": "tiny", "version": "1.2.3"}')
    listing = server.client().system.packages_sync("npm")
    assert [(p.name, p.version) for p in listing.packages] == [("tiny", "1.2.3")]


def test_unknown_package_managers_are_400(server):
    with pytest.raises(ServerAPIError) as caught:
        server.client().system.packages_sync("apt")
    assert caught.value.status_code == 400
    assert "Unsupported package manager: 'apt'" in str(caught.value)


def _cgroup_v2_dir() -> Path | None:
    """This process's cgroup v2 directory, when /sys/fs/cgroup is v2 with the memory controller."""
    controllers = Path("/sys/fs/cgroup/cgroup.controllers")
    if not controllers.exists() or "memory" not in controllers.read_text().split():
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            own = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
            return own if (own / "memory.current").exists() else None
    return None


def test_cgroup_v2_limits_and_use_are_reported(server):
    own = _cgroup_v2_dir()
    if own is None:
        pytest.skip("/sys/fs/cgroup is not cgroup v2 with the memory controller here")
    cgroup = server.client().system.metrics_sync().model_extra["cgroup"]
    assert cgroup["version"] == 2
    assert cgroup["memory_current_bytes"] > 0
    assert cgroup["cpu_usage_seconds"] > 0
    limit = (own / "memory.max").read_text().strip()
    if limit != "max":
        assert cgroup["memory_max_bytes"] <= int(limit)
        assert 0 < cgroup["memory_percent"] <= 100


def test_cgroup_v1_use_is_reported_where_only_v1_controllers_exist(server):
    if _cgroup_v2_dir() is not None or not Path("/sys/fs/cgroup/memory/memory.usage_in_bytes").exists():
        pytest.skip("no cgroup v1 memory hierarchy here (or v2 is used)")
    cgroup = server.client().system.info_sync().model_extra["cgroup"]
    assert cgroup["version"] == 1
    assert cgroup["memory_current_bytes"] > 0
