"""The real coding-agent CLIs from npm (codex, qwen-code, claude-code, pinned and
installed by ``scripts/test``) run as session turns of our server against a
scripted model server on loopback: each CLI asks the model, runs the ``ls`` it
is told to with its own shell tool in the session's workspace, sends the output
back, and gives the final answer. The session's items show the command, its
output and the answer; a second turn resumes the CLI's own session.

``ABX_TEST_AGENT_CLIS`` names the npm prefix holding the CLIs; without it the
tests are skipped, unless ``ABX_TEST_AGENT_CLIS_REQUIRED=1`` (as in CI).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from agents_model import FINAL, ScriptedModel
from conftest import TOKEN

PREFIX = os.environ.get("ABX_TEST_AGENT_CLIS", "")
REQUIRED = os.environ.get("ABX_TEST_AGENT_CLIS_REQUIRED") == "1"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
TURN_SECONDS = 240.0


def cli_bin() -> Path:
    binaries = Path(PREFIX) / "node_modules" / ".bin"
    if not PREFIX or not binaries.is_dir():
        if REQUIRED:
            pytest.fail(f"the agent CLIs are not installed under {PREFIX!r} (scripts/test installs them)")
        pytest.skip("set ABX_TEST_AGENT_CLIS to an npm prefix holding codex, qwen and claude")
    return binaries


def cli_env(tmp_path: Path, model: ScriptedModel) -> dict[str, str]:
    """The server's environment: the CLIs on PATH, each pointed at the scripted model."""
    home = tmp_path / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        'model = "gpt-test"\nmodel_provider = "scripted"\n\n[model_providers.scripted]\nname = "scripted"\n'
        f'base_url = "{model.url}/v1"\nwire_api = "responses"\nenv_key = "OPENAI_API_KEY"\nsupports_websockets = false\n'
    )
    qwen = home / ".qwen"
    qwen.mkdir()
    (qwen / "settings.json").write_text(json.dumps({"privacy": {"usageStatisticsEnabled": False}}))
    return {
        "PATH": f"{cli_bin()}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "OPENAI_BASE_URL": f"{model.url}/v1",
        "OPENAI_API_KEY": "test-key-openai",
        "OPENAI_MODEL": "gpt-test",
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "test-key-anthropic",
        "DISABLE_AUTOUPDATER": "1",
        "ABX_SERVER_ENABLED_GROUPS": "agents",
        "ABX_AGENTS_STATE_DIR": str(tmp_path / "state"),
    }


def wait_idle(url: str, sid: str) -> list[dict]:
    """Reads the session's events from the start until the server ends the stream (idle, nothing queued)."""
    events = []
    with httpx.stream("GET", f"{url}/v1/agents/sessions/{sid}/events", params={"after": "0"}, headers=HEADERS,
                      timeout=httpx.Timeout(TURN_SECONDS, connect=10)) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    return events


def items_of(url: str, sid: str, turn: str) -> list[dict]:
    reply = httpx.get(f"{url}/v1/agents/sessions/{sid}/turns/{turn}/items", params={"order": "asc"}, headers=HEADERS)
    assert reply.status_code == 200
    return reply.json()["data"]


def texts_sent(model: ScriptedModel) -> str:
    return json.dumps([body for _, body in model.requests])


@pytest.mark.parametrize("runtime", ["codex", "qwen-code", "claude-code"])
def test_a_real_cli_runs_the_scripted_tool_call_and_the_items_show_it(runtime, make_server, tmp_path):
    model = ScriptedModel().start()
    try:
        server = make_server(env=cli_env(tmp_path, model))
        # Inside the base directory: a session's workspace is held to process_start's path rules (ours only).
        work = server.base / "work"
        work.mkdir()
        (work / "a.txt").write_text("")
        body = {"agent": {"runtime": runtime}, "environment": {"workspace_directory": str(work)},
                "input": "List the files in the workspace."}
        created = httpx.post(f"{server.url}/v1/agents/sessions", json=body, headers=HEADERS)
        assert created.status_code == 200, created.text
        sid = created.json()["id"]
        events = wait_idle(server.url, sid)
        turns = httpx.get(f"{server.url}/v1/agents/sessions/{sid}/turns", headers=HEADERS).json()["data"]
        assert turns[0]["status"] == "completed", f"{turns[0]}\n{server.log()[-4000:]}"
        items = items_of(server.url, sid, turns[0]["id"])
        commands = [i for i in items if i["type"] == "command_execution"]
        assert commands, items
        assert "ls" in commands[0]["command"] and "a.txt" in commands[0]["output"], commands
        assert commands[0]["status"] == "completed" and commands[0]["exit_code"] in (0, None)
        assert commands[0]["cwd"] == str(work)
        final = items[-1]
        assert (final["type"], final["content"][0]["text"], final.get("phase")) == ("message", FINAL, "final_answer")
        kinds = [e["type"] for e in events]
        assert kinds[:3] == ["agent.session.in_progress", "agent.session.turn.created", "agent.session.turn.in_progress"]
        assert kinds[-2:] == ["agent.session.turn.completed", "agent.session.idle"]
        assert "a.txt" in texts_sent(model), "the CLI sent the command's output back to the model"

        # A second turn continues the CLI's own session: the model sees the first turn's answer again.
        asked = len(model.requests)
        sent = httpx.post(f"{server.url}/v1/agents/sessions/{sid}/events", json={"input": "And again?"}, headers=HEADERS)
        assert sent.status_code == 202
        wait_idle(server.url, sid)
        turns = httpx.get(f"{server.url}/v1/agents/sessions/{sid}/turns", headers=HEADERS).json()["data"]
        assert [t["status"] for t in turns] == ["completed", "completed"], turns
        later = json.dumps([body for _, body in model.requests[asked:]])
        assert FINAL in later and "And again?" in later, "the second turn resumed the first's conversation"
    finally:
        model.stop()
