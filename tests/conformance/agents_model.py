"""A scripted model server on loopback for the real coding-agent CLIs.

It speaks the three wire protocols the CLIs use, streaming as the real
services do: OpenAI Responses (``codex``), OpenAI Chat Completions
(``qwen-code``) and Anthropic Messages (``claude-code``). Each turn goes the
same way: while the conversation does not end with a tool result, the model
asks to run ``ls`` with the CLI's own shell tool; once it does, the model
answers with ``FINAL``. Every request is kept for the test to inspect.
"""

from __future__ import annotations

import http.server
import json
import threading
import uuid
from typing import Any

FINAL = "The workspace holds a.txt."
USAGE = {"input_tokens": 11, "output_tokens": 7}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        size = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(size) or b"{}")
        self.server.requests.append((self.path, body))
        if self.path.startswith("/v1/responses"):
            self._sse(_responses(body))
        elif self.path.startswith("/v1/chat/completions"):
            self._sse(_chat(body))
        elif self.path.startswith("/v1/messages"):
            if body.get("stream"):
                self._sse(_anthropic(body))
            else:
                self._json(_anthropic_whole(body))
        else:
            self._json({"error": {"message": "not scripted", "type": "invalid_request_error"}}, 404)

    def _json(self, payload: dict[str, Any], status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[tuple[str | None, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name else ""
            self.wfile.write(f"{head}data: {text}\n\n".encode())
            self.wfile.flush()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    requests: list[tuple[str, dict[str, Any]]]


def _responses(body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    items = body.get("input") or []
    last = items[-1] if items else {}
    done = isinstance(last, dict) and last.get("type") == "function_call_output"
    if done:
        item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": FINAL, "annotations": []}]}
    else:
        item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:8], "call_id": "call_" + uuid.uuid4().hex[:8],
                "name": "exec_command", "arguments": json.dumps({"cmd": "ls"}), "status": "completed"}
    base = {"id": "resp_" + uuid.uuid4().hex, "object": "response", "created_at": 0, "status": "in_progress",
            "model": body.get("model"), "output": []}
    usage = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 7,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 18}
    return [
        ("response.created", {"type": "response.created", "response": base}),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item}),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed",
                                "response": dict(base, status="completed", output=[item], usage=usage)}),
    ]


def _chat(body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    messages = body.get("messages") or []
    done = bool(messages) and messages[-1].get("role") == "tool"
    cid = "chatcmpl-" + uuid.uuid4().hex

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        return None, {"id": cid, "object": "chat.completion.chunk", "created": 0, "model": body.get("model"),
                      "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [chunk({"role": "assistant", "content": ""})]
    if done:
        events += [chunk({"content": FINAL[:14]}), chunk({"content": FINAL[14:]}), chunk({}, "stop")]
    else:
        call = {"index": 0, "id": "call_" + uuid.uuid4().hex[:8], "type": "function",
                "function": {"name": "run_shell_command", "arguments": json.dumps({"command": "ls", "description": "list"})}}
        events += [chunk({"tool_calls": [call]}), chunk({}, "tool_calls")]
    events.append((None, {"id": cid, "object": "chat.completion.chunk", "created": 0, "model": body.get("model"),
                          "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}))
    events.append((None, "[DONE]"))
    return events


def _tool_result_last(messages: list[dict[str, Any]]) -> bool:
    if not messages or messages[-1].get("role") != "user":
        return False
    content = messages[-1].get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _anthropic(body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    mid = "msg_" + uuid.uuid4().hex
    start = {"id": mid, "type": "message", "role": "assistant", "model": body.get("model"), "content": [],
             "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 11, "output_tokens": 1}}
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": start})]
    if _tool_result_last(body.get("messages") or []):
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": FINAL[:14]}, {"type": "text_delta", "text": FINAL[14:]}]
        stop = "end_turn"
    else:
        block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:8], "name": "Bash", "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps({"command": "ls", "description": "List files"})}]
        stop = "tool_use"
    events.append(("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}))
    for delta in deltas:
        events.append(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))
    events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 7}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _anthropic_whole(body: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed side request of the CLI (a title, a summary): a short text."""
    return {"id": "msg_" + uuid.uuid4().hex, "type": "message", "role": "assistant", "model": body.get("model"),
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}


class ScriptedModel:
    """The server: ``start()`` binds an ephemeral loopback port; ``url`` is its base."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.requests = []
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[tuple[str, dict[str, Any]]]:
        return self._server.requests

    def start(self) -> "ScriptedModel":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
