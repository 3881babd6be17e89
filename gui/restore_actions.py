"""Restoring in place from the app: one file, the whole workspace, or undoing one revision's change.

Owns the sequence every restore takes in the window: read what it would write (a job), ask the
person with those words, restore (a write job), and say what happened — files written and
deleted, each conflict named with its reason (nothing was written to it). What a restore does and
when it is refused are core.restore's (`cairn.restores`); the words are built here without Qt
(`preview_text`, `result_text`) so they can be read and tested on their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.app import Cairn
from core.diffs import Diff
from core.history import name_paths
from core.restore import CONFLICT, DELETED, SKIPPED, WRITTEN, RestoreResult
from gui.qt import QMessageBox, QObject, Qt, QWidget, Signal

if TYPE_CHECKING:
    from gui.context import AppContext

FILE = "file"
WORKSPACE = "workspace"
UNDO = "undo"

NAMED = 5  # paths named in a confirmation or a report


@dataclass(frozen=True)
class Request:
    """What a person asked for: `kind` FILE, WORKSPACE or UNDO of revision `revision` (#seq)."""

    kind: str
    task_id: str
    revision: str
    seq: int
    path: str = ""
    # An undo the person asked to write anyway, with conflict markers, for these files.
    marked: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        if self.kind == FILE:
            return f"Restore {self.path} to #{self.seq}"
        if self.kind == WORKSPACE:
            return f"Restore the workspace to #{self.seq}"
        return f"Undo #{self.seq}'s change"


# -- the words (no Qt) ---------------------------------------------------------------------------


def preview(cairn: Cairn, request: Request) -> Diff:
    """What the restore would change, as recorded: for a file or the workspace, the latest
    revision against the target; for an undo, the revision's own change. Runs in a job."""
    if request.kind == UNDO:
        rev = cairn.revisions.resolve(cairn.tasks.get(request.task_id), request.revision)
        return cairn.revisions.diff(request.task_id, rev.parent_id, rev.id, max_bytes=1)
    paths = [request.path] if request.kind == FILE else None
    return cairn.revisions.diff(
        request.task_id, "latest", request.revision, max_bytes=1, paths=paths
    )


def preview_text(request: Request, diff: Diff) -> str:
    """The confirmation's words: what will be written and deleted, and that it can be undone."""
    after = (
        " The current files are recorded first (hand edits included), and the restore is "
        "recorded as a revision of its own, so it can be undone the same way."
    )
    if request.kind == UNDO:
        paths = [f.path for f in diff.files]
        if not paths:
            return f"#{request.seq} changed nothing; there is nothing to undo."
        return (
            f"Takes back #{request.seq}'s change to {len(paths)} "
            f"file{'' if len(paths) == 1 else 's'} ({name_paths(paths, NAMED)}) on top of the "
            "current files: a file nothing changed since goes back to how it was before "
            f"#{request.seq}; later edits elsewhere in a file are kept (three-way merge). A file "
            f"edited since where #{request.seq} changed it is a conflict: it is named and "
            "nothing is written to it." + after
        )
    # The diff is latest → target: what the target holds is its new side.
    written = [f.path for f in diff.files if f.status != "removed"]
    deleted = [f.path for f in diff.files if f.status == "removed"]
    parts = []
    if written:
        parts.append(
            f"writes {len(written)} file{'' if len(written) == 1 else 's'} as "
            f"{'it was' if len(written) == 1 else 'they were'} at #{request.seq} "
            f"({name_paths(written, NAMED)})"
        )
    if deleted:
        parts.append(
            f"deletes {len(deleted)} file{'' if len(deleted) == 1 else 's'} #{request.seq} did "
            f"not have ({name_paths(deleted, NAMED)})"
        )
    where = request.path if request.kind == FILE else "the workspace"
    if not parts:
        return (
            f"As last recorded, {where} is already as it was at #{request.seq}; only edits "
            "made since the last revision would be put back." + after
        )
    text = "This " + " and ".join(parts) + "."
    if request.kind == WORKSPACE:
        text += " Ignored files and the workspace's .git stay as they are."
    else:
        text += " Every other file stays as it is."
    return text + after


def result_text(request: Request, result: RestoreResult) -> tuple[str, bool]:
    """What the restore did, and whether something was left undone (a conflict)."""
    written = [o.path for o in result.outcomes if o.action == WRITTEN]
    deleted = [o.path for o in result.outcomes if o.action == DELETED]
    conflicts = [o for o in result.outcomes if o.action == CONFLICT]
    skipped = [o for o in result.outcomes if o.action == SKIPPED]
    lines = []
    done = []
    if written:
        done.append(
            f"wrote {len(written)} file{'' if len(written) == 1 else 's'} "
            f"({name_paths(written, NAMED)})"
        )
    if deleted:
        done.append(
            f"deleted {len(deleted)} file{'' if len(deleted) == 1 else 's'} "
            f"({name_paths(deleted, NAMED)})"
        )
    if done:
        recorded = f"; recorded as #{result.revision.seq}" if result.revision is not None else ""
        lines.append(f"{request.title}: " + " and ".join(done) + recorded + ".")
    elif not conflicts:
        lines.append(f"{request.title}: the files already matched; nothing was written.")
    if conflicts:
        lines.append(
            f"{len(conflicts)} file{'' if len(conflicts) == 1 else 's'} not written "
            "(conflicts; left as they are):"
        )
        lines.extend(f"  {o.path} — {o.reason}" for o in conflicts)
    lines.extend(f"  {o.path} skipped — {o.reason}" for o in skipped)
    if result.captured_before:
        lines.append(
            f"The files as they were just before are #{result.before.seq} (restore it to go back)."
        )
    return "\n".join(lines), bool(conflicts)


def run_restore(cairn: Cairn, request: Request) -> RestoreResult:
    """The restore itself (in a write job)."""
    if request.kind == UNDO:
        return cairn.restores.undo(
            request.task_id,
            request.revision,
            list(request.marked) or None,
            conflict_markers=bool(request.marked),
        )
    paths = [request.path] if request.kind == FILE else None
    return cairn.restores.restore(request.task_id, request.revision, paths)


# -- in the window ---------------------------------------------------------------------------------

Confirm = Callable[[QWidget, str, str], bool]
Report = Callable[[QWidget, str, str, bool], None]


def ask(parent: QWidget, title: str, text: str) -> bool:
    box = QMessageBox(QMessageBox.Icon.Question, title, text, parent=parent)
    box.setObjectName("restoreConfirm")
    ok = box.addButton("Restore", QMessageBox.ButtonRole.AcceptRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    return box.clickedButton() is ok


def ask_markers(parent: QWidget, title: str, text: str) -> bool:
    box = QMessageBox(QMessageBox.Icon.Warning, title, text, parent=parent)
    box.setObjectName("restoreMarkers")
    ok = box.addButton("Write with Conflict Markers", QMessageBox.ButtonRole.AcceptRole)
    box.addButton("Leave Them", QMessageBox.ButtonRole.RejectRole)
    box.exec()
    return box.clickedButton() is ok


def tell(parent: QWidget, title: str, text: str, problem: bool) -> None:
    icon = QMessageBox.Icon.Warning if problem else QMessageBox.Icon.Information
    box = QMessageBox(icon, title, text, parent=parent)
    box.setObjectName("restoreReport")
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()


class RestoreActions(QObject):
    """Runs restores for the widget given as parent; `confirm` and `report` may be replaced
    (the tests answer for the person)."""

    sig_done = Signal(str, bool)
    """A restore ended: (what happened, in words; whether something was left undone or it
    failed)."""

    def __init__(self, context: AppContext, parent: QWidget):
        super().__init__(parent)
        self._context = context
        self._widget = parent
        self.confirm: Confirm = ask
        self.report: Report = tell
        self.offer_markers: Confirm = ask_markers
        self._busy = False

    @property
    def busy(self) -> bool:
        return self._busy

    def start(self, request: Request) -> None:
        """Read what the restore would write, ask, then restore."""
        if self._busy:
            return
        self._busy = True
        cairn = self._context.cairn
        self._context.jobs.job(
            lambda: preview(cairn, request),
            what="read what the restore would write",
            parent=self._widget,
        ).success(lambda diff: self._confirmed(request, diff)).failure(
            lambda failure: self._failed(request, failure.sentence())
        ).run()

    def _confirmed(self, request: Request, diff: Diff | None) -> None:
        """Ask (unless the person already chose, `diff` None), then restore."""
        if diff is not None and not self.confirm(
            self._widget, request.title, preview_text(request, diff)
        ):
            self._busy = False
            return
        self._busy = True
        cairn = self._context.cairn
        self._context.jobs.job(
            lambda: run_restore(cairn, request),
            write=True,
            what=request.title[0].lower() + request.title[1:],
            parent=self._widget,
        ).success(lambda result: self._restored(request, result)).failure(
            lambda failure: self._failed(request, failure.sentence())
        ).run()

    def _restored(self, request: Request, result: RestoreResult) -> None:
        self._busy = False
        text, problem = result_text(request, result)
        self.sig_done.emit(text, problem)
        overlapping = tuple(o.path for o in result.conflicts if "edited since" in (o.reason or ""))
        if request.kind == UNDO and overlapping and not request.marked:
            # The person chooses: leave them, or write them with markers to resolve by hand.
            question = (
                f"{text}\n\nWrite {len(overlapping)} of them anyway, with conflict markers "
                "around the lines edited since, to resolve by hand?"
            )
            if self.offer_markers(self._widget, request.title, question):
                self._confirmed(dataclasses.replace(request, marked=overlapping), None)
                return
        self.report(self._widget, request.title, text, problem)

    def _failed(self, request: Request, sentence: str) -> None:
        self._busy = False
        self.sig_done.emit(sentence, True)
        self.report(self._widget, request.title, sentence, True)
