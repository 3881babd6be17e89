"""A run's output as blocks a person can read: agent messages, tool calls with their commands,
file edits, results and errors, and plain lines for the shell engine.

Owns recognising the line protocols engines print (Claude Code's stream-json, Codex's exec
--json, Cairn's own {"kind": ...} events) and cutting chunks into complete lines. No Qt:
drawing the blocks belongs to the task view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.engines.base import json_object

PLAIN, STDERR, MESSAGE, TOOL, TOOL_RESULT, EDIT, RESULT, ERROR, SESSION, NOTE = (
    "plain",
    "stderr",
    "message",
    "tool",
    "tool_result",
    "edit",
    "result",
    "error",
    "session",
    "note",
)

RESULT_PREVIEW = 400  # characters of a tool's output shown under its call


@dataclass(frozen=True)
class OutputBlock:
    kind: str
    text: str


def _clip(text: str, limit: int = RESULT_PREVIEW) -> str:
    text = text.rstrip()
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def _object(value: Any) -> dict[str, Any]:
    """A JSON object as a dict; anything else (missing, a string, a list) as an empty one."""
    return value if isinstance(value, dict) else {}


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            _content_text(c.get("text", "")) if isinstance(c, dict) else str(c) for c in content
        )
    return "" if content is None else str(content)


def _tool_use(name: str, tool_input: dict) -> OutputBlock:
    path = tool_input.get("file_path") or tool_input.get("path") or tool_input.get("notebook_path")
    if name in ("Edit", "MultiEdit", "Write", "NotebookEdit") and path:
        verb = "wrote" if name == "Write" else "edited"
        return OutputBlock(EDIT, f"{verb} {path}")
    command = tool_input.get("command")
    if command:
        return OutputBlock(
            TOOL, f"$ {command}" if name in ("Bash", "shell", "") else f"{name}: {command}"
        )
    if path:
        return OutputBlock(TOOL, f"{name} {path}")
    pattern = tool_input.get("pattern") or tool_input.get("query") or tool_input.get("url")
    return OutputBlock(TOOL, f"{name} {pattern}" if pattern else name)


def _claude(event: dict) -> list[OutputBlock] | None:
    kind = event.get("type")
    if kind == "system" and event.get("subtype") == "init":
        return [
            OutputBlock(
                SESSION,
                f"session {event.get('session_id', '?')} ({event.get('model', 'model unknown')})",
            )
        ]
    if kind in ("assistant", "user") and isinstance(event.get("message"), dict):
        blocks = []
        for part in event["message"].get("content") or []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and part.get("text", "").strip():
                blocks.append(OutputBlock(MESSAGE, part["text"].strip()))
            elif part.get("type") == "tool_use":
                blocks.append(_tool_use(part.get("name", ""), part.get("input") or {}))
            elif part.get("type") == "tool_result":
                text = _content_text(part.get("content"))
                if part.get("is_error"):
                    blocks.append(OutputBlock(ERROR, _clip(text)))
                elif text.strip():
                    blocks.append(OutputBlock(TOOL_RESULT, _clip(text)))
        return blocks
    if kind == "result":
        text = event.get("result") or event.get("subtype") or "done"
        return [OutputBlock(ERROR if event.get("is_error") else RESULT, str(text).strip())]
    return None


def _codex(event: dict) -> list[OutputBlock] | None:
    kind = event.get("type", "")
    if kind == "thread.started":
        return [OutputBlock(SESSION, f"thread {event.get('thread_id', '?')}")]
    if kind in ("turn.failed", "error"):
        raw = event.get("error")
        error: dict[str, Any] = raw if isinstance(raw, dict) else event
        return [OutputBlock(ERROR, str(error.get("message", "the turn failed")))]
    if kind.startswith("item.") and isinstance(event.get("item"), dict):
        item = event["item"]
        item_type = item.get("type") or item.get("item_type")
        done = kind == "item.completed"
        if item_type == "agent_message" and done:
            return [OutputBlock(MESSAGE, str(item.get("text", "")).strip())]
        if item_type == "command_execution":
            if not done:
                return [OutputBlock(TOOL, f"$ {item.get('command', '')}")]
            out = (
                [OutputBlock(TOOL_RESULT, _clip(str(item.get("aggregated_output", ""))))]
                if str(item.get("aggregated_output", "")).strip()
                else []
            )
            code = item.get("exit_code")
            if code not in (None, 0):
                out.append(OutputBlock(ERROR, f"exit code {code}"))
            return out
        if item_type == "file_change" and done:
            return [
                OutputBlock(EDIT, f"{c.get('kind', 'changed')} {c.get('path', '?')}")
                for c in item.get("changes") or []
                if isinstance(c, dict)
            ]
        if item_type == "error":
            return [OutputBlock(ERROR, str(item.get("message", "")))]
        return []  # reasoning, todo lists, started items: not shown
    return None


def _cairn(event: dict) -> list[OutputBlock] | None:
    kind = event.get("kind")
    data = _object(event.get("data"))
    if kind == "message":
        return [OutputBlock(MESSAGE, str(data.get("text", "")).strip())]
    if kind == "tool_call":
        return [_tool_use(str(data.get("name", "")), _object(data.get("input")) or data)]
    if kind == "tool_result":
        return [
            OutputBlock(
                ERROR if data.get("is_error") else TOOL_RESULT,
                _clip(_content_text(data.get("output") or data.get("content"))),
            )
        ]
    if kind == "file_edit":
        return [OutputBlock(EDIT, f"edited {data.get('path', '?')}")]
    if kind == "error":
        return [OutputBlock(ERROR, str(data.get("message", "")))]
    if kind == "result":
        return [OutputBlock(RESULT, str(data.get("text") or data.get("result") or "done"))]
    if kind == "session":
        return [OutputBlock(SESSION, f"session {data.get('session_id', '?')}")]
    if kind == "usage":
        return []
    return None


def parse_line(line: str, stream: str = "stdout") -> list[OutputBlock]:
    """The blocks one complete output line becomes."""
    stripped = line.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        event = json_object(stripped)
        if event is not None:
            for reader in (_claude, _codex, _cairn):
                blocks = reader(event)
                if blocks is not None:
                    return [b for b in blocks if b.text or b.kind == MESSAGE]
    return [OutputBlock(STDERR if stream == "stderr" else PLAIN, line.rstrip("\r"))]


class OutputReader:
    """Turns chunks of a run's streams into blocks; a chunk may end mid-line."""

    def __init__(self) -> None:
        self._partial: dict[str, str] = {}

    def feed(self, stream: str, text: str) -> list[OutputBlock]:
        data = self._partial.pop(stream, "") + text
        lines = data.split("\n")
        if lines[-1]:
            self._partial[stream] = lines[-1]
        blocks: list[OutputBlock] = []
        for line in lines[:-1]:
            blocks.extend(parse_line(line, stream))
        return blocks

    def flush(self) -> list[OutputBlock]:
        """What is left of unfinished lines (the run ended without a last newline)."""
        blocks: list[OutputBlock] = []
        for stream, rest in self._partial.items():
            blocks.extend(parse_line(rest, stream))
        self._partial.clear()
        return blocks


def read_all(text: str, stream: str = "stdout") -> list[OutputBlock]:
    reader = OutputReader()
    return reader.feed(stream, text) + reader.flush()
