"""Registered-command conformance: commands declared in the config file, through the real ServerClient."""

from __future__ import annotations

import shutil

import pytest
from agent_sandbox.models.errors import (
    CommandArgumentError,
    CommandExecutionError,
    CommandNotFoundError,
    CommandTimeoutError,
)

CONFIG = r"""
[[commands]]
name = "hello"
description = "Say hello"
argv = ["/bin/sh", "-c", 'printf "Hello, %s!" "$1"', "hello", "{name}"]
args = [{ name = "name", description = "Who to greet" }]

[[commands]]
name = "echo-json"
description = "Print the arguments it received"
argv = ["cat"]
input = "json"
args = [
  { name = "name", type = "string" },
  { name = "times", type = "integer", default = 1 },
  { name = "loud", type = "boolean", default = false },
  { name = "ratio", type = "float", default = 0.5 },
  { name = "tags", type = "string_array", default = ["a"] },
]

[[commands]]
name = "fail"
argv = ["/bin/sh", "-c", "echo 'disk full' >&2; exit 3"]

[[commands]]
name = "slow"
argv = ["sleep", "30"]
timeout_seconds = 0.3

[[commands]]
name = "py-error"
argv = ["python3", "-c", "raise ValueError('bad input')"]
"""


@pytest.fixture
def commands_server(make_server, tmp_path):
    config = tmp_path / "server.toml"
    config.write_text(CONFIG)
    return make_server(args=["--config", str(config)])


def test_commands_are_listed_with_their_args(commands_server):
    listed = commands_server.client().commands.list_sync()
    assert [c.name for c in listed] == ["hello", "echo-json", "fail", "slow", "py-error"]
    hello = listed[0]
    assert hello.description == "Say hello"
    assert [(a.name, a.type, a.required, a.default, a.description) for a in hello.args] == [
        ("name", "string", True, None, "Who to greet")
    ]
    echo = listed[1]
    assert [(a.name, a.type, a.required, a.default) for a in echo.args] == [
        ("name", "string", True, None),
        ("times", "integer", False, "1"),
        ("loud", "boolean", False, "False"),
        ("ratio", "float", False, "0.5"),
        ("tags", "string_array", False, '["a"]'),
    ]


def test_commands_run_with_coerced_args_and_json_output_is_json(commands_server):
    commands = commands_server.client().commands
    assert commands.run_sync("hello", name="Ada") == "Hello, Ada!"
    assert commands.run_sync("echo-json", name=5, times="7", loud="yes", ratio="2", tags=["b"]) == {
        "name": "5",
        "times": 7,
        "loud": True,
        "ratio": 2.0,
        "tags": ["b"],
    }
    assert commands.run_sync("echo-json", name="x") == {
        "name": "x",
        "times": 1,
        "loud": False,
        "ratio": 0.5,
        "tags": ["a"],
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "ValueError: Required argument 'name' missing"),
        ({"name": "x", "extra": 1}, "ValueError: Unexpected argument(s): ['extra']; declared: ['loud', 'name', 'ratio', 'tags', 'times']"),
        (
            {"name": "x", "times": "many"},
            "TypeError: Cannot convert argument 'times' to integer: invalid literal for int() with base 10: 'many'",
        ),
        (
            {"name": "x", "tags": "a,b"},
            "TypeError: Cannot convert argument 'tags' to string_array: Expected a JSON array containing only strings",
        ),
    ],
)
def test_bad_args_are_refused_with_the_references_error(commands_server, kwargs, message):
    with pytest.raises(CommandArgumentError) as caught:
        commands_server.client().commands.run_sync("echo-json", **kwargs)
    assert caught.value.status_code == 400
    assert caught.value.message == message


def test_an_unknown_command_is_not_found(commands_server):
    with pytest.raises(CommandNotFoundError) as caught:
        commands_server.client().commands.run_sync("nope")
    assert "Unknown command 'nope'; available: echo-json, fail, hello, py-error, slow" in str(caught.value)


def test_failures_and_timeouts_are_execution_errors(commands_server):
    commands = commands_server.client().commands
    with pytest.raises(CommandExecutionError) as caught:
        commands.run_sync("fail")
    assert caught.value.status_code == 500
    assert caught.value.message == "RuntimeError: Command 'fail' exited with code 3: disk full"
    with pytest.raises(CommandTimeoutError):
        commands.run_sync("slow")


@pytest.mark.skipif(shutil.which("python3") is None, reason="no python3")
def test_a_python_exception_keeps_its_type_and_message(commands_server):
    with pytest.raises(CommandExecutionError) as caught:
        commands_server.client().commands.run_sync("py-error")
    assert (caught.value.error_type, caught.value.message) == ("ValueError", "ValueError: bad input")
