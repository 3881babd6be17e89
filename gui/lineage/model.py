"""The lineage tree: tasks grouped under the folder they grew from, children under their parents.

Owns the tree's shape and what each row shows. `LineageNode` is plain Python (no Qt); the
`LineageModel` over it stays thin, as in Qt's tree model example: `createIndex(row, col, node)`,
`internalPointer()`, each node's row cached, rows inserted between begin/endInsertRows. Children
are handed to views lazily (`canFetchMore`/`fetchMore`, a chunk at a time), so a lineage of ten
thousand tasks costs what the expanded part of it costs. A fetch asked for while the model is
announcing a change (from a slot of its own signals) is deferred to the next turn of the event
loop instead of nesting a second change inside the first. `LineageFilter` filters through a
QSortFilterProxyModel; it also finds matches in subtrees not fetched yet. The optional Cost
column shows each task's cost (tokens in its tooltip), the sum over a task and the tasks below
it in a parent's tooltip, and a folder's sum on its row; the sums are made once per change of
the figures, not per paint. Loading the rows and their figures is a job's work
(gui.lineage.data.load_lineage); this module never calls the facade.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import PurePath
from typing import Any, overload

from core.usage import Usage, cost_text, count_text, summary_text, tokens_text
from gui.icons import icon
from gui.lineage.data import TaskRow
from gui.qt import (
    ModelIndex,
    QAbstractItemModel,
    QBrush,
    QColor,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    QTimer,
)
from gui.run_state import IN_FLIGHT, STATE_COLOURS, run_state_label

FETCH_CHUNK = 256
COLUMNS = ("Task", "State", "Cost")
TITLE_COLUMN, STATE_COLUMN, COST_COLUMN = 0, 1, 2

ROLE_TASK_ID = Qt.ItemDataRole.UserRole + 1
ROLE_KIND = Qt.ItemDataRole.UserRole + 2
ROLE_RUN_STATE = Qt.ItemDataRole.UserRole + 3
ROLE_LIVE_SESSION = Qt.ItemDataRole.UserRole + 4
ROLE_SNAPSHOT = Qt.ItemDataRole.UserRole + 5
ROLE_APPROVALS = Qt.ItemDataRole.UserRole + 6
ROLE_SOURCE_PATH = Qt.ItemDataRole.UserRole + 7
ROLE_BADGES = Qt.ItemDataRole.UserRole + 8
ROLE_USAGE = Qt.ItemDataRole.UserRole + 9
# The roles that hand out one field of a task's row as it is.
TASK_ROLE_FIELDS = {
    ROLE_TASK_ID: "task_id",
    ROLE_RUN_STATE: "run_state",
    ROLE_LIVE_SESSION: "live",
    ROLE_SNAPSHOT: "snapshot",
    ROLE_APPROVALS: "approvals",
    ROLE_SOURCE_PATH: "source_path",
    ROLE_USAGE: "usage",
}

ROOT, SOURCE, TASK = "root", "source", "task"

SNAPSHOT_WORDS = {
    "none": "no snapshot",
    "fresh": "snapshot up to date",
    "stale": "changes since the last snapshot",
}


class LineageNode:
    """One row of the tree: the invisible root, a source folder, or a task. No Qt here."""

    __slots__ = (
        "kind",
        "key",
        "parent",
        "children",
        "unfetched",
        "row",
        "task",
        "source_path",
        "task_count",
        "haystack",
    )

    def __init__(self, kind: str, key: str, parent: LineageNode | None = None):
        self.kind = kind
        self.key = key
        self.parent = parent
        self.children: list[LineageNode] = []  # handed to the model (each has its row)
        self.unfetched: list[LineageNode] = []  # known, not handed out yet (fetchMore)
        self.row: int | None = None  # index in parent.children once handed out
        self.task: TaskRow | None = None
        self.source_path = ""
        self.task_count = 0
        self.haystack = ""

    def __repr__(self) -> str:
        return f"LineageNode({self.kind}, {self.key!r}, row={self.row})"

    @property
    def title(self) -> str:
        if self.task is not None:
            return self.task.title
        return PurePath(self.source_path).name or self.source_path

    @property
    def task_row(self) -> TaskRow:
        """The row of a task node (the root and the folders have none)."""
        if self.task is None:
            raise TypeError(f"{self!r} is not a task")
        return self.task

    def has_children(self) -> bool:
        return bool(self.children or self.unfetched)

    def exposed(self) -> bool:
        """Whether the model has handed this node out (it and all its ancestors)."""
        node = self
        while node.parent is not None:
            if node.row is None:
                return False
            node = node.parent
        return True

    def all_children(self) -> list[LineageNode]:
        return self.children + self.unfetched

    def walk(self) -> Iterable[LineageNode]:
        """This node and everything below it, fetched or not (iteratively: chains are deep)."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.all_children()))


def _task_haystack(row: TaskRow) -> str:
    return " ".join((row.title, row.task_id, row.engine, row.run_state or "")).lower()


def build_forest(
    rows: Iterable[TaskRow],
) -> tuple[LineageNode, dict[str, LineageNode], dict[str, LineageNode]]:
    """The tree for these rows: (root, tasks by id, sources by id), every child unfetched.

    Tasks go under their parent when it is known and of the same source folder, else under the
    folder; siblings keep creation order and folders are sorted by name.
    """
    root = LineageNode(ROOT, "")
    tasks: dict[str, LineageNode] = {}
    sources: dict[str, LineageNode] = {}
    ordered = sorted(rows, key=lambda r: (r.created_at, r.task_id))
    for row in ordered:
        node = LineageNode(TASK, row.task_id)
        node.task = row
        node.haystack = _task_haystack(row)
        tasks[row.task_id] = node
        if row.source_id not in sources:
            source = LineageNode(SOURCE, row.source_id, root)
            source.source_path = row.source_path
            source.haystack = row.source_path.lower()
            sources[row.source_id] = source
    for node in tasks.values():
        row = node.task_row
        parent = tasks.get(row.parent_id) if row.parent_id else None
        if parent is None or parent.task_row.source_id != row.source_id or parent is node:
            parent = sources[row.source_id]
        node.parent = parent
        parent.unfetched.append(node)
    # A parent cycle (never made by core, but the store is data) would leave tasks unreachable:
    # hang those under their folder instead of losing them.
    reachable = set()
    for source in sources.values():
        for node in source.walk():
            reachable.add(id(node))
    for node in tasks.values():
        if id(node) not in reachable and node.parent is not None:
            node.parent.unfetched.remove(node)
            node.parent = sources[node.task_row.source_id]
            node.parent.unfetched.append(node)
            for below in node.walk():
                reachable.add(id(below))
    root.unfetched = sorted(sources.values(), key=lambda s: (s.title.lower(), s.source_path))
    for source in sources.values():
        source.task_count = sum(1 for n in source.walk() if n.kind == TASK)
    return root, tasks, sources


class LineageModel(QAbstractItemModel):
    """A thin QAbstractItemModel over LineageNode trees (see the module docstring)."""

    def __init__(self, parent: QObject | None = None, *, fetch_chunk: int = FETCH_CHUNK):
        super().__init__(parent)
        self._fetch_chunk = fetch_chunk
        self._root, self._tasks, self._sources = build_forest([])
        self._by_workspace: dict[str, LineageNode] = {}
        self._icons: dict[str, object] = {}
        self._sums: dict[int, Sum] | None = None  # by id(node); None: to be made again
        self._announcing = 0
        self._deferred: list[QPersistentModelIndex | None] = []  # None: the root
        self._defer_timer = QTimer(self)
        self._defer_timer.setSingleShot(True)
        self._defer_timer.setInterval(0)
        self._defer_timer.timeout.connect(self._run_deferred_fetches)

    @contextmanager
    def _announcing_change(self) -> Iterator[None]:
        """Marks the span in which begin/end signals go out (slots may call back in)."""
        self._announcing += 1
        try:
            yield
        finally:
            self._announcing -= 1

    # -- loading and changes ---------------------------------------------------------------------

    def set_rows(self, rows: Iterable[TaskRow]) -> None:
        """Replace everything (a fresh load)."""
        root, tasks, sources = build_forest(rows)
        with self._announcing_change():
            self.beginResetModel()
            self._root, self._tasks, self._sources = root, tasks, sources
            self._by_workspace = {
                n.task_row.workspace_id: n for n in self._tasks.values() if n.task_row.workspace_id
            }
            self._deferred.clear()
            self._sums = None
            self.endResetModel()

    def task_node(self, task_id: str) -> LineageNode | None:
        return self._tasks.get(task_id)

    def task_row(self, task_id: str) -> TaskRow | None:
        """What the tree shows of a task, or None when the task is not in it."""
        node = self._tasks.get(task_id)
        return node.task_row if node is not None else None

    def task_ids(self) -> list[str]:
        return list(self._tasks)

    def task_nodes(self) -> list[LineageNode]:
        """Every task's node, fetched or not."""
        return list(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def add_task(self, row: TaskRow) -> bool:
        """Insert a new task (rows inserted where visible); an already known task is updated."""
        if row.task_id in self._tasks:
            self.update_task(row)
            return False
        source = self._sources.get(row.source_id)
        if source is None:
            source = self._add_source(row.source_id, row.source_path)
        parent = self._tasks.get(row.parent_id) if row.parent_id else None
        if parent is None or parent.task_row.source_id != row.source_id:
            parent = source
        node = LineageNode(TASK, row.task_id, parent)
        node.task = row
        node.haystack = _task_haystack(row)
        self._tasks[row.task_id] = node
        if row.workspace_id:
            self._by_workspace[row.workspace_id] = node
        self._append_child(parent, node)
        source.task_count += 1
        self._changed(source, (Qt.ItemDataRole.DisplayRole,), STATE_COLUMN)
        if row.usage is not None:
            self._usage_changed([node])
        else:
            self._sums = None
        return True

    def _append_child(self, parent: LineageNode, node: LineageNode) -> None:
        if parent.unfetched or not parent.exposed():
            parent.unfetched.append(node)
            return
        position = len(parent.children)
        with self._announcing_change():
            self.beginInsertRows(self.index_of(parent), position, position)
            node.row = position
            parent.children.append(node)
            self.endInsertRows()

    def _add_source(self, source_id: str, path: str) -> LineageNode:
        source = LineageNode(SOURCE, source_id, self._root)
        source.source_path = path
        source.haystack = path.lower()
        self._sources[source_id] = source
        root = self._root
        if root.unfetched:
            root.unfetched.append(source)
            return source
        sort_key = (source.title.lower(), path)
        position = next(
            (i for i, s in enumerate(root.children) if (s.title.lower(), s.source_path) > sort_key),
            len(root.children),
        )
        with self._announcing_change():
            self.beginInsertRows(QModelIndex(), position, position)
            root.children.insert(position, source)
            for i in range(position, len(root.children)):
                root.children[i].row = i
            self.endInsertRows()
        return source

    def update_task(self, row: TaskRow) -> None:
        """New values for a known task's row (its place in the tree does not move)."""
        node = self._tasks.get(row.task_id)
        if node is None:
            return
        old_ws = node.task_row.workspace_id
        old_usage = node.task_row.usage
        node.task = row
        node.haystack = _task_haystack(row)
        if row.workspace_id and row.workspace_id != old_ws:
            self._by_workspace.pop(old_ws or "", None)
            self._by_workspace[row.workspace_id] = node
        self._changed(node)
        if row.usage != old_usage:
            self._usage_changed([node])

    def set_task_fields(self, task_id: str, **changes: object) -> bool:
        """Change some fields of a task's row (run_state, live, snapshot, approvals...)."""
        node = self._tasks.get(task_id)
        if node is None:
            return False
        for name, value in changes.items():
            setattr(node.task_row, name, value)
        node.haystack = _task_haystack(node.task_row)
        self._changed(node)
        if "usage" in changes:
            self._usage_changed([node])
        return True

    def set_usage(self, by_task: dict[str, dict[str, Any]]) -> None:
        """What each task's runs used (a fresh read of every task's figures): the Cost column
        and the sums above each task are shown again."""
        changed = []
        for task_id, node in self._tasks.items():
            figures = by_task.get(task_id)
            if figures is not None and figures != node.task_row.usage:
                node.task_row.usage = figures
                changed.append(node)
        if changed:
            self._usage_changed(changed)

    def usage_sum(self, node: LineageNode) -> Sum:
        """The figures of a task and every task below it (of a folder: of its tasks)."""
        if self._sums is None:
            self._sums = _sums(self._root)
        return self._sums.get(id(node)) or Sum()

    def _usage_changed(self, nodes: list[LineageNode]) -> None:
        """Figures changed for these tasks: the sums are made again, and their rows' and their
        ancestors' Cost cells (and tooltips) are shown again."""
        self._sums = None
        seen: set[int] = set()
        for node in nodes:
            walker: LineageNode | None = node
            while walker is not None and walker.kind != ROOT and id(walker) not in seen:
                seen.add(id(walker))
                self._changed(walker, (), COST_COLUMN)
                walker = walker.parent

    def task_for_workspace(self, workspace_id: str) -> str | None:
        node = self._by_workspace.get(workspace_id)
        return node.key if node else None

    def _changed(
        self, node: LineageNode, roles: tuple[int, ...] = (), column: int | None = None
    ) -> None:
        if node.kind == ROOT or node.row is None or not node.exposed():
            return
        first = self.createIndex(node.row, column if column is not None else 0, node)
        last = self.createIndex(node.row, column if column is not None else len(COLUMNS) - 1, node)
        with self._announcing_change():
            self.dataChanged.emit(first, last, list(roles))

    # -- finding rows ----------------------------------------------------------------------------

    def node(self, index: ModelIndex) -> LineageNode:
        if not index.isValid():
            return self._root
        return index.internalPointer()

    def index_of(self, node: LineageNode, column: int = 0) -> QModelIndex:
        if node.kind == ROOT or node.row is None:
            return QModelIndex()
        return self.createIndex(node.row, column, node)

    def expose(self, node: LineageNode) -> QModelIndex:
        """Fetch whatever is needed for this node to have an index, and return it."""
        chain = []
        walker: LineageNode | None = node
        while walker is not None and walker.kind != ROOT:
            chain.append(walker)
            walker = walker.parent
        for child in reversed(chain):
            parent = child.parent
            while parent is not None and child.row is None and parent.unfetched:
                self._fetch(parent)
        return self.index_of(node)

    def index_of_task(self, task_id: str) -> QModelIndex:
        node = self._tasks.get(task_id)
        return self.expose(node) if node is not None else QModelIndex()

    def fetch_all(self) -> None:
        """Hand out every node (tests and small trees)."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            while node.unfetched:
                self._fetch(node)
            stack.extend(node.children)

    def matching(self, needle: str) -> set[int]:
        """ids of the nodes that match `needle` or have a match below them (fetched or not)."""
        hits: set[int] = set()
        for node in self._tasks.values():
            if needle in node.haystack:
                walker: LineageNode | None = node
                while walker is not None and id(walker) not in hits:
                    hits.add(id(walker))
                    walker = walker.parent
        for source in self._sources.values():
            if needle in source.haystack:
                hits.add(id(source))
        return hits

    # -- QAbstractItemModel ----------------------------------------------------------------------

    def index(self, row: int, column: int, parent: ModelIndex = QModelIndex()) -> QModelIndex:
        node = parent.internalPointer() if parent.isValid() else self._root
        if parent.isValid() and parent.column() != 0:
            return QModelIndex()
        if 0 <= row < len(node.children) and 0 <= column < len(COLUMNS):
            return self.createIndex(row, column, node.children[row])
        return QModelIndex()

    @overload
    def parent(self) -> QObject | None: ...

    @overload
    def parent(self, child: ModelIndex, /) -> QModelIndex: ...

    def parent(self, child: ModelIndex | None = None) -> QObject | QModelIndex | None:
        """The model's QObject parent, or (given an index) the index of its node's parent."""
        if child is None:  # QObject.parent()
            return QObject.parent(self)
        if not child.isValid():
            return QModelIndex()
        up = child.internalPointer().parent
        if up is None or up.kind == ROOT or up.row is None:
            return QModelIndex()
        return self.createIndex(up.row, 0, up)

    def sibling(self, row: int, column: int, index: ModelIndex) -> QModelIndex:
        if index.isValid() and row == index.row() and 0 <= column < len(COLUMNS):
            return self.createIndex(row, column, index.internalPointer())
        return super().sibling(row, column, index)

    def rowCount(self, parent: ModelIndex = QModelIndex()) -> int:
        if parent.isValid():
            if parent.column() != 0:
                return 0
            return len(parent.internalPointer().children)
        return len(self._root.children)

    def columnCount(self, parent: ModelIndex = QModelIndex()) -> int:
        return len(COLUMNS)

    def hasChildren(self, parent: ModelIndex = QModelIndex()) -> bool:
        if parent.isValid() and parent.column() != 0:
            return False
        return self.node(parent).has_children()

    def canFetchMore(self, parent: ModelIndex) -> bool:
        if parent.isValid() and parent.column() != 0:
            return False
        return bool(self.node(parent).unfetched)

    def fetchMore(self, parent: ModelIndex) -> None:
        if parent.isValid() and parent.column() != 0:
            return
        if self._announcing:
            self._deferred.append(QPersistentModelIndex(parent) if parent.isValid() else None)
            self._defer_timer.start()
            return
        self._fetch(self.node(parent))

    def _run_deferred_fetches(self) -> None:
        pending, self._deferred = self._deferred, []
        for persistent in pending:
            if persistent is None:
                self._fetch(self._root)
            elif persistent.isValid():
                self._fetch(persistent.internalPointer())

    def _fetch(self, node: LineageNode) -> None:
        """Hand out the next chunk of a node's children (rows inserted)."""
        take = node.unfetched[: self._fetch_chunk]
        if not take or (node.kind != ROOT and not node.exposed()):
            return
        first = len(node.children)
        with self._announcing_change():
            self.beginInsertRows(self.index_of(node), first, first + len(take) - 1)
            del node.unfetched[: len(take)]
            for offset, child in enumerate(take):
                child.row = first + offset
            node.children.extend(take)
            self.endInsertRows()

    def flags(self, index: ModelIndex) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    def headerData(
        self,
        section: int,
        orientation: Qt.Orientation,
        role: int = Qt.ItemDataRole.DisplayRole,
    ):
        if (
            orientation == Qt.Orientation.Horizontal
            and role == Qt.ItemDataRole.DisplayRole
            and 0 <= section < len(COLUMNS)
        ):
            return COLUMNS[section]
        return None

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        node: LineageNode = index.internalPointer()
        column = index.column()
        if node.kind == SOURCE:
            return self._source_data(node, column, role)
        return self._task_data(node, node.task_row, column, role)

    def _source_data(self, node: LineageNode, column: int, role: int):
        if column == COST_COLUMN and role in COST_ROLES:
            return self._source_cost(node, role)
        if role == Qt.ItemDataRole.DisplayRole:
            if column == TITLE_COLUMN:
                return node.title
            return f"{node.task_count} task{'s' if node.task_count != 1 else ''}"
        if role == Qt.ItemDataRole.ToolTipRole:
            return node.source_path
        if role == Qt.ItemDataRole.DecorationRole and column == TITLE_COLUMN:
            return self._icon("folder")
        if role == ROLE_KIND:
            return SOURCE
        if role == ROLE_SOURCE_PATH:
            return node.source_path
        return None

    def _source_cost(self, node: LineageNode, role: int):
        summed = self.usage_sum(node)
        runs = summed.figures()["runs"]
        if role == Qt.ItemDataRole.DisplayRole:
            return cost_text(summed.figures()) if runs else ""
        if role == Qt.ItemDataRole.ToolTipRole:
            used = summed.words() if runs else "nothing yet"
            return f"{node.source_path}\nIts tasks used: {used}"
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return RIGHT
        return None

    def _task_cost(self, node: LineageNode, task: TaskRow, role: int):
        if role == Qt.ItemDataRole.DisplayRole:
            if task.usage is None:
                return ""
            return cost_text(task.usage) if task.usage.get("runs") else ""
        if role == Qt.ItemDataRole.ToolTipRole:
            below = self.usage_sum(node) if node.has_children() else None
            return cost_tooltip(
                task, below, lineage_root=node.parent is None or node.parent.kind != TASK
            )
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return RIGHT
        return None

    def _task_data(self, node: LineageNode, task: TaskRow, column: int, role: int):
        if column == COST_COLUMN and role in COST_ROLES:
            return self._task_cost(node, task, role)
        if role == Qt.ItemDataRole.DisplayRole:
            if column == TITLE_COLUMN:
                return task.title
            return badge_text(task)
        if role == Qt.ItemDataRole.ForegroundRole and column == STATE_COLUMN:
            colour = STATE_COLOURS.get(task.run_state or "")
            return QBrush(QColor(colour)) if colour else None
        if role == Qt.ItemDataRole.DecorationRole and column == TITLE_COLUMN:
            return self._icon("task")
        if role == Qt.ItemDataRole.ToolTipRole:
            return tooltip(task)
        if role == ROLE_KIND:
            return TASK
        if role == ROLE_BADGES:
            return badges(task)
        field_name = TASK_ROLE_FIELDS.get(role)
        return getattr(task, field_name) if field_name else None

    def _icon(self, name: str):
        cached = self._icons.get(name)
        if cached is None:
            cached = self._icons[name] = icon(name)
        return cached

    def refresh_icons(self) -> None:
        """Draw icons again (the palette changed between light and dark)."""
        self._icons.clear()
        if self._root.children:
            with self._announcing_change():
                self.dataChanged.emit(
                    self.index(0, 0),
                    self.index(len(self._root.children) - 1, 0),
                    [Qt.ItemDataRole.DecorationRole],
                )


RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
COST_ROLES = (
    Qt.ItemDataRole.DisplayRole,
    Qt.ItemDataRole.ToolTipRole,
    Qt.ItemDataRole.TextAlignmentRole,
)


class Sum:
    """The figures of some tasks added up (no Qt): their usage and how many tasks there are."""

    __slots__ = ("usage", "tasks")

    def __init__(self) -> None:
        self.usage = Usage()
        self.tasks = 0

    def add_task(self, figures: dict[str, Any] | None) -> None:
        self.tasks += 1
        if figures is not None:
            self.usage.add(Usage.from_json(figures))

    def add(self, other: Sum) -> None:
        self.usage.add(other.usage)
        self.tasks += other.tasks

    def figures(self) -> dict[str, Any]:
        return self.usage.to_json()

    def words(self) -> str:
        """`$0.0624  (15.1k in · …) over 3 tasks, 2 runs`."""
        figures = self.figures()
        runs = figures["runs"]
        return (
            f"{summary_text(figures)} over {self.tasks} task{'s' if self.tasks != 1 else ''}, "
            f"{runs} run{'s' if runs != 1 else ''}"
        )


def _sums(root: LineageNode) -> dict[int, Sum]:
    """Each folder's and task's sum over itself and everything below it (fetched or not), in
    one pass from the leaves up (iteratively: chains are deep)."""
    order = list(root.walk())
    sums: dict[int, Sum] = {}
    for node in reversed(order):  # every node comes after its parent in `order`
        mine = Sum()
        if node.kind == TASK:
            mine.add_task(node.task_row.usage)
        for child in node.all_children():
            below = sums.get(id(child))
            if below is not None:
                mine.add(below)
        sums[id(node)] = mine
    return sums


def cost_tooltip(task: TaskRow, below: Sum | None, *, lineage_root: bool) -> str:
    """What a task's runs used, in words; with the sum over it and the tasks below it when it
    has any (at the top of a lineage: the lineage's total)."""
    figures = task.usage
    if figures is None:
        return "Not read yet"
    runs = int(figures.get("runs") or 0)
    if runs:
        lines = [f"This task: {cost_text(figures)} over {runs} run{'s' if runs != 1 else ''}"]
        lines.append(
            f"Tokens: {count_text(int(figures.get('total_tokens') or 0))} ({tokens_text(figures)})"
        )
        if figures.get("cost_source"):
            lines.append(f"Cost from the {figures['cost_source']}")
        if task.run_state in IN_FLIGHT:
            lines.append("A run is in flight: so far")
    else:
        lines = ["This task: nothing used yet (no runs)"]
    if below is not None:
        what = "Lineage total" if lineage_root else "With the tasks below it"
        lines.append(f"{what}: {below.words()}")
    return "\n".join(lines)


def badges(task: TaskRow) -> list[str]:
    """The short badges a task row carries, in reading order."""
    out = [task.pending or run_state_label(task.run_state)]
    if task.live:
        out.append("live")
    if task.snapshot == "stale":
        out.append("snapshot behind")
    if task.approvals:
        out.append(f"{task.approvals} to approve")
    return out


def badge_text(task: TaskRow) -> str:
    return " · ".join(badges(task))


def tooltip(task: TaskRow) -> str:
    lines = [
        task.title,
        f"{task.task_id} · {task.engine} · {task.origin}",
        f"run: {run_state_label(task.run_state)}" + (f" ({task.pending})" if task.pending else ""),
        f"sandbox: {'live session' if task.live else 'no live session'}",
        SNAPSHOT_WORDS.get(task.snapshot, task.snapshot),
    ]
    if task.approvals:
        lines.append(
            f"{task.approvals} command{'s' if task.approvals != 1 else ''} waiting for approval"
        )
    return "\n".join(lines)


class LineageFilter(QSortFilterProxyModel):
    """Filters the lineage by a text (title, id, engine, state, folder), keeping ancestors."""

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        # A row shows when it matches or something below it does; the children of a match show
        # only if they match too (auto-accepting them would also accept every sibling of a match
        # below an ancestor that is kept for it).
        self.setRecursiveFilteringEnabled(True)
        self._needle = ""
        self._hits: set[int] = set()

    @property
    def text(self) -> str:
        return self._needle

    def set_text(self, text: str) -> None:
        needle = text.strip().lower()
        if needle == self._needle:
            return
        begin = getattr(self, "beginFilterChange", None)
        if begin is not None:
            begin()
        self._needle = needle
        self._hits = self._lineage().matching(needle) if needle else set()
        if begin is not None:
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:  # pragma: no cover - Qt before 6.9
            self.invalidateRowsFilter()

    def _lineage(self) -> LineageModel:
        model = self.sourceModel()
        if not isinstance(model, LineageModel):
            raise TypeError(f"a LineageFilter filters a LineageModel, not {model!r}")
        return model

    def filterAcceptsRow(self, source_row: int, source_parent: ModelIndex) -> bool:
        if not self._needle:
            return True
        parent = self._lineage().node(source_parent)
        if not 0 <= source_row < len(parent.children):
            return False
        node = parent.children[source_row]
        # New rows that match are found by their text; older ones also by the precomputed hits
        # (which include ancestors of matches not fetched yet).
        return id(node) in self._hits or self._needle in node.haystack
