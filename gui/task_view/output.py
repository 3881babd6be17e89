"""A run's output as blocks a person can read: one per tool call (its command or file, its
output, its exit status) and per shell step, agent messages, results and errors, each attempt
under its own header, with times.

Owns recognising the line protocols engines print (Claude Code's stream-json, Codex's exec
--json, Cairn's own {"kind": ...} events), cutting chunks into complete lines, and grouping the
lines into blocks (`Transcript`). No Qt: drawing the blocks belongs to the task view.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from core.engines.base import json_object
from core.engines.claude_code import LAUNCH_MARKER
from core.engines.codex import unwrap_shell

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
EXIT_LINE = re.compile(r"^Exit code (\d+)\b")


@dataclass(frozen=True)
class OutputBlock:
    """One parsed line (or message) of output. `tool_id` ties a tool's result to its call;
    `exit_code` is the command's, where the engine reports it."""

    kind: str
    text: str
    tool_id: str | None = field(default=None, compare=False)
    exit_code: int | None = field(default=None, compare=False)


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


def _tool_use(name: str, tool_input: dict, tool_id: str | None = None) -> OutputBlock:
    path = tool_input.get("file_path") or tool_input.get("path") or tool_input.get("notebook_path")
    if name in ("Edit", "MultiEdit", "Write", "NotebookEdit") and path:
        verb = "wrote" if name == "Write" else "edited"
        return OutputBlock(EDIT, f"{verb} {path}", tool_id)
    command = tool_input.get("command")
    if command:
        return OutputBlock(
            TOOL, f"$ {command}" if name in ("Bash", "shell", "") else f"{name}: {command}", tool_id
        )
    if path:
        return OutputBlock(TOOL, f"{name} {path}", tool_id)
    pattern = tool_input.get("pattern") or tool_input.get("query") or tool_input.get("url")
    return OutputBlock(TOOL, f"{name} {pattern}" if pattern else name, tool_id)


def _id(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int)) and value != "" else None


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
                blocks.append(
                    _tool_use(part.get("name", ""), part.get("input") or {}, _id(part.get("id")))
                )
            elif part.get("type") == "tool_result":
                text = _content_text(part.get("content"))
                tool_id = _id(part.get("tool_use_id"))
                if part.get("is_error"):
                    # Claude Code starts a failed command's result with "Exit code N".
                    code = EXIT_LINE.match(text)
                    blocks.append(
                        OutputBlock(ERROR, _clip(text), tool_id, int(code[1]) if code else None)
                    )
                else:
                    blocks.append(OutputBlock(TOOL_RESULT, _clip(text), tool_id))
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
            item_id = _id(item.get("id"))
            if not done:
                command = unwrap_shell(str(item.get("command") or ""))
                return [OutputBlock(TOOL, f"$ {command}", item_id)]
            code = item.get("exit_code")
            code = code if isinstance(code, int) else None
            # The exit code is the block's status (gui.task_view.output.Transcript).
            output = _clip(str(item.get("aggregated_output", "")))
            return [OutputBlock(TOOL_RESULT, output, item_id, code)]
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
        return [
            _tool_use(
                str(data.get("name", "")), _object(data.get("input")) or data, _id(data.get("id"))
            )
        ]
    if kind == "tool_result":
        code = data.get("exit_code")
        return [
            OutputBlock(
                ERROR if data.get("is_error") else TOOL_RESULT,
                _clip(_content_text(data.get("output") or data.get("content"))),
                _id(data.get("id") or data.get("tool_use_id")),
                code if isinstance(code, int) else None,
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
        if event is not None and event.get("type") == LAUNCH_MARKER:
            return []  # Cairn's own line at the start of an attempt, not the run's output
        if event is not None:
            for reader in (_claude, _codex, _cairn):
                blocks = reader(event)
                if blocks is not None:
                    # An empty result still ends its tool call (its status), so it is kept.
                    return [b for b in blocks if b.text or b.kind == MESSAGE or b.tool_id]
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


# -- blocks of a transcript ---------------------------------------------------------------------

# Kinds of a transcript's blocks (besides the line kinds above, which their lines keep).
ATTEMPT, STEP, CALL, TEXT = "attempt", "step", "call", "text"
RUNNING, DONE, FAILED, INTERRUPTED = "running", "ok", "failed", "interrupted"

# A line a shell run prints as a step starts: "cairn: step 2/5: make test" (the total is optional).
# It may follow a step's last line that had no line end, on the same line.
STEP_LINE = re.compile(r"cairn: step (\d+)(?:/(\d+))?: (.*)$")


@dataclass
class Block:
    """A run of output shown together: an attempt's header, one shell step, one tool call with
    its result, an agent's message, or output outside any of them.

    `version` grows with every change, so a view redraws only what changed."""

    kind: str
    title: str
    lines: list[OutputBlock] = field(default_factory=list)
    status: str = ""
    exit_code: int | None = None
    started: float | None = None
    ended: float | None = None
    tool_id: str | None = None
    version: int = 0
    dropped: int = 0  # its earliest lines left out, past Transcript.MAX_LINES

    @property
    def collapsible(self) -> bool:
        return self.kind in (STEP, CALL, TEXT)

    @property
    def open(self) -> bool:
        return self.status == RUNNING

    def add(self, line: OutputBlock, at: float | None) -> None:
        self.lines.append(line)
        self.touch(at)

    def touch(self, at: float | None) -> None:
        if at is not None:
            if self.started is None:
                self.started = at
            self.ended = at
        self.version += 1

    def close(self, status: str, at: float | None = None, exit_code: int | None = None) -> None:
        self.status = status
        if exit_code is not None:
            self.exit_code = exit_code
        self.touch(at)

    def text(self) -> str:
        """The block as text to copy: its header, then its lines."""
        head = header_text(self)
        body = "\n".join(line.text for line in self.lines)
        return head + ("\n" + body if body else "")


def duration_words(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def status_words(block: Block) -> str:
    if block.status == RUNNING:
        return "running"
    if block.exit_code is not None:
        return f"exit {block.exit_code}"
    return {DONE: "ok", FAILED: "failed", INTERRUPTED: "interrupted"}.get(block.status, "")


def header_text(block: Block) -> str:
    """A block's header line: what it is, when it started, how long it took, how it ended."""
    parts = [block.title]
    if block.started is not None:
        parts.append(clock(block.started))
        if block.ended is not None and block.ended > block.started and not block.open:
            parts.append(duration_words(block.ended - block.started))
    status = status_words(block)
    if status:
        parts.append(status)
    if block.kind == TEXT or (block.kind == STEP and block.lines):
        n = len(block.lines) + block.dropped
        parts.append(f"{n:,} line{'' if n == 1 else 's'}")
    if block.dropped:
        parts.append(f"the first {block.dropped:,} not kept")
    return " · ".join(parts)


class Transcript:
    """A run's output cut into blocks as it arrives (chunks, attempt starts, the end).

    Lines go into the block they belong to: a tool's result into its call (matched by id, else
    the latest call), a shell step's output into its step; anything else into a block of plain
    output. A new attempt closes what the previous one left open and starts on its own line."""

    MAX_LINES = 20_000  # lines kept per block; the earliest are dropped past it

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self._reader = OutputReader()
        self._calls: dict[str, Block] = {}
        self.attempts = 0

    # -- feeding ----------------------------------------------------------------------------

    def feed(self, stream: str, text: str, at: float | None = None) -> None:
        for line in self._reader.feed(stream, text):
            self._take(line, at)

    def start_attempt(self, number: int, reason: str = "", at: float | None = None) -> None:
        """A new attempt: unfinished lines end here, open blocks were interrupted."""
        for line in self._reader.flush():
            self._take(line, at)
        for block in self.blocks:
            if block.open:
                block.close(INTERRUPTED)
        self.attempts = max(self.attempts, number)
        title = f"attempt {number}" + (f" · resumed: {reason}" if reason else "")
        self.blocks.append(Block(ATTEMPT, title, started=at, ended=at))

    def finish(self, exit_code: int | None = None, at: float | None = None) -> None:
        """The run ended: its last lines are taken, and what is still open is closed (the last
        shell step with the run's exit code)."""
        for line in self._reader.flush():
            self._take(line, at)
        for block in self.blocks:
            if not block.open:
                continue
            if block.kind == STEP and exit_code is not None:
                block.close(DONE if exit_code == 0 else FAILED, at, exit_code)
            elif block.kind == STEP:
                block.close(DONE, at)
            else:
                block.close(INTERRUPTED if exit_code is None and block.kind == CALL else DONE, at)

    # -- where a line goes --------------------------------------------------------------------

    def _take(self, line: OutputBlock, at: float | None) -> None:
        kind = line.kind
        if kind in (TOOL, EDIT):
            block = Block(CALL, line.text, status=RUNNING, tool_id=line.tool_id)
            block.touch(at)
            self.blocks.append(block)
            if line.tool_id:
                self._calls[line.tool_id] = block
            elif kind == EDIT:
                block.close(DONE, at)  # an edit reported once it is done
            return
        if kind in (TOOL_RESULT, ERROR) and (line.tool_id or kind == TOOL_RESULT):
            call = self._calls.pop(line.tool_id, None) if line.tool_id else None
            if call is None and kind == TOOL_RESULT:
                call = next(
                    (b for b in reversed(self.blocks[-3:]) if b.kind == CALL and b.open), None
                )
            if call is not None:
                if line.text:
                    for part in line.text.split("\n"):
                        call.add(OutputBlock(kind, part), at)
                failed = kind == ERROR or line.exit_code not in (None, 0)
                call.close(FAILED if failed else DONE, at, line.exit_code)
                return
            if not line.text:
                return
        if kind in (PLAIN, STDERR):
            self._plain(line, at)
            return
        # A message, a session, the result, an error of the run: a block of its own.
        block = Block(kind, line.text.split("\n", 1)[0])
        for part in line.text.split("\n")[1:]:
            block.lines.append(OutputBlock(kind, part))
        block.touch(at)
        self.blocks.append(block)

    def _plain(self, line: OutputBlock, at: float | None) -> None:
        step = STEP_LINE.search(line.text) if line.kind == PLAIN else None
        if step is not None and step.start() > 0:
            # "…no line endcairn: step 3/4: …": the unfinished line stays with its step.
            self._plain(replace(line, text=line.text[: step.start()]), at)
            line = replace(line, text=line.text[step.start() :])
            step = STEP_LINE.match(line.text)
        if step is not None:
            for block in self.blocks:
                if block.kind == STEP and block.open:
                    block.close(DONE, at, 0)  # a step that failed would have ended the run
            number, total, command = step.groups()
            title = f"step {number}{'/' + total if total else ''} · $ {command}"
            block = Block(STEP, title, status=RUNNING)
            block.touch(at)
            self.blocks.append(block)
            return
        last = self.blocks[-1] if self.blocks else None
        if last is None or not (
            (last.kind == STEP and last.open)
            or last.kind == TEXT
            or (last.kind == CALL and last.open)
        ):
            last = Block(TEXT, "output")
            self.blocks.append(last)
        last.add(line, at)
        if len(last.lines) > self.MAX_LINES + 500:
            dropped = len(last.lines) - self.MAX_LINES
            del last.lines[:dropped]
            last.dropped += dropped

    def text(self) -> str:
        return "\n".join(b.text() for b in self.blocks)
