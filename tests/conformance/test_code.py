"""Code execution conformance.

The code-interpreter port is driven with the real ``agent_sandbox.code_interpreter``
classes in their local debug mode (``debug=True`` talks straight to
``localhost:<port>`` without a platform); the port constant they read is pointed
at the ephemeral port of the server under test, so nothing binds 49999. Where
those classes do not send a request we need (a token on ``/contexts``, both
``context_id`` and ``language``), raw HTTP mirrors their exact request.

The ``e2b-code-interpreter`` SDK is driven the same way in one test.
The dev_tools group is driven with ``ServerClient.devtools``.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import time

import httpx
import pytest
from agent_sandbox._standard import NotFoundException, SandboxException, TimeoutException
from agent_sandbox._standard.connection_config import ConnectionConfig
from agent_sandbox._standard.envd.versions import ENVD_DEBUG_FALLBACK
from agent_sandbox.code_interpreter import Context, Sandbox
from agent_sandbox.code_interpreter import code_interpreter_async, code_interpreter_sync

from conftest import TOKEN


def code_port(srv) -> int:
    return int(srv.listeners["code"].rsplit(":", 1)[1])


@pytest.fixture
def interpreter(make_server, monkeypatch):
    """A token-less server whose Python contexts run this venv's interpreter (it has matplotlib),
    and a debug-mode Sandbox pointed at its code port."""
    srv = make_server(token=None, args=("--code-python", sys.executable))
    monkeypatch.setattr(code_interpreter_sync, "JUPYTER_PORT", code_port(srv))
    monkeypatch.setattr(code_interpreter_async, "JUPYTER_PORT", code_port(srv))
    return srv, Sandbox.create(debug=True)


def test_state_persists_and_the_final_expression_is_the_result(interpreter):
    _, sandbox = interpreter
    first = sandbox.run_code("import math\nx = 20\ndef double(v):\n    return v * 2")
    assert first.error is None and first.results == []
    execution = sandbox.run_code("x = x + 1; double(x) + math.floor(0.9)")
    assert execution.text == "42"
    assert execution.results[0].is_main_result
    assert execution.execution_count == 2


def test_stdout_and_stderr_stream_in_order(interpreter):
    _, sandbox = interpreter
    seen = []
    execution = sandbox.run_code(
        "import sys\nprint('one')\nprint('two', file=sys.stderr)\nprint('three')",
        on_stdout=lambda m: seen.append(("out", m.line)),
        on_stderr=lambda m: seen.append(("err", m.line)),
    )
    assert seen == [("out", "one\n"), ("err", "two\n"), ("out", "three\n")]
    assert execution.logs.stdout == ["one\n", "three\n"]
    assert execution.logs.stderr == ["two\n"]


def test_a_raised_exception_has_name_value_and_traceback(interpreter):
    _, sandbox = interpreter
    errors = []
    execution = sandbox.run_code("def f():\n    raise KeyError('missing')\nf()", on_error=errors.append)
    assert execution.error is errors[0]
    assert execution.error.name == "KeyError"
    assert execution.error.value == "'missing'"
    assert 'line 3, in <module>' in execution.error.traceback
    assert 'line 2, in f' in execution.error.traceback


def test_a_matplotlib_figure_comes_back_as_png(interpreter):
    _, sandbox = interpreter
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()"
    execution = sandbox.run_code(code)
    assert execution.error is None, execution.error
    pngs = [r.png for r in execution.results if r.png]
    assert len(pngs) == 1
    data = base64.b64decode(pngs[0])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 100 and height > 100
    assert sandbox.run_code("import matplotlib.pyplot as plt\nlen(plt.get_fignums())").text == "0"


def test_rich_representations_give_their_formats(interpreter):
    _, sandbox = interpreter
    code = (
        "class Table:\n"
        "    def _repr_html_(self): return '<table></table>'\n"
        "    def _repr_markdown_(self): return '| a |'\n"
        "    def _repr_json_(self): return {'rows': 0}\n"
        "Table()"
    )
    result = sandbox.run_code(code).results[0]
    assert result.html == "<table></table>"
    assert result.markdown == "| a |"
    assert result.json == {"rows": 0}
    assert set(result.formats()) >= {"text", "html", "markdown", "json"}


def test_a_timeout_interrupts_the_execution_and_keeps_state(interpreter):
    _, sandbox = interpreter
    sandbox.run_code("kept = 'still here'")
    started = time.monotonic()
    with pytest.raises(TimeoutException):
        sandbox.run_code("import time\nwhile True:\n    time.sleep(0.05)", timeout=1)
    execution = sandbox.run_code("kept", timeout=10)
    assert execution.text == "still here"
    assert time.monotonic() - started < 8, "the abandoned execution was interrupted"


def test_restart_clears_state_and_delete_removes_the_context(interpreter):
    srv, sandbox = interpreter
    cwd = srv.base / "work"
    cwd.mkdir()
    context = sandbox.create_code_context(cwd=str(cwd), language="python")
    assert (context.language, context.cwd) == ("python", str(cwd))
    sandbox.run_code("x = 1", context=context)
    sandbox.restart_code_context(context)
    execution = sandbox.run_code("import os\nprint(os.getcwd())\nx", context=context)
    assert execution.logs.stdout == [f"{cwd}\n"], "a restart keeps the working directory"
    assert execution.error.name == "NameError"
    assert context.id in [c.id for c in sandbox.list_code_contexts()]
    sandbox.remove_code_context(context.id)
    assert context.id not in [c.id for c in sandbox.list_code_contexts()]
    with pytest.raises(NotFoundException):
        sandbox.run_code("1", context=context)


def test_an_unknown_context_is_not_found(interpreter):
    _, sandbox = interpreter
    with pytest.raises(NotFoundException, match="Context nope not found"):
        sandbox.run_code("1", context=Context("nope", "python", "/"))
    with pytest.raises(NotFoundException):
        sandbox.restart_code_context("nope")
    with pytest.raises(NotFoundException):
        sandbox.remove_code_context("nope")


def test_env_vars_apply_to_one_execution(interpreter):
    _, sandbox = interpreter
    value = "it's \"quoted\"; $(echo no)"
    execution = sandbox.run_code("import os\nprint(os.environ['GREETING'])", envs={"GREETING": value})
    assert execution.logs.stdout == [value + "\n"]
    assert sandbox.run_code("import os\nos.environ.get('GREETING', 'gone')").text == "gone"


def test_javascript_and_bash_run_in_their_own_default_contexts(interpreter):
    _, sandbox = interpreter
    expected = ["bash", "python"]
    if subprocess.run(["sh", "-c", "command -v node"], capture_output=True).returncode == 0:
        sandbox.run_code("const base = 40", language="javascript")
        assert sandbox.run_code("base + 2", language="js").text == "42"
        expected.insert(1, "javascript")
    sandbox.run_code("count=41", language="bash")
    assert sandbox.run_code("echo $((count + 1))", language="bash").logs.stdout == ["42\n"]
    assert sorted(c.language for c in sandbox.list_code_contexts()) == expected


def test_a_missing_runtime_is_a_clear_error(make_server, monkeypatch):
    srv = make_server(token=None, args=("--code-node", "/nonexistent/node"))
    monkeypatch.setattr(code_interpreter_sync, "JUPYTER_PORT", code_port(srv))
    sandbox = Sandbox.create(debug=True)
    with pytest.raises(SandboxException, match="501: javascript is not available here"):
        sandbox.create_code_context(language="javascript")
    with pytest.raises(SandboxException, match="400: Unsupported language 'cobol'"):
        sandbox.run_code("1", language="cobol")


def test_the_code_port_takes_the_server_token(make_server, monkeypatch):
    srv = make_server()
    url = srv.listeners["code"]
    assert httpx.get(f"{url}/health").json() == "OK"
    assert httpx.post(f"{url}/contexts", json={"language": "python"}).status_code == 401
    created = httpx.post(f"{url}/contexts", json={"language": "python"}, headers={"X-Access-Token": TOKEN})
    assert created.status_code == 200
    both = {"code": "1", "context_id": created.json()["id"], "language": "python", "env_vars": None}
    refused = httpx.post(f"{url}/execute", json=both, headers={"Authorization": f"Bearer {TOKEN}"})
    assert (refused.status_code, refused.text) == (400, "Only one of context_id or language can be provided")
    monkeypatch.setattr(code_interpreter_sync, "JUPYTER_PORT", code_port(srv))
    sandbox = Sandbox(
        sandbox_id="debug_sandbox_id",
        envd_version=ENVD_DEBUG_FALLBACK,
        envd_access_token=TOKEN,
        sandbox_domain=None,
        connection_config=ConnectionConfig(debug=True),
    )
    assert sandbox.run_code("6 * 7").text == "42", "run_code sends the token as X-Access-Token"


@pytest.fixture
def devtools(make_server):
    return make_server(env={"ABX_SERVER_ENABLED_GROUPS": "dev_tools"})


def test_devtools_run_code_through_the_real_client(devtools):
    client = devtools.client()
    result = client.devtools.run_code_sync("import sys; print('hi'); sys.exit(2)")
    assert (result.stdout, result.exit_code, result.language, result.success) == ("hi\n", 2, "python", False)
    assert client.devtools.run_code_sync("echo $((1 + 1))", "bash").stdout == "2\n"
    from agent_sandbox.models.errors import CommandTimeoutError, ServerAPIError

    with pytest.raises(CommandTimeoutError):
        client.devtools.run_code_sync("sleep 10", "bash", timeout=1)
    with pytest.raises(ServerAPIError, match="Unsupported language"):
        client.devtools.run_code_sync("1", "ruby")


def test_devtools_git_through_the_real_client(devtools):
    repo = devtools.base / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], cwd=repo, check=True)
    (repo / "a.txt").write_text("two\n")
    (repo / "b.txt").write_text("new\n")
    client = devtools.client()
    status = client.devtools.git_status_sync("repo")
    assert status.branch == "main" and not status.clean
    assert {(f.path, f.status) for f in status.files} == {("a.txt", "modified"), ("b.txt", "untracked")}
    diff = client.devtools.git_diff_sync("repo")
    assert "-one\n+two\n" in diff.diff
    assert diff.stats == {"files_changed": 1, "insertions": 1, "deletions": 1}
    assert client.devtools.git_diff_sync("repo", staged=True).diff == ""
    assert client.devtools.git_diff_sync("repo", file="b.txt").diff == ""


def test_the_e2b_sdk_in_debug_mode(interpreter, monkeypatch):
    """The `e2b-code-interpreter` SDK users have, in its local debug mode."""
    import e2b_code_interpreter
    from e2b_code_interpreter import code_interpreter_sync as e2b_sync

    srv, _ = interpreter
    monkeypatch.setattr(e2b_sync, "JUPYTER_PORT", code_port(srv))
    sandbox = e2b_code_interpreter.Sandbox.create(debug=True)
    sandbox.run_code("total = 40")
    lines = []
    execution = sandbox.run_code("print('adding')\ntotal + 2", on_stdout=lambda m: lines.append(m.line))
    assert (execution.text, lines) == ("42", ["adding\n"])
    error = sandbox.run_code("int('x')").error
    assert (error.name, error.value) == ("ValueError", "invalid literal for int() with base 10: 'x'")
    context = sandbox.create_code_context(language="bash")
    sandbox.run_code("name=e2b", context=context)
    assert sandbox.run_code("echo $name", context=context).logs.stdout == ["e2b\n"]
    sandbox.restart_code_context(context)
    assert sandbox.run_code("echo ${name:-reset}", context=context).logs.stdout == ["reset\n"]
    sandbox.remove_code_context(context)
    assert context.id not in [c.id for c in sandbox.list_code_contexts()]
