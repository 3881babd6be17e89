"""One approval card: what a run asks to do, and Approve, Deny (with a reason) and Remember.

Owns how a request reads. A program start shows what will run — the resolved program and its
arguments, the folder, the rule and why, the programs that started it, and for a shell script
the whole script with the step it came from marked — so what a person approves is what runs.
An agent's tool call shows its command line. Every text that comes from the run is plain text
(an argument may hold `<b>`), with control characters written out. Sending the decision is the
panel's.
"""

from __future__ import annotations

import html
import shlex
import time

from gui.approvals.data import PendingApproval, ProgramStart, visible, waited
from gui.elide import ElidedLabel
from gui.icons import icon
from gui.qt import (
    QCheckBox,
    QColor,
    QEvent,
    QFont,
    QFontDatabase,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPalette,
    QPlainTextEdit,
    QPushButton,
    QResizeEvent,
    QSize,
    QSizePolicy,
    Qt,
    QTextCursor,
    QTextOption,
    QVBoxLayout,
    QWidget,
    Signal,
)

REASON_PLACEHOLDER = "Reason sent to the run (optional)"
REASON_MAX_CHARS = 1000
SCRIPT_LINES = 8  # a script taller than this scrolls inside the card
PARENTS_SHOWN = 3  # "started by" names the nearest programs above; the tooltip has them all
MARK = "▶"
SLACK_PX = 1  # the editor scrolls unless its viewport is a pixel taller than the text


def remember_text(approval: PendingApproval) -> str:
    """What "Remember" keeps, said exactly: a program start remembers its rule, a tool call its
    exact command (a mnemonic's `&` in a rule id doubled so it shows)."""
    if approval.program is not None:
        rule = (approval.rule or "").replace("&", "&&")
        return f"&Remember rule {rule} for this task"
    return "&Remember this exact command for this task"


def mixed(one: QColor, other: QColor, share: float) -> QColor:
    """`share` of `other` over `one`: a tint that keeps the text colour readable on it."""
    return QColor(
        round(one.red() + (other.red() - one.red()) * share),
        round(one.green() + (other.green() - one.green()) * share),
        round(one.blue() + (other.blue() - one.blue()) * share),
    )


def _plain_label(text: str, parent: QWidget, *, fixed: bool = False) -> QLabel:
    label = QLabel(parent)
    label.setTextFormat(Qt.TextFormat.PlainText)  # never rich text, whatever the run wrote
    label.setText(text)
    # The width is the card's, not the text's (an argument without spaces cannot wrap); set
    # before the word wrap, which marks the policy as height-for-width.
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if fixed:
        label.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    return label


class ScriptView(QPlainTextEdit):
    """A shell script's steps, numbered, read-only and compact, with one step marked (a tint of
    the palette's highlight, so light and dark palettes both read, and a ▶ for who cannot tell
    the colours apart). Taller than SCRIPT_LINES lines, it scrolls, starting at the marked step."""

    def __init__(
        self,
        steps: tuple[str, ...],
        step: int | None,
        parent: QWidget | None = None,
        *,
        words: tuple[str, ...] = (),
    ):
        super().__init__(parent)
        self.steps = steps
        self.step = step
        self.words = words  # how the program may be written in the step, most exact first
        self.matched = ""  # the words found and underlined in the marked step
        self._blocks: tuple[int, int] | None = None  # the marked step's first and last block
        self._fitted_width = -1
        self.setObjectName("approvalScript")
        self.setReadOnly(True)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        # A long step wraps rather than hiding its end beyond the card's right edge.
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setPlainText(self._text())
        self.setAccessibleName("Shell script")
        if step is not None:
            self.setAccessibleDescription(f"step {step + 1} of {len(steps)} started this program")
        self._mark()
        self._fit()

    def _text(self) -> str:
        width = len(str(len(self.steps)))
        lines = []
        block = 0
        for index, command in enumerate(self.steps):
            parts = visible(command).split("\n")
            lead = MARK if index == self.step else " "
            if index == self.step:
                self._blocks = (block, block + len(parts) - 1)
            lines.append(f"{lead}{index + 1:>{width}}  {parts[0]}")
            lines.extend(" " * (width + 3) + part for part in parts[1:])
            block += len(parts)
        return "\n".join(lines)

    def _underline(self, start: int, end: int) -> None:
        """The program's own words in the marked step, bold and underlined, when they are there
        as written (a disguised spelling is marked by its step only)."""
        doc = self.document()
        for words in self.words:
            if not words.strip():
                continue
            found = doc.find(words, start)
            if found.isNull() or found.selectionEnd() > end:
                continue
            fmt = found.charFormat()
            fmt.setFontUnderline(True)
            fmt.setFontWeight(QFont.Weight.Bold)
            found.mergeCharFormat(fmt)
            self.matched = words
            return

    def marked_text(self) -> str:
        """The text of the marked step's lines, as shown (empty without a marked step)."""
        if self._blocks is None:
            return ""
        first, last = self._blocks
        doc = self.document()
        return "\n".join(doc.findBlockByNumber(n).text() for n in range(first, last + 1))

    def mark_colour(self) -> QColor:
        palette = self.palette()
        return mixed(
            palette.color(QPalette.ColorRole.Base),
            palette.color(QPalette.ColorRole.Highlight),
            0.35,
        )

    def _mark(self) -> None:
        if self._blocks is None:
            return
        first, last = self._blocks
        doc = self.document()
        cursor = QTextCursor(doc.findBlockByNumber(first))
        cursor.movePosition(
            QTextCursor.MoveOperation.NextBlock, QTextCursor.MoveMode.KeepAnchor, last - first
        )
        fmt = cursor.blockFormat()
        fmt.setBackground(self.mark_colour())
        cursor.setBlockFormat(fmt)
        last_block = doc.findBlockByNumber(last)
        self._underline(
            doc.findBlockByNumber(first).position(), last_block.position() + last_block.length()
        )
        self.setTextCursor(QTextCursor(doc.findBlockByNumber(first)))

    def _fit(self) -> None:
        """As tall as the script, up to SCRIPT_LINES lines (wrapping depends on the width)."""
        self._fitted_width = self.viewport().width()
        spacing = self.fontMetrics().lineSpacing()
        cap = SCRIPT_LINES * spacing
        height = 0.0
        block = self.document().firstBlock()
        while block.isValid() and height < cap:
            height += self.blockBoundingRect(block).height()
            block = block.next()
        margins = self.contentsMargins()
        frame = margins.top() + margins.bottom()
        # The last block's height holds the bottom margin already; the top one sits above it.
        margin = self.document().documentMargin()
        self.setFixedHeight(round(min(height, cap + margin) + margin + frame) + SLACK_PX)
        if self._blocks is not None:
            # The marked step in view, with the line before it for context.
            self.verticalScrollBar().setValue(max(0, self._blocks[0] - 1))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self.viewport().width() != self._fitted_width:
            self._fit()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._mark()
        elif event.type() == QEvent.Type.FontChange:
            self._fit()


class ReasonEdit(QLineEdit):
    """The optional reason a denial sends back to the run; as wide as its placeholder when
    there is room, narrower when not."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("denyReason")
        self.setPlaceholderText(REASON_PLACEHOLDER)
        self.setToolTip("Why it is denied, sent back to the run; Enter denies")
        self.setMaxLength(REASON_MAX_CHARS)
        self.setClearButtonEnabled(True)
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance("x") * 16)

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(self.fontMetrics().horizontalAdvance(REASON_PLACEHOLDER) + 40, hint.height())


class ApprovalCard(QFrame):
    """One request. A approves, D denies (with the reason typed, if any), R toggles Remember —
    while the card, not the reason field, has the focus; Enter in the reason field denies."""

    sig_approve = Signal(str, bool)
    """Approve the request (id, remember: its rule or its exact command, for its task)."""

    sig_deny = Signal(str, str)
    """Deny the request (id, the reason sent back to the run; "" for none)."""

    def __init__(self, approval: PendingApproval, parent: QWidget | None = None):
        super().__init__(parent)
        self.approval = approval
        self.setObjectName("approvalCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setToolTip("A: approve · D: deny · R: remember")
        self.cwd_label: QLabel | None = None
        self.parents_label: ElidedLabel | None = None
        self.matched_label: QLabel | None = None
        self.script_view: ScriptView | None = None
        layout = QVBoxLayout(self)
        task = approval.task_title or approval.task_id or "a task"
        head = QLabel(
            f"<b>{html.escape(task)}</b>"
            + (f" · run {html.escape(approval.run_id)}" if approval.run_id else ""),
            self,
        )
        head.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        head.setWordWrap(True)  # a long task title takes lines, not the card's width
        top = QHBoxLayout()
        top.addWidget(head, 1)
        self.waiting_label = QLabel(self)
        self.waiting_label.setEnabled(False)
        top.addWidget(self.waiting_label)
        layout.addLayout(top)
        if approval.program is None:
            self._tool_call(layout)
        else:
            self._program_start(layout, approval.program)
        layout.addLayout(self._decision_row())
        self.update_waiting()

    def _tool_call(self, layout: QVBoxLayout) -> None:
        approval = self.approval
        self.command_label = _plain_label(visible(approval.command), self, fixed=True)
        self.command_label.setObjectName("approvalCommand")
        layout.addWidget(self.command_label)
        why = approval.reason or "no reason given"
        rule = f"rule {approval.rule}: " if approval.rule else ""
        self.why_label = _plain_label(f"{rule}{why}", self)
        layout.addWidget(self.why_label)

    def _program_start(self, layout: QVBoxLayout, program: ProgramStart) -> None:
        approval = self.approval
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)

        runs = QWidget(self)
        runs_layout = QVBoxLayout(runs)
        runs_layout.setContentsMargins(0, 0, 0, 0)
        runs_layout.setSpacing(0)
        self.command_label = _plain_label(visible(program.command_line), runs, fixed=True)
        self.command_label.setObjectName("approvalCommand")
        runs_layout.addWidget(self.command_label)
        if program.started_as:
            named = _plain_label(f"started as {visible(program.started_as, 200)}", runs)
            named.setEnabled(False)
            runs_layout.addWidget(named)
        if program.same_as:
            copy = ", ".join(visible(p, 200) for p in program.same_as)
            self.same_as_label = _plain_label(f"a copy of {copy}", runs)
            runs_layout.addWidget(self.same_as_label)
        for word, target in program.links:
            runs_layout.addWidget(
                _plain_label(f"{visible(word, 200)} leads to {visible(target, 300)}", runs)
            )
        form.addRow("Runs", runs)

        where = visible(program.cwd or "?", 1000)
        self.cwd_label = _plain_label(where, self, fixed=True)
        self.cwd_label.setObjectName("approvalCwd")
        form.addRow("In", self.cwd_label)
        if program.stdin_path:
            form.addRow("Input", _plain_label(f"reads {visible(program.stdin_path, 300)}", self))
        elif program.stdin in ("pipe", "file", "socket"):
            form.addRow("Input", _plain_label(f"reads its input from a {program.stdin}", self))

        why_box = QWidget(self)
        why_layout = QVBoxLayout(why_box)
        why_layout.setContentsMargins(0, 0, 0, 0)
        why_layout.setSpacing(0)
        reason = approval.reason or program.rule_reason or "no reason given"
        self.why_label = _plain_label(f"{approval.rule or 'no rule'} — {reason}", why_box)
        self.why_label.setObjectName("approvalRule")
        why_layout.addWidget(self.why_label)
        if program.what and program.what != program.command_line:
            self.matched_label = _plain_label(
                f"matched {visible(program.what, 1000)}", why_box, fixed=True
            )
            self.matched_label.setObjectName("approvalMatched")
            why_layout.addWidget(self.matched_label)
        form.addRow("Rule", why_box)

        if program.parents:
            shown = [visible(p, 300).replace("\n", " ") for p in program.parents[:PARENTS_SHOWN]]
            more = len(program.parents) - PARENTS_SHOWN
            text = " ← ".join(shown) + (f" ← … {more} more" if more > 0 else "")
            self.parents_label = ElidedLabel(self)
            self.parents_label.setObjectName("approvalParents")
            self.parents_label.setTextFormat(Qt.TextFormat.PlainText)
            self.parents_label.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
            self.parents_label.setText(text)
            every = "\n".join(visible(p, 1000) for p in program.parents)
            self.parents_label.setToolTip(
                "<p>Started by, nearest first:</p><pre>" + html.escape(every) + "</pre>"
            )
            form.addRow("Started by", self.parents_label)

        if program.script:
            self.script_view = ScriptView(
                program.script,
                program.step,
                self,
                words=tuple(w for w in (program.what, shlex.join(program.argv)) if w),
            )
            form.addRow("Script", self.script_view)
        layout.addLayout(form)

    def _decision_row(self) -> QHBoxLayout:
        """Approve on one side, the reason and Deny on the other; one above the other when the
        card is too narrow for both side by side."""
        self._actions = QHBoxLayout()  # its direction turns when the card is narrow
        self._actions.setSpacing(12)
        self._approve_part = QWidget(self)
        row = QHBoxLayout(self._approve_part)
        row.setContentsMargins(0, 0, 0, 0)
        row.addStretch(1)
        self.remember = QCheckBox(remember_text(self.approval), self._approve_part)
        self.remember.setObjectName("rememberBox")
        if self.approval.program is not None and not self.approval.rule:
            self.remember.setEnabled(False)
            self.remember.setToolTip("No rule flagged this program start: nothing to remember")
        row.addWidget(self.remember)
        self.approve_button = QPushButton(icon("approve"), "Approve", self._approve_part)
        self.approve_button.setObjectName("approveButton")
        self.approve_button.setToolTip("Approve this command (A)")
        self.approve_button.clicked.connect(self.approve)
        row.addWidget(self.approve_button)
        self._actions.addWidget(self._approve_part, 1)
        self._deny_part = QWidget(self)
        row = QHBoxLayout(self._deny_part)
        row.setContentsMargins(0, 0, 0, 0)
        self.reason_edit = ReasonEdit(self._deny_part)
        self.reason_edit.returnPressed.connect(self.deny)
        row.addWidget(self.reason_edit, 1)
        self.deny_button = QPushButton(icon("deny"), "Deny", self._deny_part)
        self.deny_button.setObjectName("denyButton")
        self.deny_button.setToolTip("Deny this command, with the reason if one is typed (D)")
        self.deny_button.clicked.connect(self.deny)
        row.addWidget(self.deny_button)
        self._actions.addWidget(self._deny_part)
        return self._actions

    @property
    def stacked(self) -> bool:
        """Whether Deny sits under Approve (a narrow card) rather than beside it."""
        return self._actions.direction() == QHBoxLayout.Direction.TopToBottom

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        layout = self.layout()
        margins = layout.contentsMargins() if layout is not None else None
        side = margins.left() + margins.right() if margins is not None else 0
        needed = (
            self._approve_part.sizeHint().width()
            + self._actions.spacing()
            + self._deny_part.sizeHint().width()
            + side
        )
        wanted = (
            QHBoxLayout.Direction.TopToBottom
            if self.contentsRect().width() < needed
            else QHBoxLayout.Direction.LeftToRight
        )
        if self._actions.direction() != wanted:
            self._actions.setDirection(wanted)

    def update_waiting(self, now: float | None = None) -> None:
        if self.approval.requested_at is None:
            self.waiting_label.setText("waiting")
            return
        self.waiting_label.setText(waited((now or time.time()) - self.approval.requested_at))

    def set_pending(self, pending: bool) -> None:
        """While a decision is being sent, the card cannot send another."""
        can_remember = self.approval.program is None or bool(self.approval.rule)
        for widget in (self.approve_button, self.deny_button, self.reason_edit):
            widget.setEnabled(not pending)
        self.remember.setEnabled(not pending and can_remember)

    def reason(self) -> str:
        return self.reason_edit.text().strip()

    def approve(self) -> None:
        if self.approve_button.isEnabled():
            self.sig_approve.emit(self.approval.id, self.remember.isChecked())

    def deny(self) -> None:
        if self.deny_button.isEnabled():
            self.sig_deny.emit(self.approval.id, self.reason())

    def keyPressEvent(self, event) -> None:
        key = event.key()
        plain = event.modifiers() in (
            Qt.KeyboardModifier.NoModifier,
            Qt.KeyboardModifier.KeypadModifier,
        )
        if not plain:
            super().keyPressEvent(event)
        elif key == Qt.Key.Key_A:
            self.approve()
        elif key == Qt.Key.Key_D:
            self.deny()
        elif key == Qt.Key.Key_R:
            if self.remember.isEnabled():
                self.remember.toggle()
        elif key == Qt.Key.Key_Escape and self.reason_edit.hasFocus():
            self.setFocus()  # out of the reason field, back to the card's keys
        else:
            super().keyPressEvent(event)
