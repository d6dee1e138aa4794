"""The official ``openai`` SDK (pinned in requirements.txt) against our
``/v1/responses`` and ``/v1/models``, with ``base_url`` pointed at the
server: each response is one turn of a local agent. The agent is the
``command`` runtime running a small script (fast, deterministic), and once a
real CLI (codex, from npm) against the scripted model server on loopback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from conftest import TOKEN

AGENT = r'''#!/usr/bin/env python3
import json, os, sys, time
args = sys.argv[1:]
prompt = sys.stdin.read().strip()
def out(**o): print(json.dumps(o), flush=True)
if args[:1] == ["--resume"]:
    native = args[1]
else:
    native = "native-%d" % os.getpid()
    out(type="session", id=native)
if "wait" in prompt:
    out(type="text_delta", item_id="m0", text="working")
    time.sleep(60)
with open("memory.txt", "a") as f:
    f.write(prompt + "\n")
notes = open("memory.txt").read()
out(type="tool_start", item_id="c1", kind="command", name="command_execution", command="cat memory.txt")
out(type="tool_end", item_id="c1", ok=True, output=notes, exit_code=0)
out(type="text_delta", item_id="m1", text="heard: ")
out(type="message", item_id="m1", text="heard: %s | %s | %d notes" % (prompt, native, len(notes.splitlines())))
out(type="usage", input_tokens=7, output_tokens=3)
out(type="result", ok=True)
'''

OPENING = ["response.created", "response.in_progress"]
COMMAND = ["response.output_item.added", "response.output_item.done"]
MESSAGE = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


def agents_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    config = tmp_path / "agents.json"
    config.write_text(json.dumps({"command": {"argv": [str(agent)], "resume_argv": [str(agent), "--resume", "{session_id}"]}}))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return {
        "ABX_SERVER_ENABLED_GROUPS": "agents",
        "ABX_AGENTS_STATE_DIR": str(tmp_path / "state"),
        "ABX_AGENTS_CONFIG": str(config),
        "ABX_AGENTS_DEFAULT": "command",
        "ABX_AGENTS_RESPONSES_WORKSPACE": str(work),
        **extra,
    }


@pytest.fixture
def setup(make_server, tmp_path):
    server = make_server(env=agents_env(tmp_path))
    client = OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0, timeout=60)
    return server, client, tmp_path / "work"


def error_of(exc: openai.APIStatusError) -> dict:
    assert exc.response.headers.get("x-should-retry") == "false"
    assert exc.response.headers.get("x-agent-sandbox-local") == "1"
    return exc.response.json()["error"]


def test_a_blocking_response_is_one_turn_of_the_agent_in_the_workspace(setup):
    server, client, work = setup
    response = client.responses.create(model="command", input="hello", temperature=0.3, metadata={"k": "v"})
    assert response.id.startswith("resp_") and len(response.id) == 29
    assert (response.status, response.model, response.metadata) == ("completed", "command", {"k": "v"})
    assert response.output_text.startswith("heard: hello | native-") and response.output_text.endswith("| 1 notes")
    assert [item.type for item in response.output] == ["command_execution", "message"]
    command = response.output[0].model_dump(warnings=False)
    assert (command["command"], command["output"], command["cwd"]) == ("cat memory.txt", "hello\n", str(work))
    assert response.usage.total_tokens == 10 and response.usage.input_tokens == 7
    assert (work / "memory.txt").read_text() == "hello\n"
    raw = client.responses.with_raw_response.create(model="command", input="again", top_p=0.5)
    assert raw.headers["x-agent-sandbox-ignored-params"] == "top_p"
    assert raw.headers["x-agent-sandbox-local"] == "1"

    again = client.responses.retrieve(response.id)
    assert again.model_dump(warnings=False) == response.model_dump(warnings=False)
    items = client.responses.input_items.list(response.id)
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [("message", "user", "hello")]


def test_a_streamed_response_sends_the_responses_events_in_order_as_the_turn_runs(setup):
    _, client, _ = setup
    events = list(client.responses.create(model="command", input="stream me", stream=True))
    assert [e.type for e in events] == [*OPENING, *COMMAND, *MESSAGE, "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    assert text == done.text and text.startswith("heard: stream me")
    final = events[-1].response
    assert (final.status, final.output_text) == ("completed", text)
    assert final.id == events[0].response.id

    # The SDK's stream helper accumulates the same events into the same response.
    with client.responses.stream(model="command", input="helper") as stream:
        helper = stream.get_final_response()
    assert helper.output_text.startswith("heard: helper") and helper.status == "completed"

    # A replay numbers its events the same way, and resumes after starting_after.
    replay = list(client.responses.retrieve(final.id, stream=True))
    assert [e.type for e in replay] == [e.type for e in events]
    assert "".join(e.delta for e in replay if e.type == "response.output_text.delta") == text
    tail = list(client.responses.retrieve(final.id, stream=True, starting_after=8))
    assert [e.sequence_number for e in tail] == list(range(9, len(events)))


def test_previous_response_id_continues_the_same_session_and_workspace(setup):
    _, client, work = setup
    first = client.responses.create(model="command", input="remember blue")
    second = client.responses.create(model="command", previous_response_id=first.id, input="what did I say?")
    native = first.output_text.split(" | ")[1]
    assert second.output_text == f"heard: what did I say? | {native} | 2 notes", "the CLI resumed its own session"
    assert second.previous_response_id == first.id
    assert (work / "memory.txt").read_text() == "remember blue\nwhat did I say?\n"

    with pytest.raises(openai.BadRequestError) as stale:
        client.responses.create(model="command", previous_response_id=first.id, input="fork?")
    assert error_of(stale.value)["code"] == "agents.previous_response_not_latest"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="command", previous_response_id="resp_" + "0" * 24, input="x")
    assert error_of(unknown.value)["param"] == "previous_response_id"

    # Deleting the latest makes the first the latest again; deleting both removes the session.
    assert client.responses.delete(second.id) is None
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.retrieve(second.id)
    assert error_of(gone.value) == {
        "message": f"response '{second.id}' not found",
        "type": "not_found_error",
        "param": "response_id",
        "code": "resource_not_found",
    }
    third = client.responses.create(model="command", previous_response_id=first.id, input="third")
    assert third.output_text.endswith("| 3 notes")


def test_a_running_response_is_cancelled_and_its_stream_ends_incomplete(setup):
    _, client, _ = setup
    started = client.responses.create(model="command", input="wait for me", background=True)
    assert started.status == "in_progress" and started.background is True
    kinds = []
    for event in client.responses.retrieve(started.id, stream=True):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            cancelled = client.responses.cancel(started.id)
            assert cancelled.status == "cancelled"
    assert kinds[-1] == "response.incomplete" and kinds[:2] == OPENING
    assert client.responses.retrieve(started.id).status == "cancelled"
    with pytest.raises(openai.BadRequestError) as late:
        client.responses.cancel(started.id)
    assert error_of(late.value)["code"] == "agents.not_cancellable"


def test_models_list_the_runtimes_and_unavailable_operations_are_not_found(setup):
    _, client, _ = setup
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids[:2] == ["codex", "qwen-code"] and "command" in ids and "cursor" not in ids
    command = client.models.retrieve("command")
    assert (command.object, command.owned_by) == ("model", "agent-sandbox-local")
    assert command.model_dump(warnings=False)["x_agent_sandbox"] == {
        "local": True, "compute": "none", "differences": [], "kind": "adapter", "installed": True,
    }
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-nope")
    assert error_of(missing.value)["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError) as deleted:
        client.models.delete("command")
    assert error_of(deleted.value)["code"] == "agents.not_implemented_locally"
    with pytest.raises(openai.NotFoundError) as counted:
        client.responses.input_tokens.count(model="command", input="hi")
    error = error_of(counted.value)
    assert (error["code"], error["x_agent_sandbox"]["runtimes"]) == ("agents.not_implemented_locally", "/v1/agents/runtimes")


def test_what_a_cli_turn_cannot_honour_is_refused_and_a_wrong_token_is_denied(setup):
    server, client, _ = setup
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="command", input="x", tools=[{"type": "function", "name": "f", "parameters": {}}])
    assert error_of(bad.value)["param"] == "tools[0].type"
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="command", input=[{"role": "assistant", "content": "earlier"}])
    assert error_of(bad.value)["param"] == "input[0].role"
    with pytest.raises(openai.NotFoundError) as bad:
        client.responses.create(model="cursor", input="x")
    assert error_of(bad.value)["code"] == "agents.not_implemented_locally"
    denied = OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        denied.responses.create(model="command", input="x")


PREFIX = os.environ.get("ABX_TEST_AGENT_CLIS", "")


def test_a_real_codex_answers_a_response_and_continues_it(make_server, tmp_path):
    from agents_model import FINAL, ScriptedModel
    from test_agents_cli import cli_env

    model = ScriptedModel().start()
    try:
        env = cli_env(tmp_path, model)
        work = tmp_path / "work"
        work.mkdir()
        (work / "a.txt").write_text("")
        server = make_server(env={**env, "ABX_AGENTS_RESPONSES_WORKSPACE": str(work)})
        client = OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0, timeout=240)
        first = client.responses.create(model="codex", input="List the files in the workspace.")
        assert first.status == "completed", f"{first.error}\n{server.log()[-3000:]}"
        commands = [i.model_dump(warnings=False) for i in first.output if i.type == "command_execution"]
        assert commands and "a.txt" in commands[0]["output"] and commands[0]["cwd"] == str(work)
        assert first.output_text.endswith(FINAL)
        asked = len(model.requests)
        second = client.responses.create(model="codex", previous_response_id=first.id, input="And again?")
        assert second.status == "completed"
        later = json.dumps([body for _, body in model.requests[asked:]])
        assert FINAL in later and "And again?" in later, "the second response resumed the CLI's conversation"
    finally:
        model.stop()


def test_read_only_refuses_a_response_with_the_sdk_s_permission_error_and_runs_nothing(make_server, tmp_path):
    """Issue 31: a response starts a CLI, so it is process execution; ``read-only`` switches it off
    even with the agents group on. The SDK raises its 403 error and no agent ran."""
    server = make_server(args=["--preset", "read-only"], env=agents_env(tmp_path))
    client = OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0, timeout=60)
    work = tmp_path / "work"
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client.responses.create(model="command", input="remember this")
    assert refused.value.status_code == 403
    assert "responses_create" in refused.value.response.text, refused.value.response.text
    with pytest.raises(openai.PermissionDeniedError):
        client.responses.create(model="command", input="and this", stream=True)
    assert not (work / "memory.txt").exists(), "the agent never ran"
    assert list(work.iterdir()) == []
    sessions = tmp_path / "state" / "sessions"
    assert not sessions.exists() or not any(sessions.iterdir()), "no session was created"
    # What the preset leaves open still answers: the models list is a read.
    assert [m.id for m in client.models.list()], "the read endpoints stay"
