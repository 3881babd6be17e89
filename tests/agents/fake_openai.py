"""A scripted OpenAI Responses API for running the real Codex CLI offline.

`POST /v1/responses` is answered with a server-sent event stream (response.created →
response.output_item.added/done → response.completed) carrying the next step of a script: a
`function_call` of the shell tool Codex advertises (`exec_command`, arguments `{"cmd": …}`), a
`custom_tool_call` of its `apply_patch` tool, a plain assistant message, or an HTTP error. A step
that is a call is only left behind once the request carrying its output arrives, so a retried
request gets the same step again. Every request is recorded, so a test can check that a resumed
or forked thread carried its whole history.
"""

from __future__ import annotations

import gzip
import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SHELL_TOOL = "exec_command"  # what Codex 0.171 advertises in `tools` for running a command
PATCH_TOOL = "apply_patch"  # its file-editing tool (a custom tool: free-form input)


@dataclass(frozen=True)
class Step:
    """One model answer: a shell command to run (`cmd`), a patch to apply (`patch`), a message
    that ends the turn (`text`), or an HTTP error status with its message."""

    cmd: str | None = None
    text: str | None = None
    patch: str | None = None
    status: int = 200

    @property
    def is_call(self) -> bool:
        return self.cmd is not None or self.patch is not None


def run(cmd: str) -> Step:
    return Step(cmd=cmd)


def say(text: str) -> Step:
    return Step(text=text)


def patch(text: str) -> Step:
    return Step(patch=text)


def fail(status: int, message: str) -> Step:
    return Step(text=message, status=status)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def thread_id(self) -> str | None:
        return self.headers.get("thread-id") or self.headers.get("session-id")

    @property
    def tool_names(self) -> list[str]:
        return [t.get("name") or t.get("type") for t in self.body.get("tools") or []]

    @property
    def input(self) -> list[dict[str, Any]]:
        return list(self.body.get("input") or [])

    def texts(self, role: str | None = None) -> list[str]:
        """The text of every message item in the input (of one role when given)."""
        out = []
        for item in self.input:
            if item.get("type") != "message" or (role and item.get("role") != role):
                continue
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append(part["text"])
        return out

    def call_outputs(self) -> dict[str, str]:
        """`call_id` → output of every tool call result in the input."""
        out = {}
        for item in self.input:
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                value = item.get("output")
                if not isinstance(value, str):
                    value = json.dumps(value)
                out[item.get("call_id")] = value
        return out

    def calls(self) -> list[dict[str, Any]]:
        return [i for i in self.input if i.get("type") in ("function_call", "custom_tool_call")]


@dataclass
class _Served:
    step: Step
    call_id: str | None


@dataclass
class FakeOpenAI:
    """The server; use as a context manager. `url` is the base URL for Codex (…/v1)."""

    script: list[Step] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0
        self._pending: _Served | None = None
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None

    # -- control ------------------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer((self.host, self.port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def then(self, *steps: Step) -> None:
        """Append steps to the script (for the next turn)."""
        with self._lock:
            self.script.extend(steps)

    def turns(self) -> list[Request]:
        """The requests that asked the model for an answer (not housekeeping)."""
        return [r for r in self.requests if r.path.rstrip("/").endswith("/responses")]

    # -- answering ----------------------------------------------------------------------------

    def _answer(self, request: Request) -> tuple[Step, list[dict[str, Any]]]:
        with self._lock:
            self.requests.append(request)
            pending = self._pending
            if pending is not None and pending.call_id not in request.call_outputs():
                # The result of the last call has not come back: a retry, answer it again.
                step, call_id = pending.step, pending.call_id
            else:
                if self._next < len(self.script):
                    step = self.script[self._next]
                    self._next += 1
                else:
                    step = say("Nothing more is scripted.")
                call_id = f"call_{next(self._ids)}" if step.is_call else None
                self._pending = _Served(step, call_id) if step.is_call else None
        if step.cmd is not None:
            return step, [
                {
                    "type": "function_call",
                    "id": f"fc_{call_id}",
                    "call_id": call_id,
                    "name": SHELL_TOOL,
                    "arguments": json.dumps({"cmd": step.cmd}),
                    "status": "completed",
                }
            ]
        if step.patch is not None:
            return step, [
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_{call_id}",
                    "call_id": call_id,
                    "name": PATCH_TOOL,
                    "input": step.patch,
                    "status": "completed",
                }
            ]
        return step, [
            {
                "type": "message",
                "id": f"msg_{next(self._ids)}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": step.text, "annotations": []}],
            }
        ]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeOpenAI

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
            raw = gzip.decompress(raw)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._plain(400, b"not JSON")
            return
        request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        if not self.path.split("?")[0].rstrip("/").endswith("/responses"):
            self.fake.requests.append(request)
            self._plain(404, b"not scripted")
            return
        step, items = self.fake._answer(request)
        if step.status != 200:
            error = {
                "error": {
                    "message": step.text,
                    "type": "invalid_request_error",
                    "code": None,
                    "param": None,
                }
            }
            self._plain(step.status, json.dumps(error).encode(), "application/json")
            return
        response_id = f"resp_{next(self.fake._ids)}"
        events = [
            (
                "response.created",
                {"response": {"id": response_id, "status": "in_progress", "output": []}},
            )
        ]
        for index, item in enumerate(items):
            events.append(("response.output_item.added", {"output_index": index, "item": item}))
            events.append(("response.output_item.done", {"output_index": index, "item": item}))
        usage = {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 110,
        }
        events.append(
            (
                "response.completed",
                {
                    "response": {
                        "id": response_id,
                        "status": "completed",
                        "output": items,
                        "usage": usage,
                    }
                },
            )
        )
        payload = b"".join(
            f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()
            for name, data in events
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        self._plain(404, b"not scripted")

    def do_HEAD(self) -> None:
        self._plain(404, b"")

    def _plain(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass
