"""Fixtures: start the real agent-sandbox-server binary on ephemeral ports.

The binary is ``$ABX_SERVER_BIN`` (default: ``target/debug/agent-sandbox-server``).
Each server gets a fresh temporary base directory and prints
``listening <name> http://<addr>`` per listener; the fixture reads those lines.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("ABX_SERVER_BIN", str(ROOT / "target" / "debug" / "agent-sandbox-server"))
TOKEN = "conformance-token-8c2e"


@dataclass
class Server:
    """A running server process."""

    process: subprocess.Popen
    url: str
    base: Path
    log_path: Path
    token: str | None
    listeners: dict[str, str] = field(default_factory=dict)

    def client(self, token: str | None = "", **kwargs):
        """A real ``ServerClient``; ``token=""`` means the server's own token."""
        from agent_sandbox.api.server_client import ServerClient

        return ServerClient(self.url, token=self.token if token == "" else token, **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


def start_server(tmp_path: Path, *, token: str | None = TOKEN, args=(), env=None) -> Server:
    base = tmp_path / "base"
    base.mkdir(exist_ok=True)
    log_path = tmp_path / "server.log"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("ABX_")}
    child_env["RUST_LOG"] = "debug"
    # A home of its own, as in a sandbox: terminals must not run this
    # machine's ~/.bashrc (pyenv's rehash lock can hang an interactive bash).
    child_env["HOME"] = str(tmp_path)
    if token is not None:
        child_env["ABX_SERVER_TOKEN"] = token
    child_env.update(env or {})
    code_port = [] if "--code-port" in args else ["--code-port", "0"]
    envd_port = [] if "--envd-port" in args else ["--envd-port", "0"]
    command = [
        BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--pty-port", "0", *code_port, *envd_port,
        "--base-dir", str(base), *args,
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=child_env, cwd=tmp_path
        )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            lines.put(raw.decode(errors="replace").strip())

    threading.Thread(target=pump, daemon=True).start()
    listeners: dict[str, str] = {}
    while "api" not in listeners:
        try:
            line = lines.get(timeout=20)
        except queue.Empty:
            process.kill()
            raise RuntimeError(f"server did not start:\n{log_path.read_text()}") from None
        parts = line.split()
        if len(parts) == 3 and parts[0] == "listening":
            listeners[parts[1]] = parts[2]
    return Server(process, listeners["api"], base, log_path, token, listeners)


@pytest.fixture
def server(tmp_path):
    """A server with the conformance token."""
    srv = start_server(tmp_path)
    yield srv
    srv.stop()


@pytest.fixture
def make_server(tmp_path):
    """A factory for servers with custom tokens, flags and environment."""
    started: list[Server] = []

    def make(**kwargs) -> Server:
        sub = tmp_path / f"s{len(started)}"
        sub.mkdir()
        srv = start_server(sub, **kwargs)
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()
