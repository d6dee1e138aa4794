"""The official ``openai`` SDK (pinned) against our agent definitions,
environments, environment templates, their files and ``/v1/files``:
``client.files.create`` (a multipart upload), ``client.beta.agents`` and
``client.beta.agents.environments`` (with ``files`` and ``templates``), and a
response that names a definition as its model. The agent is the ``command``
runtime running the script of ``test_agents_responses``.
"""

from __future__ import annotations

import base64

import openai
import pytest
from openai import OpenAI

from conftest import TOKEN
from test_agents_responses import agents_env, error_of


@pytest.fixture
def setup(make_server, tmp_path):
    server = make_server(env=agents_env(tmp_path))
    client = OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0, timeout=60)
    return server, client


def test_files_templates_and_environments_through_the_sdk(setup):
    server, client = setup
    uploaded = client.files.create(file=("seed.txt", b"seeded by a blob\n", "text/plain"), purpose="user_data")
    assert (uploaded.object, uploaded.bytes, uploaded.filename, uploaded.purpose) == ("file", 17, "seed.txt", "user_data")
    assert uploaded.id.startswith("file-")

    templates = client.beta.agents.environments.templates
    template = templates.create(
        name="starter", env={"STAGE": "test"},
        files=[{"type": "file_id", "file_id": uploaded.id, "path": "/workspace/seed.txt"}],
    )
    assert template.id.startswith("envtmpl_") and template.name == "starter"
    assert templates.retrieve(template.id).model_dump(warnings=False)["files"] == [
        {"type": "file_id", "file_id": uploaded.id, "path": "/workspace/seed.txt"}
    ]
    assert templates.update(template.id, name="renamed").name == "renamed"
    assert [t.id for t in templates.list()] == [template.id]

    environments = client.beta.agents.environments
    workspace = server.base / "project"
    env = environments.create(environment={
        "type": "self_hosted", "workspace_directory": str(workspace), "environment_template_id": template.id,
    })
    assert (env.id[:4], env.status, env.workspace_directory) == ("env_", "ready", str(workspace))
    assert (workspace / "seed.txt").read_bytes() == b"seeded by a blob\n"
    written = environments.files.create(
        env.id, type="inline", path="/workspace/src/main.py", data=base64.b64encode(b"print(1)\n").decode()
    )
    assert (written.path, written.size_bytes) == ("/workspace/src/main.py", 9)
    listed = environments.files.list(env.id, order="asc")
    assert [(f.path, f.size_bytes) for f in listed] == [("/workspace/seed.txt", 17), ("/workspace/src/main.py", 9)]
    assert environments.retrieve(env.id).id == env.id
    assert [e.id for e in environments.list()] == [env.id]

    with pytest.raises(openai.BadRequestError) as clash:
        environments.files.create(env.id, type="inline", path="/workspace/seed.txt", data="b3RoZXI=")
    assert error_of(clash.value)["code"] == "agents.file_exists"
    with pytest.raises(openai.NotFoundError) as missing:
        environments.retrieve("env_nope")
    assert (error_of(missing.value)["code"], error_of(missing.value)["param"]) == ("resource_not_found", "environment_id")
    deleted = templates.delete(template.id)
    assert deleted.deleted is True


def test_a_definition_is_stored_updated_and_run_by_a_response(setup):
    _, client = setup
    agents = client.beta.agents
    agent = agents.create(model="scripted-model", name="helper", instructions="be brief", metadata={"team": "a"})
    assert (agent.object, agent.model, agent.name, agent.metadata) == ("agent", "scripted-model", "helper", {"team": "a"})
    assert agent.model_dump(warnings=False)["x_agent_sandbox"]["runtime"] == "command"
    assert agents.update(agent.id, name="helper-2").name == "helper-2"
    assert agents.retrieve(agent.id).instructions == "be brief"
    assert [a.id for a in agents.list()] == [agent.id]
    assert client.models.retrieve(agent.id).model_dump(warnings=False)["x_agent_sandbox"]["kind"] == "agent_definition"

    response = client.responses.create(model=agent.id, input="hello")
    assert (response.status, response.model) == ("completed", "scripted-model")
    assert response.output_text.startswith("heard: ")

    with pytest.raises(openai.BadRequestError) as bad:
        agents.create(model="m", tools=[{"type": "function", "name": "f", "parameters": {}}])
    assert error_of(bad.value)["param"] == "tools[0].type"
    assert agents.delete(agent.id).deleted is True
    with pytest.raises(openai.NotFoundError) as gone:
        agents.retrieve(agent.id)
    assert error_of(gone.value)["message"] == f"agent {agent.id!r} not found"
