"""The command palette (Ctrl+Shift+P): every action of the window's menus, found by typing.

Owns listing the actions, matching what is typed against their names (a fuzzy subsequence
match, `fuzzy_score`, no Qt in it) and running the chosen one. The actions are the menus' own
QActions: a disabled one shows disabled with the reason its owner gave, and nothing here
decides what is possible.
"""

from __future__ import annotations

from dataclasses import dataclass

from gui.qt import (
    QAbstractItemView,
    QAction,
    QDialog,
    QEvent,
    QKeyEvent,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QMenuBar,
    QModelIndex,
    QObject,
    QPalette,
    QStandardItem,
    QStandardItemModel,
    Qt,
    QVBoxLayout,
    QWidget,
)
from gui.shortcuts import shortcut_text

ROLE_ACTION = Qt.ItemDataRole.UserRole + 1
MAX_WIDTH = 640


def fuzzy_score(query: str, text: str) -> int | None:
    """How well `query` matches `text` (higher is better), or None when it does not: every
    character of the query must appear in the text in order, ignoring case and spaces. Matches
    at the start of a word and runs of consecutive characters score higher, so "exp" finds
    "Export patch" before "Resume the last interrupted run"."""
    needle = "".join(query.lower().split())
    if not needle:
        return 0
    hay = text.lower()
    score, last, i = 0, -2, 0
    for ch in needle:
        found = hay.find(ch, i)
        if found < 0:
            return None
        if found == last + 1:
            score += 5  # consecutive
        if found == 0 or not hay[found - 1].isalnum():
            score += 8  # start of a word
        score -= min(found - i, 10)  # gaps cost, up to a point
        last, i = found, found + 1
    return score + (20 if hay.startswith(needle) else 0)


@dataclass(frozen=True)
class Entry:
    """One action as the palette lists it: "Task ▸ Start", its keys and whether it can run."""

    path: str
    action: QAction

    @property
    def enabled(self) -> bool:
        return self.action.isEnabled()


def menu_actions(bar: QMenuBar) -> list[Entry]:
    """Every action in the menu bar's menus and their submenus, named by their menu path."""
    out: list[Entry] = []
    seen: set[int] = set()  # an action in two menus (New Task) is listed once, where first met

    def walk(menu: QMenu, prefix: str) -> None:
        for action in menu.actions():
            if action.isSeparator() or not action.isVisible() or id(action) in seen:
                continue
            seen.add(id(action))
            sub = action.menu()
            name = f"{prefix} ▸ {_plain(action.text())}"
            if isinstance(sub, QMenu):
                walk(sub, name)
            else:
                out.append(Entry(name, action))

    for top in bar.actions():
        sub = top.menu()
        if isinstance(sub, QMenu):
            walk(sub, _plain(top.text()))
    return out


def _plain(text: str) -> str:
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").strip()


class _Keys(QObject):
    """Up, Down, Page Up/Down in the search field move in the list; Enter runs."""

    def __init__(self, palette: CommandPalette):
        super().__init__(palette)
        self.palette = palette

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.KeyPress or not isinstance(event, QKeyEvent):
            return False
        key = event.key()
        if key in (Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown):
            self.palette.list.setFocus()
            self.palette.list.keyPressEvent(event)
            self.palette.search.setFocus()
            return True
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.palette.run_current()
            return True
        return False


class CommandPalette(QDialog):
    """Type to find an action; Enter runs it, Escape closes. Disabled actions stay listed,
    greyed, with the reason they cannot run now."""

    def __init__(self, bar: QMenuBar, parent: QWidget | None = None):
        super().__init__(parent, Qt.WindowType.Popup | Qt.WindowType.FramelessWindowHint)
        self.setObjectName("commandPalette")
        self.bar = bar
        self.entries: list[Entry] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        self.search = QLineEdit(self)
        self.search.setObjectName("paletteSearch")
        self.search.setPlaceholderText("Type an action: start, fork, export, settings…")
        self.search.setClearButtonEnabled(True)
        layout.addWidget(self.search)
        self.model = QStandardItemModel(self)
        self.list = QListView(self)
        self.list.setObjectName("paletteList")
        self.list.setModel(self.model)
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.list.setUniformItemSizes(True)
        self.list.activated.connect(self._run_index)
        layout.addWidget(self.list, 1)
        self.reason_label = QLabel(self)
        self.reason_label.setObjectName("paletteReason")
        self.reason_label.setWordWrap(True)
        self.reason_label.setEnabled(False)  # the palette's quieter text
        layout.addWidget(self.reason_label)
        self.search.textChanged.connect(self._filter)
        self.search.installEventFilter(_Keys(self))
        self.list.selectionModel().currentChanged.connect(lambda *_: self._show_reason())

    def open_palette(self) -> None:
        """Read the menus again (actions come and go, and enable) and show, centred at the top
        of the parent window."""
        self.entries = menu_actions(self.bar)
        self.search.clear()
        self._filter("")
        parent = self.parentWidget()
        if parent is not None:
            width = min(MAX_WIDTH, max(360, parent.width() - 80))
            height = min(420, max(220, parent.height() // 2))
            top_left = parent.mapToGlobal(parent.rect().topLeft())
            self.setGeometry(
                top_left.x() + (parent.width() - width) // 2, top_left.y() + 60, width, height
            )
        self.show()
        self.raise_()
        self.activateWindow()
        self.search.setFocus()

    def _filter(self, text: str) -> None:
        scored = []
        for order, entry in enumerate(self.entries):
            score = fuzzy_score(text, entry.path.split(" ▸ ")[-1])
            whole = fuzzy_score(text, entry.path)
            best = max((s for s in (score, whole) if s is not None), default=None)
            if best is not None:
                # Among equals, what can run comes first, then the menus' order.
                scored.append((-best, not entry.enabled, order, entry))
        scored.sort(key=lambda t: t[:3])
        self.model.clear()
        disabled_text = self.palette().brush(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
        for _score, _disabled, _order, entry in scored:
            keys = shortcut_text(entry.action)
            item = QStandardItem(entry.path + (f"    {keys}" if keys else ""))
            item.setIcon(entry.action.icon())
            item.setData(entry.action, ROLE_ACTION)
            item.setEditable(False)
            why = entry.action.toolTip()
            item.setToolTip(why)
            if not entry.enabled:
                # Greyed, not disabled: the keys still reach it, to read why it cannot run.
                item.setForeground(disabled_text)
                item.setText(f"{item.text()}  —  {why}")
            self.model.appendRow(item)
        self._select_first()

    def _select_first(self) -> None:
        for row in range(self.model.rowCount()):
            action = self.model.index(row, 0).data(ROLE_ACTION)
            if isinstance(action, QAction) and action.isEnabled():
                self.list.setCurrentIndex(self.model.index(row, 0))
                return
        if self.model.rowCount():
            self.list.setCurrentIndex(self.model.index(0, 0))
        self._show_reason()

    def _show_reason(self) -> None:
        action = self.current_action()
        if action is None:
            self.reason_label.setText("No action matches." if self.search.text() else "")
        elif not action.isEnabled():
            self.reason_label.setText(f"Not now: {action.toolTip()}")
        else:
            self.reason_label.setText(action.toolTip())

    def current_action(self) -> QAction | None:
        index = self.list.currentIndex()
        action = index.data(ROLE_ACTION) if index.isValid() else None
        return action if isinstance(action, QAction) else None

    def run_current(self) -> None:
        self._run_index(self.list.currentIndex())

    def _run_index(self, index: QModelIndex) -> None:
        action = index.data(ROLE_ACTION) if index.isValid() else None
        if not isinstance(action, QAction):
            return
        if not action.isEnabled():
            self.reason_label.setText(f"Not now: {action.toolTip()}")
            return
        self.hide()
        action.trigger()
