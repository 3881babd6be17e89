"""A history people can read: what produced each revision, in one line, and how revisions group.

Owns turning a workspace's revisions, the paths each changed and its runs' stored output into
descriptions ("step 2/3: sed -i s/a/b/ app.py · app.py", "Edit app.py · app.py", "edited outside
the sandbox · notes.txt", "restored to #12 · app.py"), the activity (shell step or tool call)
each revision belongs to, and the bursts of revisions of the same files within one activity that
read as one change. Reading the store, the vault and the runs' output is the caller's
(core.views); showing the rows is the adapters'. No Qt.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.models import Revision, RevisionTrigger
from core.output_blocks import AttemptStart, OutputRecord, Record
from core.vault.objects import run_git

NAMED_PATHS = 3  # paths named in a description before "and N more"
LABEL_CHARS = 72  # a command or tool call is cut to this many characters
SANDBOX_ROOT = "/workspace/"  # where the workspace is inside a sandbox (core.sandbox.base)

STEP_LINE = re.compile(r"^cairn: step (\d+)/(\d+): (.*)$")
_EDIT_TOOLS = ("Edit", "MultiEdit", "Write", "NotebookEdit")


@dataclass(frozen=True)
class Activity:
    """One thing a run did that can change files: a shell step or an agent's tool call."""

    run_id: str
    at: float  # when Cairn saw it start
    kind: str  # "step" or "tool"
    key: str  # the same step or call gives the same key within its run
    label: str  # "step 2/3: make" / "Edit app.py" / "Bash: sed -i …"


@dataclass(frozen=True)
class Described:
    """One revision with what produced it."""

    revision: Revision
    what: str  # "step 1/1: ./gen.sh", "edited outside the sandbox", "restored to #12"
    paths: tuple[str, ...]  # every path it changed, in git's order
    activity: Activity | None = None

    @property
    def description(self) -> str:
        named = name_paths(self.paths)
        return f"{self.what} · {named}" if named else self.what

    @property
    def activity_key(self) -> str:
        """What revisions of one run share to group under one heading ("" when not a run's)."""
        if self.revision.run_id is None:
            return ""
        return f"{self.revision.run_id}/{self.activity.key if self.activity else '-'}"

    @property
    def heading(self) -> str:
        """The heading of the run and activity it groups under ("" when not a run's)."""
        run = self.revision.run_id
        if run is None:
            return ""
        return f"run {run} · {self.activity.label}" if self.activity else f"run {run}"


@dataclass
class Burst:
    """Revisions next to each other, of one activity, each changing the same files: one row
    that opens to show them. `members` are oldest first."""

    members: list[Described] = field(default_factory=list)

    @property
    def first(self) -> Described:
        return self.members[0]

    @property
    def last(self) -> Described:
        return self.members[-1]

    @property
    def description(self) -> str:
        if len(self.members) == 1:
            return self.first.description
        return f"{self.last.what} · {len(self.members)} revisions of {name_paths(self.paths)}"

    @property
    def paths(self) -> tuple[str, ...]:
        seen = dict.fromkeys(p for m in self.members for p in m.paths)
        return tuple(seen)


# -- words ---------------------------------------------------------------------------------------


def clip(text: str, limit: int = LABEL_CHARS) -> str:
    """The first non-empty line of `text`, cut to `limit` characters with an ellipsis."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def name_paths(paths: Sequence[str], limit: int = NAMED_PATHS) -> str:
    """ "a.py", "a.py, b.py and 3 more"; "" for none."""
    if not paths:
        return ""
    shown = ", ".join(paths[:limit])
    more = len(paths) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def workspace_path(path: str) -> str:
    """A path a tool call named, relative to the workspace when it is inside it."""
    if path.startswith(SANDBOX_ROOT):
        return path[len(SANDBOX_ROOT) :]
    return path


# -- activities from a run's output ----------------------------------------------------------------


def activities(run_id: str, records: Iterable[Record]) -> list[Activity]:
    """The shell steps and tool calls of one run, in the order they started, from its stored
    output (core.output_blocks records). Lines without a time (output stored before times were)
    cannot be placed and are left out."""
    reader = ActivityReader(run_id)
    reader.feed(records)
    return reader.activities()


class ActivityReader:
    """`activities` a piece at a time: a run's output read as it grows, each part once."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self._found: list[Activity] = []
        self._keys: set[str] = set()
        self._buffer = ""  # a line not ended yet
        self._buffer_at: float | None = None  # and when it began

    def feed(self, records: Iterable[Record]) -> None:
        for record in records:
            if isinstance(record, AttemptStart):
                self._buffer, self._buffer_at = "", None
                continue
            if not isinstance(record, OutputRecord) or record.stream != "stdout":
                continue
            if not self._buffer:
                self._buffer_at = record.at
            lines = (self._buffer + record.text).split("\n")
            self._buffer = lines.pop()
            for i, line in enumerate(lines):
                at = self._buffer_at if i == 0 else record.at
                if at is None:
                    continue
                for act in _line_activities(self.run_id, line, at, len(self._found)):
                    if act.kind == "tool" and act.key in self._keys:
                        continue  # the same call again (Codex: started, then completed)
                    self._keys.add(act.key)
                    self._found.append(act)
            if lines:
                self._buffer_at = record.at

    def activities(self) -> list[Activity]:
        """What was found so far, the line not ended yet included."""
        out = list(self._found)
        if self._buffer and self._buffer_at is not None:
            out.extend(_line_activities(self.run_id, self._buffer, self._buffer_at, len(out)))
        return out


def _line_activities(run_id: str, line: str, at: float, calls: int) -> list[Activity]:
    stripped = line.strip()
    step = STEP_LINE.match(stripped)
    if step:
        n, total, command = step.groups()
        return [Activity(run_id, at, "step", f"step:{n}", f"step {n}/{total}: {clip(command)}")]
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return []
    try:
        event = json.loads(stripped)
    except ValueError:
        return []
    if not isinstance(event, dict):
        return []
    out = []
    for n, (call_id, label) in enumerate(_tool_calls(event)):
        key = f"tool:{call_id}" if call_id else f"tool:#{calls + n}"
        out.append(Activity(run_id, at, "tool", key, label))
    return out


def _tool_calls(event: dict) -> list[tuple[str | None, str]]:
    """(call id, label) of each tool call an engine's stream-json event starts."""
    kind = event.get("type")
    message = event.get("message")
    if kind == "assistant" and isinstance(message, dict):  # Claude Code
        calls = []
        for part in message.get("content") or []:
            if isinstance(part, dict) and part.get("type") == "tool_use":
                tool_input = part.get("input")
                calls.append(
                    (
                        _id(part.get("id")),
                        tool_label(
                            str(part.get("name") or ""),
                            tool_input if isinstance(tool_input, dict) else {},
                        ),
                    )
                )
        return calls
    item = event.get("item")
    if isinstance(kind, str) and kind.startswith("item.") and isinstance(item, dict):  # Codex
        item_type = item.get("type") or item.get("item_type")
        if item_type == "command_execution" and kind == "item.started":
            return [(_id(item.get("id")), f"Shell: {clip(_unwrap(str(item.get('command'))))}")]
        if item_type == "file_change" and kind in ("item.started", "item.completed"):
            changes = [c for c in item.get("changes") or [] if isinstance(c, dict)]
            verbs = {"add": "Add", "delete": "Delete", "update": "Edit"}
            words = [
                f"{verbs.get(str(c.get('kind')), 'Edit')} {workspace_path(str(c.get('path')))}"
                for c in changes
            ]
            return [(_id(item.get("id")), clip(", ".join(words)) or "Edit files")]
        return []
    if event.get("kind") == "tool_call" and isinstance(event.get("data"), dict):  # Cairn's own
        data = event["data"]
        tool_input = data.get("input")
        return [
            (
                _id(data.get("id")),
                tool_label(str(data.get("name") or ""), tool_input or data),
            )
        ]
    return []


def tool_label(name: str, tool_input: dict) -> str:
    """ "Edit app.py", "Bash: sed -i …", "Write notes.md"."""
    path = tool_input.get("file_path") or tool_input.get("path") or tool_input.get("notebook_path")
    if name in _EDIT_TOOLS and path:
        return f"{name} {workspace_path(str(path))}"
    command = tool_input.get("command")
    if command:
        return f"{name or 'Bash'}: {clip(str(command))}"
    if path:
        return f"{name} {workspace_path(str(path))}"
    return name or "a tool call"


def _unwrap(command: str) -> str:
    """Codex runs each command as `bash -lc '…'`: the part that says what it does."""
    m = re.match(r"^\S*(?:bash|sh|zsh)\s+-l?c\s+(['\"])(.*)\1\s*$", command, re.S)
    return m.group(2) if m else command


def _id(value: object) -> str | None:
    return str(value) if isinstance(value, (str, int)) and value != "" else None


def activity_at(acts: Sequence[Activity], at: float) -> Activity | None:
    """The activity that was going at `at`: the last one started at or before it (the first
    one when `at` comes before them all, as a revision can be seen before its call's line)."""
    found = None
    for act in acts:
        if act.at <= at:
            found = act
        else:
            break
    if found is None and acts:
        return acts[0]
    return found


# -- describing revisions ----------------------------------------------------------------------


def describe(
    revisions: Sequence[Revision],
    paths: dict[str, Sequence[str]],
    *,
    run_activities: dict[str, list[Activity]] | None = None,
    restores: dict[str, tuple[str, str]] | None = None,
) -> list[Described]:
    """Each revision (oldest first) with its description. `paths`: what each changed, by id;
    `run_activities`: each run's activities, by run id; `restores`: (kind, source revision id)
    of each restore's revision (core.restore.restore_note)."""
    seq_of = {r.id: r.seq for r in revisions}
    acts = run_activities or {}
    notes = restores or {}
    out = []
    for rev in revisions:
        activity = None
        if rev.run_id:
            activity = activity_at(acts.get(rev.run_id, []), rev.created_at)
        what = _what(rev, activity, notes.get(rev.id), seq_of)
        out.append(Described(rev, what, tuple(paths.get(rev.id, ())), activity))
    return out


def _what(
    rev: Revision,
    activity: Activity | None,
    note: tuple[str, str] | None,
    seq_of: dict[str, int],
) -> str:
    trigger = rev.trigger
    if trigger == RevisionTrigger.BASE.value or rev.parent_id is None:
        return "the folder the task started from"
    if trigger == RevisionTrigger.RESTORE.value:
        if note is None:
            return "restored"
        kind, source = note
        where = f"#{seq_of[source]}" if source in seq_of else source[:12]
        if kind == "undo":
            return f"undid {where}'s change"
        if kind == "workspace":
            return f"restored the workspace to {where}"
        return f"restored to {where}"
    if trigger == RevisionTrigger.EXTERNAL.value:
        return "edited outside the sandbox"
    if trigger == RevisionTrigger.MANUAL.value:
        return "captured by hand"
    if activity is not None:
        return f"{activity.label} (checkpoint)" if trigger == "checkpoint" else activity.label
    if trigger == RevisionTrigger.CHECKPOINT.value:
        return "checkpoint"
    if rev.run_id:
        return f"during run {rev.run_id}"
    return "edited outside the sandbox"


def bursts(described: Sequence[Described]) -> list[Burst]:
    """Revisions (oldest first) cut into bursts: next to each other, of the same run and activity,
    made the same way, each changing the same files. A revision on its own is a burst of one."""
    out: list[Burst] = []
    for d in described:
        last = out[-1].last if out else None
        if (
            last is not None
            and d.revision.run_id is not None
            and d.activity_key == last.activity_key
            and d.revision.trigger == last.revision.trigger
            and d.revision.trigger == RevisionTrigger.WATCH.value
            and set(d.paths) == set(last.paths)
            and d.paths
        ):
            out[-1].members.append(d)
        else:
            out.append(Burst([d]))
    return out


def matches(d: Described, text: str) -> bool:
    """Whether a search for `text` (case-insensitive; every word must match) finds `d`: in its
    description, any path it changed, its run or its id."""
    words = text.lower().split()
    if not words:
        return True
    hay = " ".join(
        [d.what, *d.paths, d.revision.run_id or "", d.revision.id, d.revision.trigger]
    ).lower()
    return all(w in hay for w in words)


# -- what each revision changed ------------------------------------------------------------------


def changed_paths(git_dir: Path, revision_ids: Sequence[str]) -> dict[str, list[str]]:
    """The paths each revision commit changed against its parent (all of them for a root
    commit), in one git process."""
    if not revision_ids:
        return {}
    proc = run_git(
        [
            "--git-dir",
            os.fspath(git_dir),
            "diff-tree",
            "--stdin",
            "-r",
            "-z",
            "--name-only",
            "--no-renames",
            "--root",
            "--always",
        ],
        input="".join(f"{r}\n" for r in revision_ids).encode(),
    )
    out: dict[str, list[str]] = {}
    wanted = list(revision_ids)
    n = 0
    current: list[str] | None = None
    for token in proc.stdout.split(b"\0"):
        text = os.fsdecode(token).strip("\n")
        if n < len(wanted) and text == wanted[n]:
            current = out.setdefault(wanted[n], [])
            n += 1
            continue
        if text and current is not None:
            current.append(text)
    return out


# -- markers -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    """Something that happened at a revision: a checkpoint, a snapshot, an approval or a fork."""

    kind: str  # "checkpoint", "snapshot", "approval" or "fork"
    at: float
    revision_id: str  # the revision it belongs to
    label: str
    ref: str  # its own id (checkpoint, snapshot, approval or the fork's task)


def revision_at(revisions: Sequence[Revision], at: float) -> Revision | None:
    """The revision the files were at, at time `at`: the last recorded at or before it (the
    first when `at` is earlier than all)."""
    found = None
    for rev in sorted(revisions, key=lambda r: (r.created_at, r.seq)):
        if rev.created_at <= at:
            found = rev
        else:
            break
    return found if found is not None else (revisions[0] if revisions else None)
