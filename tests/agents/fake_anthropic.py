"""A scripted Anthropic Messages API server for driving the real Claude Code CLI offline.

Owns the wire format Claude Code expects (`HEAD /`, `POST /v1/messages?beta=true`, streamed as
server-sent events) and a script of model turns: each step either replies with text or asks for
the Bash tool with one command (or for another tool). A tool step stays current until a request
carries the tool_result for its tool_use, so a retried request gets the same answer. Side
requests (the session title, token counts) are answered without moving the script. Every request
is recorded so tests can check what the CLI sent, e.g. that a resumed or forked session carries
the earlier conversation.

Standard library only; bound to 127.0.0.1 on a free port.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

MODEL = "claude-sonnet-4-5"
FINISHED_TEXT = "The script has no more steps."


@dataclass(frozen=True)
class Reply:
    """The model answers with text and ends its turn."""

    text: str


@dataclass(frozen=True)
class Bash:
    """The model asks for the Bash tool to run `command`."""

    command: str
    description: str = "Run a command"
    text: str | None = None  # an optional text block before the tool_use

    @property
    def tool(self) -> tuple[str, dict]:
        return "Bash", {"command": self.command, "description": self.description}


@dataclass(frozen=True)
class Tool:
    """The model asks for any other tool (e.g. Write) with this input."""

    name: str
    input: dict
    text: str | None = None

    @property
    def tool(self) -> tuple[str, dict]:
        return self.name, dict(self.input)


Step = Reply | Bash | Tool


@dataclass
class Recorded:
    """One request as it arrived."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any = None
    kind: str = ""  # "main" | "title" | "side" | "count_tokens" | "probe" | "other"

    @property
    def messages(self) -> list[dict]:
        return list((self.body or {}).get("messages") or []) if isinstance(self.body, dict) else []


def _is_title_request(body: dict) -> bool:
    fmt = (body.get("output_config") or {}).get("format") or {}
    return not body.get("tools") and fmt.get("type") == "json_schema"


def text_of(content: Any) -> str:
    """All text in a message's content (a string or a list of blocks), tool results included."""
    if isinstance(content, str):
        return content
    out = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            out.append(block.get("text") or "")
        elif block.get("type") == "tool_result":
            out.append(text_of(block.get("content")))
    return "\n".join(out)


def tool_results(messages: list[dict]) -> dict[str, dict]:
    """tool_use_id → the tool_result block, over every user message."""
    found = {}
    for message in messages:
        if message.get("role") != "user" or not isinstance(message.get("content"), list):
            continue
        for block in message["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found[block.get("tool_use_id")] = block
    return found


@dataclass
class _State:
    steps: list[Step] = field(default_factory=list)
    position: int = 0
    pending_tool_use: str | None = None  # the tool_use id the current tool step is waiting on


class FakeAnthropic:
    """`with FakeAnthropic([Bash("touch x"), Reply("done")]) as server: ... server.url ...`"""

    def __init__(
        self,
        steps: list[Step] | None = None,
        *,
        model: str = MODEL,
        title: str = "Scripted session",
    ):
        self.model = model
        self.title = title
        self.requests: list[Recorded] = []
        self._state = _State(list(steps or []))
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FakeAnthropic:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-anthropic", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        assert self._server is not None, "the server is not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- the script ----------------------------------------------------------------------------

    def add(self, *steps: Step) -> None:
        """Append steps for a later turn (e.g. the one a resumed session sends)."""
        with self._lock:
            self._state.steps.extend(steps)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._state.steps) - self._state.position

    def main_requests(self) -> list[Recorded]:
        """The conversation's own requests (the ones that carry tools), in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.kind == "main"]

    def _next_step(self, body: dict) -> tuple[Step | None, str | None]:
        """The step that answers this main request, and the tool_use id for a tool step."""
        st = self._state
        if st.pending_tool_use is not None and st.pending_tool_use in tool_results(
            body.get("messages") or []
        ):
            st.position += 1
            st.pending_tool_use = None
        if st.position >= len(st.steps):
            return None, None
        step = st.steps[st.position]
        if not isinstance(step, Reply):
            if st.pending_tool_use is None:
                st.pending_tool_use = f"toolu_{next(self._ids):024d}"
            return step, st.pending_tool_use
        st.position += 1
        return step, None

    # -- answering -----------------------------------------------------------------------------

    def answer(self, record: Recorded) -> list[dict]:
        """The content blocks and stop reason for one messages request."""
        body = record.body if isinstance(record.body, dict) else {}
        if _is_title_request(body):
            record.kind = "title"
            return [{"type": "text", "text": json.dumps({"title": self.title})}]
        if not body.get("tools"):
            record.kind = "side"
            return [{"type": "text", "text": "ok"}]
        record.kind = "main"
        with self._lock:
            step, tool_use_id = self._next_step(body)
        if step is None:
            return [{"type": "text", "text": FINISHED_TEXT}]
        if isinstance(step, Reply):
            return [{"type": "text", "text": step.text}]
        name, tool_input = step.tool
        blocks = []
        if step.text:
            blocks.append({"type": "text", "text": step.text})
        blocks.append({"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input})
        return blocks

    def message_id(self) -> str:
        return f"msg_{next(self._ids):024d}"


def _usage(body: dict, output_tokens: int) -> dict:
    size = len(json.dumps(body.get("messages") or []))
    return {
        "input_tokens": max(1, size // 4),
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def sse_events(
    message_id: str, model: str, body: dict, blocks: list[dict]
) -> list[tuple[str, dict]]:
    """The standard streamed sequence for one message made of `blocks`."""
    stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    out_tokens = sum(len(json.dumps(b)) for b in blocks) // 4 + 1
    events: list[tuple[str, dict]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": _usage(body, 1),
                },
            },
        )
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": block["text"]},
                    },
                )
            )
        else:
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {
                            "type": "tool_use",
                            "id": block["id"],
                            "name": block["name"],
                            "input": {},
                        },
                    },
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {
                            "type": "input_json_delta",
                            "partial_json": json.dumps(block["input"]),
                        },
                    },
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": out_tokens},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def whole_message(message_id: str, model: str, body: dict, blocks: list[dict]) -> dict:
    stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": _usage(body, sum(len(json.dumps(b)) for b in blocks) // 4 + 1),
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeAnthropic  # set on the subclass made per server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _record(self, body: Any, kind: str = "") -> Recorded:
        record = Recorded(
            self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body, kind
        )
        with self.fake._lock:
            self.fake.requests.append(record)
        return record

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("request-id", f"req_{next(self.fake._ids):024d}")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _json(self, status: int, data: dict) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def do_HEAD(self) -> None:
        self._record(None, "probe")
        self._send(200, b"", "text/plain")

    def do_GET(self) -> None:
        self._record(None, "other")
        self._json(
            404,
            {
                "type": "error",
                "error": {"type": "not_found_error", "message": f"no {self.path} here"},
            },
        )

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        path = urlsplit(self.path).path
        if path == "/v1/messages/count_tokens":
            self._record(body, "count_tokens")
            self._json(200, {"input_tokens": _usage(body, 0)["input_tokens"]})
            return
        if path != "/v1/messages":
            self._record(body, "other")
            self._json(
                404,
                {
                    "type": "error",
                    "error": {"type": "not_found_error", "message": f"no {path} here"},
                },
            )
            return
        record = self._record(body)
        fake = self.fake
        blocks = fake.answer(record)
        message_id = fake.message_id()
        if body.get("stream"):
            payload = "".join(
                f"event: {name}\ndata: {json.dumps(data)}\n\n"
                for name, data in sse_events(message_id, fake.model, body, blocks)
            )
            self._send(200, payload.encode(), "text/event-stream")
        else:
            self._json(200, whole_message(message_id, fake.model, body, blocks))
