"""The main window: the lineage tree on the left, the selected task in the centre, and the tabs
(Revisions, Sessions & Snapshots, Approvals) below it.

Owns the window's frame: layout and its saved state (geometry, splitters, selection), menus,
the status bar, the banner that says why sandboxes cannot run, folder drops and the New Task
flow, notifications of approval requests, and start-up (sandbox status, reconcile, loading the
tree, all in jobs). What each area shows belongs to its own widget.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gui import shortcuts
from gui.approvals import ApprovalsPanel
from gui.context import AppContext
from gui.dialogs import KeyringDialog, NewTaskDialog, NewTaskRequest, engine_choices
from gui.dialogs.data import (
    DEFAULT_ENGINES,
    SortedPaths,
    default_policies,
    host_choices,
    sort_paths,
)
from gui.elide import ElidedLabel
from gui.errors import describe_error, is_keyring_problem
from gui.icons import clear_cache as clear_icon_cache
from gui.icons import icon
from gui.jobs import JobFailure
from gui.lineage import LineagePanel
from gui.lineage.data import task_row
from gui.logs import diagnostics, log_path
from gui.palette import CommandPalette
from gui.qt import (
    QAbstractItemView,
    QAction,
    QApplication,
    QByteArray,
    QCloseEvent,
    QDesktopServices,
    QDialog,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QEvent,
    QFileDialog,
    QFrame,
    QGuiApplication,
    QHBoxLayout,
    QIcon,
    QKeySequence,
    QLabel,
    QMainWindow,
    QMessageBox,
    QMimeData,
    QPushButton,
    QScrollArea,
    QSplitter,
    QSystemTrayIcon,
    Qt,
    QTabWidget,
    QTimer,
    QToolButton,
    QUrl,
    QVBoxLayout,
    QWidget,
    Signal,
    qVersion,
)
from gui.resources import icon_path
from gui.revisions import RevisionsPanel
from gui.run_state import FOLLOWABLE
from gui.sandbox_watch import Settled
from gui.sessions import SessionsPanel
from gui.settings import (
    CredentialsPage,
    HousekeepingDialog,
    SettingsDialog,
    open_credentials_dialog,
)
from gui.shortcuts import TASK_SHORTCUTS, show_shortcuts_on
from gui.task_view import EMPTY_STATE_TEXT, TaskView
from gui.task_view.actions import RESUME, RESUME_ON_HOST, STOP, run_arguments
from gui.welcome import WelcomeDialog

if TYPE_CHECKING:
    from core.runs.reconcile import ReconcileReport

log = logging.getLogger(__name__)

WINDOW_TITLE = "Cairn"
DEFAULT_SIZE = (1200, 780)
GEOMETRY_KEY = "main_window/geometry"
STATE_KEY = "main_window/state"
MAIN_SPLITTER_KEY = "main_window/main_splitter"
CENTRE_SPLITTER_KEY = "main_window/centre_splitter"
SELECTION_KEY = "main_window/selected_task"
TAB_KEY = "main_window/tab"
STATUS_TIMEOUT_MS = 15_000
# A focus ring that is seen: the palette's highlight colour, two pixels wide, on whatever the
# keyboard is on (the style's own dotted rectangle is barely visible, in dark palettes not at all).
FOCUS_STYLE = """
QToolButton:focus { border: 2px solid palette(highlight); border-radius: 4px; }
QPushButton:focus { border: 2px solid palette(highlight); border-radius: 4px; }
QAbstractItemView:focus, QPlainTextEdit:focus, QTextEdit:focus {
    border: 2px solid palette(highlight);
}
QTabBar::tab:focus { border: 2px solid palette(highlight); }
QCheckBox:focus, QRadioButton:focus { border: 2px solid palette(highlight); border-radius: 3px; }
QDialog#commandPalette { border: 1px solid palette(dark); }
"""
# Views of paths: a narrow pane shows "gui/…/view.py" rather than "gui/ta…".
MIDDLE_ELIDED = frozenset({"diffFileList", "diffFileTree"})
ACTIVITY_DELAY_MS = 400  # a job shorter than this never shows "Working…"
BANNER_STYLE = (
    "QFrame#sandboxBanner { border: 1px solid #d68910; border-radius: 4px;"
    " background: rgba(214, 137, 16, 0.14); }"
)

__all__ = ["EMPTY_STATE_TEXT", "MainWindow", "app_icon"]


@dataclass(frozen=True)
class WindowDefaults:
    """The settings the window's dialogs start from."""

    engines: tuple[str, ...]
    engine: str | None  # defaults.engine, when one is set
    policies: dict[str, str]  # each engine's default network for a new task, in words
    hosts: tuple[str, ...] = ()  # the sandbox hosts' names
    host: str | None = None  # the default sandbox host


def app_icon() -> QIcon:
    """The Cairn icon; a null icon (never an error) when the resources folder is missing."""
    path = icon_path()
    return QIcon(str(path)) if path.is_file() else QIcon()


def _local_paths(mime: QMimeData) -> list[Path]:
    if not mime.hasUrls():
        return []
    return [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile()]


class Banner(QFrame):
    """A notice across the top of the window: what is wrong and how to fix it."""

    sig_retry = Signal()
    """The user fixed it (they say) and wants Cairn to check again."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("sandboxBanner")
        self.setStyleSheet(BANNER_STYLE)
        row = QHBoxLayout(self)
        self.icon_label = QLabel(self)
        self.icon_label.setPixmap(icon("warning").pixmap(24, 24))
        row.addWidget(self.icon_label)
        self.text_label = QLabel(self)
        self.text_label.setObjectName("bannerText")
        self.text_label.setWordWrap(True)
        self.text_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row.addWidget(self.text_label, 1)
        self.retry_button = QPushButton("Check Again", self)
        self.retry_button.clicked.connect(self.sig_retry.emit)
        row.addWidget(self.retry_button)
        self.dismiss_button = QPushButton("Dismiss", self)
        self.dismiss_button.clicked.connect(self.hide)
        row.addWidget(self.dismiss_button)
        self.hide()

    def show_problem(self, problem: str) -> None:
        self.text_label.setText(
            f"<b>Sandboxes cannot run:</b> {html.escape(problem)}<br>Tasks can be browsed, "
            "compared and created; starting, continuing and resuming runs waits until this is "
            "fixed."
        )
        self.show()


class MainWindow(QMainWindow):
    sig_folders_dropped = Signal(list)
    """Local folders (list of Path) were dropped or chosen, to start tasks from."""

    def __init__(self, context: AppContext, parent: QWidget | None = None, *, start: bool = True):
        super().__init__(parent)
        self.context = context
        self._settings = context.settings
        self.new_task_dialog: NewTaskDialog | None = None
        self.keyring_dialog: KeyringDialog | None = None
        self.settings_dialog: SettingsDialog | None = None
        self.credentials_dialog: QDialog | None = None
        self.housekeeping_dialog: HousekeepingDialog | None = None
        self.system_check: WelcomeDialog | None = None
        self._repolishing = False
        self._engines: tuple[str, ...] = DEFAULT_ENGINES  # until the settings have been read
        self._default_engine: str | None = None
        self._policies: dict[str, str] = {}
        self._hosts: tuple[str, ...] = ()  # until the settings have been read: the default one
        self._default_host: str | None = None
        self._tray: QSystemTrayIcon | None = None
        self.setWindowTitle(WINDOW_TITLE)
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)
        self._build()
        self._build_menu()
        self._connect()
        self._restore_state()
        if start:
            QTimer.singleShot(0, self.start)

    # -- building --------------------------------------------------------------------------------

    def _build(self) -> None:
        central = QWidget(self)
        outer = QVBoxLayout(central)
        outer.setContentsMargins(6, 6, 6, 0)
        self.banner = Banner(central)
        outer.addWidget(self.banner)
        self.main_splitter = QSplitter(Qt.Orientation.Horizontal, central)
        self.main_splitter.setObjectName("mainSplitter")
        self.lineage = LineagePanel(self.context, self.main_splitter)
        self.centre_splitter = QSplitter(Qt.Orientation.Vertical, self.main_splitter)
        self.centre_splitter.setObjectName("centreSplitter")
        # The task view scrolls when the window is short, rather than squeezing its rows
        # into each other: the diff below keeps the height.
        self.task_scroll = QScrollArea(self.centre_splitter)
        self.task_scroll.setObjectName("taskScroll")
        self.task_scroll.setWidgetResizable(True)
        self.task_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.task_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.task_scroll.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Tab goes on to the actions
        self.task_view = TaskView(self.context)
        self.task_scroll.setWidget(self.task_view)
        self.tabs = QTabWidget(self.centre_splitter)
        self.tabs.setObjectName("panelTabs")
        self.revisions_panel = RevisionsPanel(self.context, self.tabs)
        self.sessions_panel = SessionsPanel(self.context, self.tabs)
        self.approvals_panel = ApprovalsPanel(self.context, self.tabs)
        self.tabs.addTab(self.revisions_panel, "Revisions")
        self.tabs.addTab(self.sessions_panel, "Sessions && Snapshots")
        self.approvals_tab = self.tabs.addTab(self.approvals_panel, "Approvals")
        # Explicit minimums keep the window usable on small screens: a pane squeezed below its
        # content's wish clips instead of forcing the window (and the screen) larger.
        self.lineage.setMinimumWidth(180)
        self.centre_splitter.setMinimumWidth(320)
        self.task_scroll.setMinimumHeight(150)
        self.tabs.setMinimumHeight(120)
        # The diff (in the tabs) gets the height it can: the task view keeps what its header,
        # actions and a few lines of output need, and grows least when the window does.
        self.main_splitter.setStretchFactor(0, 1)
        self.main_splitter.setStretchFactor(1, 3)
        self.main_splitter.setSizes([280, 920])
        self.centre_splitter.setStretchFactor(0, 1)
        self.centre_splitter.setStretchFactor(1, 2)
        self.centre_splitter.setSizes([260, 520])
        outer.addWidget(self.main_splitter, 1)
        self.setCentralWidget(central)
        # Tab moves between the window's parts; inside a table the arrow keys move (a table
        # that took Tab from cell to cell kept the keyboard from ever reaching the diff).
        for view in central.findChildren(QAbstractItemView):
            view.setTabKeyNavigation(False)
            if view.objectName() in MIDDLE_ELIDED:  # paths keep their file's name
                view.setTextElideMode(Qt.TextElideMode.ElideMiddle)

        self.data_dir_label = ElidedLabel(self)
        self.data_dir_label.setObjectName("dataDirLabel")
        data_dir = self.context.data_dir
        if data_dir is not None:
            self.data_dir_label.setText(f"Data: {data_dir}")
            self.data_dir_label.setToolTip(str(data_dir))
        self.statusBar().addPermanentWidget(self.data_dir_label, 1)
        self.activity_label = QLabel(self)
        self.activity_label.setObjectName("activityLabel")
        self.statusBar().addPermanentWidget(self.activity_label)
        self._activity_timer = QTimer(self)
        self._activity_timer.setSingleShot(True)
        self._activity_timer.setInterval(ACTIVITY_DELAY_MS)
        self._activity_timer.timeout.connect(lambda: self.activity_label.setText("Working…"))
        self.setStyleSheet(FOCUS_STYLE)

    def _build_menu(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.new_task_action = QAction(icon("task"), "&New Task…", self)
        self.new_task_action.setShortcut(QKeySequence(QKeySequence.StandardKey.New))
        self.new_task_action.triggered.connect(self.choose_folder)
        file_menu.addAction(self.new_task_action)
        file_menu.addSeparator()
        self.settings_action = QAction("&Settings…", self)
        # The platform's Preferences key is empty on Linux desktops: Ctrl+, as everywhere else.
        preferences = QKeySequence.keyBindings(QKeySequence.StandardKey.Preferences)
        self.settings_action.setShortcuts(
            [
                *preferences,
                *([] if QKeySequence("Ctrl+,") in preferences else [QKeySequence("Ctrl+,")]),
            ]
        )
        self.settings_action.setMenuRole(QAction.MenuRole.PreferencesRole)
        self.settings_action.triggered.connect(self.show_settings)
        file_menu.addAction(self.settings_action)
        self.credentials_action = QAction("&Credentials…", self)
        self.credentials_action.triggered.connect(self.show_credentials)
        file_menu.addAction(self.credentials_action)
        self.housekeeping_action = QAction("&Housekeeping…", self)
        self.housekeeping_action.triggered.connect(self.show_housekeeping)
        file_menu.addAction(self.housekeeping_action)
        file_menu.addSeparator()
        self.quit_action = QAction("&Quit", self)
        self.quit_action.setShortcut(QKeySequence(QKeySequence.StandardKey.Quit))
        self.quit_action.triggered.connect(self.close)
        file_menu.addAction(self.quit_action)

        self._build_task_menu()

        view_menu = self.menuBar().addMenu("&View")
        self.palette_action = QAction("&Command Palette…", self)
        self.palette_action.setShortcut(QKeySequence(shortcuts.COMMAND_PALETTE))
        self.palette_action.setToolTip("find any action by typing part of its name")
        self.palette_action.triggered.connect(self.show_palette)
        view_menu.addAction(self.palette_action)
        view_menu.addSeparator()
        self.refresh_action = QAction("&Refresh", self)
        self.refresh_action.setShortcut(QKeySequence(QKeySequence.StandardKey.Refresh))
        self.refresh_action.triggered.connect(self.refresh)
        view_menu.addAction(self.refresh_action)
        self.filter_action = QAction("&Filter Tasks", self)
        self.filter_action.setShortcut(QKeySequence(QKeySequence.StandardKey.Find))
        self.filter_action.triggered.connect(self._focus_filter)
        view_menu.addAction(self.filter_action)
        self.approvals_action = QAction("&Approvals", self)
        self.approvals_action.setShortcut(QKeySequence("Ctrl+Shift+A"))
        self.approvals_action.triggered.connect(self.show_approvals)
        view_menu.addAction(self.approvals_action)
        # The tree's optional Cost column, also in the tree header's menu (one action for both).
        self.lineage.cost_column_action.setText("&Cost Column")
        view_menu.addAction(self.lineage.cost_column_action)
        view_menu.addSeparator()
        self.focus_tree_action = QAction("Go to the Task &Tree", self)
        self.focus_tree_action.setShortcut(QKeySequence(shortcuts.FOCUS_TREE))
        self.focus_tree_action.triggered.connect(self.lineage.tree.setFocus)
        self.focus_actions_action = QAction("Go to the Task's A&ctions", self)
        self.focus_actions_action.setShortcut(QKeySequence(shortcuts.FOCUS_TASK))
        self.focus_actions_action.triggered.connect(self.focus_task_actions)
        self.focus_tabs_action = QAction("Go to the T&abs", self)
        self.focus_tabs_action.setShortcut(QKeySequence(shortcuts.FOCUS_TABS))
        self.focus_tabs_action.triggered.connect(self.focus_tabs)
        view_menu.addActions(
            [self.focus_tree_action, self.focus_actions_action, self.focus_tabs_action]
        )

        help_menu = self.menuBar().addMenu("&Help")
        self.system_check_action = QAction("&System Check…", self)
        self.system_check_action.triggered.connect(self.show_system_check)
        help_menu.addAction(self.system_check_action)
        self.show_log_action = QAction("Show &Log", self)
        self.show_log_action.setToolTip("open the app's log file (in the data folder's logs/)")
        self.show_log_action.triggered.connect(self.show_log)
        help_menu.addAction(self.show_log_action)
        self.copy_diagnostics_action = QAction("&Copy Diagnostics", self)
        self.copy_diagnostics_action.setToolTip(
            "versions, settings (secret names only) and the log's last lines, for a bug report"
        )
        self.copy_diagnostics_action.triggered.connect(self.copy_diagnostics)
        help_menu.addAction(self.copy_diagnostics_action)
        self.about_action = QAction("&About Cairn", self)
        self.about_action.setMenuRole(QAction.MenuRole.AboutRole)
        self.about_action.triggered.connect(self.show_about)
        help_menu.addAction(self.about_action)

    def _build_task_menu(self) -> None:
        """Every action on a task, with its keys: the task view's (the same QActions as its
        toolbar, enabled by its rules), the tree's (rename, edit, archive, delete, copy the
        id), and reconciling runs. The tree's context menu shows the same actions."""
        menu = self.menuBar().addMenu("&Task")
        menu.setObjectName("taskMenu")
        menu.setToolTipsVisible(True)
        self.task_menu = menu
        menu.addAction(self.new_task_action)
        menu.addSeparator()
        task_actions = list(self.task_view.buttons.values())
        for name, action in self.task_view.buttons.items():
            action.setShortcut(QKeySequence(TASK_SHORTCUTS[name]))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        # Resume on Host… sits beside Resume in the menus (and so in the palette), not on the
        # toolbar, whose buttons are task_actions.
        on_host = self.task_view.resume_on_host_action
        on_host.setShortcut(QKeySequence(TASK_SHORTCUTS[RESUME_ON_HOST]))
        on_host.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        menu_actions = list(task_actions)
        menu_actions.insert(menu_actions.index(self.task_view.buttons[RESUME]) + 1, on_host)
        menu.addActions(menu_actions)
        menu.addSeparator()
        menu.addActions(self.lineage.tree_actions)
        menu.addSeparator()
        self.reconcile_action = QAction("Re&concile Runs", self)
        self.reconcile_action.setToolTip(
            "settle runs that ended or were lost and follow the rest (done at start-up)"
        )
        self.reconcile_action.triggered.connect(self.reconcile)
        menu.addAction(self.reconcile_action)
        self.lineage.set_task_actions(menu_actions)
        # Connected after the task view's own handler: the stop is under way when this runs.
        self.task_view.buttons[STOP].triggered.connect(
            lambda _checked=False: self.lineage.show_stopping(self.task_view.task_id)
        )
        # A tool bar's buttons take no focus by default: Tab reaches them here.
        toolbar = self.task_view.toolbar
        buttons = []
        for action in task_actions:
            button = toolbar.widgetForAction(action)
            if isinstance(button, QToolButton):
                button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
                buttons.append(button)
        self._shortcut_tips = show_shortcuts_on(buttons, self)
        extension = toolbar.findChild(QToolButton, "qt_toolbar_ext_button")
        if extension is not None:
            extension.setFocusPolicy(Qt.FocusPolicy.TabFocus)
            extension.setToolTip("more actions")
        self.new_task_action.setToolTip("start a task from a folder")

    def show_palette(self) -> CommandPalette:
        """Ctrl+Shift+P: every menu action, found by typing."""
        palette = getattr(self, "command_palette", None)
        if palette is None:
            palette = self.command_palette = CommandPalette(self.menuBar(), self)
        palette.open_palette()
        return palette

    def focus_task_actions(self) -> None:
        """Ctrl+2: the keyboard on the first task action that can run now (else the first)."""
        toolbar = self.task_view.toolbar
        buttons = [toolbar.widgetForAction(a) for a in self.task_view.buttons.values()]
        shown = [b for b in buttons if b is not None and b.isVisible()]
        target = next((b for b in shown if b.isEnabled()), shown[0] if shown else None)
        if target is not None:
            target.setFocus(Qt.FocusReason.ShortcutFocusReason)
        else:
            self.task_view.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def focus_tabs(self) -> None:
        """Ctrl+3: the tab bar under the task (arrow keys then move between the tabs)."""
        self.tabs.tabBar().setFocus(Qt.FocusReason.ShortcutFocusReason)

    def _connect(self) -> None:
        ctx = self.context
        ctx.jobs.sig_failed.connect(self.show_failure)
        ctx.jobs.sig_busy.connect(self._show_activity)
        ctx.sig_status.connect(self.show_status)
        ctx.sig_sandbox_problem.connect(self._sandbox_problem_changed)
        ctx.followers.sig_failed.connect(self._follow_failed)
        ctx.sandbox_watch.sig_changed.connect(self._sandboxes_changed)
        self.banner.sig_retry.connect(self.check_sandboxes)
        self.lineage.sig_task_selected.connect(self._task_selected)
        self.lineage.sig_problem.connect(self._sandbox_problem_changed)
        self.task_view.sig_task_created.connect(
            lambda task_id: self.lineage.fetch_task(task_id, select=True)
        )
        self.approvals_panel.sig_count_changed.connect(self._approvals_counted)
        self.approvals_panel.sig_arrived.connect(self._approvals_arrived)
        self.sig_folders_dropped.connect(self.open_new_task_dialog)
        # "Fork from here" in the Revisions timeline
        self.revisions_panel.sig_fork_requested.connect(self.task_view.fork_from)

    # -- start-up --------------------------------------------------------------------------------

    def start(self) -> None:
        """Check the sandboxes, reconcile runs and load the tree: all in jobs."""
        self.check_sandboxes()
        self.reconcile()
        self.lineage.reload()
        self.load_defaults()
        self.context.sandbox_watch.start()

    def load_defaults(self) -> None:
        """What the window's dialogs start from: the engines and the default engine."""
        cairn = self.context.cairn

        def work() -> WindowDefaults:
            engines = engine_choices(cairn.settings.keys()["engines"])
            hosts, host = host_choices(cairn)
            return WindowDefaults(
                engines,
                cairn.settings.defaults().get("engine") or None,
                default_policies(cairn.settings, engines),
                hosts,
                host,
            )

        self.context.jobs.job(work, key="defaults", what="read the settings", parent=self).success(
            self._defaults_loaded
        ).run()

    def _defaults_loaded(self, defaults: WindowDefaults) -> None:
        self._engines = defaults.engines
        self._default_engine = defaults.engine
        self._policies = defaults.policies
        self._hosts = defaults.hosts
        self._default_host = defaults.host

    def check_sandboxes(self) -> None:
        cairn = self.context.cairn
        self.context.jobs.job(
            cairn.views.status, key="sandbox-status", what="check the sandboxes", parent=self
        ).success(self.context.set_sandbox_status).run()

    def reconcile(self) -> None:
        """Settle runs that ended or were lost while Cairn was closed, then follow the rest."""
        cairn = self.context.cairn
        self.context.jobs.job(
            cairn.runs.reconcile, write=True, what="reconcile runs and sandboxes", parent=self
        ).success(self._reconciled).run()

    def _reconciled(self, report: ReconcileReport) -> None:
        # A run whose liveness could not be told is still in flight: it is followed too, and
        # its follower goes on asking until it is known to run or to have ended.
        for run_id in [*report.still_running, *report.unknown]:
            self.context.followers.follow(run_id)
        notes = []
        if report.interrupted:
            notes.append(
                f"{len(report.interrupted)} run(s) were interrupted while Cairn was closed "
                "and can be resumed"
            )
        if report.orphan_containers:
            notes.append(
                f"containers Cairn does not know: {', '.join(report.orphan_containers)} "
                "(left as they are)"
            )
        notes.extend(
            p for p in report.problems if not p.startswith("sandboxes not checked")
        )  # the banner says that one
        if notes:
            self.show_status("; ".join(notes))
        if report.interrupted or report.finished:
            self.lineage.reload()

    def _follow_failed(self, _run_id: str, failure: JobFailure) -> None:
        """Following a run failed (its sandbox may be gone): say so in words, and let the
        sandbox watch settle it, so the run does not stay 'running' with nobody watching."""
        self.show_failure(failure)
        self.context.sandbox_watch.notice(None)

    def _sandboxes_changed(self, settled: Settled) -> None:
        """A sandbox stopped, died or vanished (Docker said so) and its runs were settled:
        every view reads its state again, so header, tree, buttons and tabs agree."""
        self.lineage.refresh_sessions()
        self.task_view.reload()
        self.sessions_panel.refresh()
        if settled.interrupted:
            self.show_status(
                f"Run {', '.join(settled.interrupted)} was interrupted: its sandbox is gone; "
                "Resume makes a new one from the last checkpoint"
            )

    def refresh(self) -> None:
        self.lineage.reload()
        self.task_view.reload()
        self.approvals_panel.reload()
        self.check_sandboxes()

    # -- state that outlives the window ----------------------------------------------------------

    def _restore_state(self) -> None:
        settings = self._settings
        geometry = settings.value(GEOMETRY_KEY)
        if not (isinstance(geometry, QByteArray) and self.restoreGeometry(geometry)):
            self.resize(*DEFAULT_SIZE)
        state = settings.value(STATE_KEY)
        if isinstance(state, QByteArray):
            self.restoreState(state)
        for splitter, key in (
            (self.main_splitter, MAIN_SPLITTER_KEY),
            (self.centre_splitter, CENTRE_SPLITTER_KEY),
        ):
            saved = settings.value(key)
            if isinstance(saved, QByteArray):
                splitter.restoreState(saved)
        tab = settings.value(TAB_KEY)
        if tab is not None and str(tab).isdigit() and int(tab) < self.tabs.count():
            self.tabs.setCurrentIndex(int(tab))
        selected = settings.value(SELECTION_KEY)
        if isinstance(selected, str) and selected:
            self.lineage.restore_selection(selected)

    def save_state(self) -> None:
        settings = self._settings
        settings.setValue(GEOMETRY_KEY, self.saveGeometry())
        settings.setValue(STATE_KEY, self.saveState())
        settings.setValue(MAIN_SPLITTER_KEY, self.main_splitter.saveState())
        settings.setValue(CENTRE_SPLITTER_KEY, self.centre_splitter.saveState())
        settings.setValue(TAB_KEY, self.tabs.currentIndex())
        selected = self.lineage.selected_task()
        if selected:
            settings.setValue(SELECTION_KEY, selected)
        settings.sync()

    save_geometry = save_state  # the name the shell used

    def closeEvent(self, event: QCloseEvent) -> None:
        self.save_state()
        if self._tray is not None:
            self._tray.hide()
        # Its dialogs go with it (the first-run check, New Task…): a dialog left open would keep
        # the app running with no window to come back to.
        for dialog in self.findChildren(QDialog):
            if dialog.isVisible():
                dialog.close()
        event.accept()

    def changeEvent(self, event: QEvent) -> None:
        palette_changed = event.type() in (
            QEvent.Type.PaletteChange,
            QEvent.Type.ApplicationPaletteChange,
        )
        if palette_changed and not getattr(self, "_repolishing", True):
            # A style sheet (the focus ring) keeps the widgets under it on the old palette: set
            # again, it lets the new one (a dark scheme switched on live) reach every widget.
            self._repolishing = True
            try:
                self.setStyleSheet(self.styleSheet())
            finally:
                self._repolishing = False
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            clear_icon_cache()
            self.lineage.refresh_icons()
            self.task_view.refresh_icons()
        super().changeEvent(event)

    # -- selection -------------------------------------------------------------------------------

    def _task_selected(self, task_id: str | None) -> None:
        self.task_view.set_task(task_id)
        self.revisions_panel.set_task(task_id)
        self.sessions_panel.set_task(task_id)
        self.approvals_panel.set_task(task_id)

    def _focus_filter(self) -> None:
        self.lineage.filter_edit.setFocus()
        self.lineage.filter_edit.selectAll()

    # -- messages --------------------------------------------------------------------------------

    def show_status(self, message: str) -> None:
        self.statusBar().showMessage(message, STATUS_TIMEOUT_MS)

    def show_failure(self, failure: JobFailure) -> None:
        """Every background failure without a handler of its own ends up here."""
        self.show_status(failure.sentence())
        if is_keyring_problem(failure.error):
            self.show_keyring_prompt(failure)

    def show_keyring_prompt(self, failure: JobFailure) -> None:
        if self.keyring_dialog is not None and self.keyring_dialog.isVisible():
            return
        dialog = KeyringDialog(describe_error(failure.error), self)
        dialog.accepted.connect(self.refresh)
        self.keyring_dialog = dialog
        dialog.open()

    def _show_activity(self, pending: int) -> None:
        """ "Working…" while jobs work (after a moment, so quick reads do not flicker), and
        nothing once they are done."""
        if pending:
            if not self._activity_timer.isActive() and not self.activity_label.text():
                self._activity_timer.start()
        else:
            self._activity_timer.stop()
            self.activity_label.setText("")

    def _sandbox_problem_changed(self, problem: str | None) -> None:
        if problem:
            self.context.set_sandbox_problem(problem)
            self.banner.show_problem(problem)
        else:
            self.banner.hide()

    # -- approvals -------------------------------------------------------------------------------

    def _approvals_counted(self, count: int) -> None:
        self.tabs.setTabText(self.approvals_tab, f"Approvals ({count})" if count else "Approvals")
        self.tabs.setTabIcon(self.approvals_tab, icon("warning") if count else QIcon())

    def _approvals_arrived(self, arrived: list) -> None:
        if self.isActiveWindow():
            return
        first = arrived[0]
        text = (
            f"{first.command}"
            if len(arrived) == 1
            else f"{len(arrived)} commands are waiting, the first: {first.command}"
        )
        self.notify("A run asks for approval", text)

    def notify(self, title: str, text: str) -> str:
        """A desktop notification when the system has a tray, else the taskbar alert; returns
        which one was used ("tray" or "alert")."""
        if QSystemTrayIcon.isSystemTrayAvailable() and QSystemTrayIcon.supportsMessages():
            if self._tray is None:
                self._tray = QSystemTrayIcon(app_icon(), self)
                self._tray.messageClicked.connect(self.show_approvals)
            self._tray.show()
            self._tray.showMessage(title, text, QSystemTrayIcon.MessageIcon.Warning)
            return "tray"
        QApplication.alert(self)
        return "alert"

    def show_approvals(self) -> None:
        self.showNormal()
        self.raise_()
        self.activateWindow()
        self.tabs.setCurrentWidget(self.approvals_panel)
        self.approvals_panel.focus_first()

    # -- settings, credentials, housekeeping, system check ----------------------------------------

    def show_settings(self) -> SettingsDialog:
        if self.settings_dialog is not None and self.settings_dialog.isVisible():
            self.settings_dialog.raise_()
            return self.settings_dialog
        dialog = SettingsDialog(self.context, self)
        page = CredentialsPage(self.context, dialog)
        page.set_task(self.lineage.selected_task())
        dialog.add_credentials_page(page)
        dialog.sig_saved.connect(self._settings_saved)
        self.settings_dialog = dialog
        dialog.open()
        return dialog

    def _settings_saved(self, keys: list[str]) -> None:
        self.load_defaults()
        if any(k.startswith(("defaults.backend", "defaults.image", "defaults.host")) for k in keys):
            self.check_sandboxes()

    def show_credentials(self) -> QDialog:
        """The keyring's secrets and the selected task's grants, in a window of their own."""
        if self.credentials_dialog is not None and self.credentials_dialog.isVisible():
            self.credentials_dialog.raise_()
            return self.credentials_dialog
        self.credentials_dialog = open_credentials_dialog(
            self.context, self, task_id=self.lineage.selected_task()
        )
        self.credentials_dialog.destroyed.connect(lambda: setattr(self, "credentials_dialog", None))
        return self.credentials_dialog

    def show_housekeeping(self) -> HousekeepingDialog:
        if self.housekeeping_dialog is not None and self.housekeeping_dialog.isVisible():
            self.housekeeping_dialog.raise_()
            return self.housekeeping_dialog
        dialog = HousekeepingDialog(self.context, self)
        dialog.finished.connect(lambda _result: self.lineage.reload())
        self.housekeeping_dialog = dialog
        dialog.open()
        return dialog

    def show_system_check(self) -> WelcomeDialog:
        """The first-run checks (Docker, keyring, git, disk), also from Help ▸ System Check."""
        if self.system_check is not None and self.system_check.isVisible():
            self.system_check.raise_()
            return self.system_check
        dialog = WelcomeDialog(self.context, self)
        dialog.sig_backend_changed.connect(lambda _backend: self.check_sandboxes())
        dialog.finished.connect(lambda _result: self.check_sandboxes())
        self.system_check = dialog
        dialog.open()
        return dialog

    def show_log(self) -> None:
        """Help ▸ Show Log: the log file in the desktop's viewer; whether there is one is asked
        off the GUI thread (it is a look at the disk)."""
        data_dir = self.context.data_dir
        if data_dir is None:
            return
        path = log_path(data_dir)
        self.context.jobs.job(path.is_file, what="find the log file", parent=self).success(
            lambda exists: self._open_log(path, exists)
        ).run()

    def _open_log(self, path: Path, exists: bool) -> None:
        if not exists:
            self.show_status("there is no log file yet")
        elif not QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
            self.show_status(f"no program to open {path}; it is a text file")

    def copy_diagnostics(self) -> None:
        """Help ▸ Copy Diagnostics: gathered in a job, then put on the clipboard."""
        data_dir = self.context.data_dir
        if data_dir is None:
            return
        settings = self.context.cairn.settings.read
        qt_version = qVersion()

        def work() -> str:
            return diagnostics(data_dir, settings, qt_version=qt_version)

        self.context.jobs.job(work, what="gather diagnostics", parent=self).success(
            self._diagnostics_ready
        ).run()

    def _diagnostics_ready(self, text: str) -> None:
        clipboard = QGuiApplication.clipboard()
        if clipboard is not None:
            clipboard.setText(text)
        self.show_status("diagnostics copied: paste them into your bug report")

    def show_about(self) -> None:
        from core import __version__

        data_dir = self.context.data_dir
        QMessageBox.about(
            self,
            "About Cairn",
            f"<b>Cairn {__version__}</b><p>Run coding agents on your repositories in isolated, "
            "recorded and resumable workspaces.</p>"
            + (f"<p>Data: {html.escape(str(data_dir))}</p>" if data_dir else ""),
        )

    # -- new tasks -------------------------------------------------------------------------------

    def choose_folder(self) -> None:
        """File ▸ New Task: pick a folder, then the same dialog as a drop."""
        folder = QFileDialog.getExistingDirectory(self, "Start a task from a folder")
        if folder:
            self.offer_paths([Path(folder)])

    def offer_paths(self, paths: Iterable[Path]) -> None:
        """Paths from a drop, the folder chooser or the command line: checked in a job, then
        the New Task dialog for the folders and a message for the rest."""
        paths = list(paths)
        if not paths:
            return
        self.context.jobs.job(
            lambda: sort_paths(paths), prompt=True, what="look at the dropped items", parent=self
        ).success(self._paths_sorted).run()

    def _paths_sorted(self, sorted_paths: SortedPaths) -> None:
        refused = sorted_paths.message()
        if refused:
            self.show_status(refused)
        if not sorted_paths.folders:
            return
        folders = sorted_paths.folders
        check = self.system_check
        if check is not None and check.isVisible():
            # The first-run check comes first (`cairn ~/repo` on a first start): New Task opens
            # when it is closed, not stacked over it.
            check.finished.connect(
                lambda _result: self.sig_folders_dropped.emit(folders),
                Qt.ConnectionType.SingleShotConnection,
            )
            return
        self.sig_folders_dropped.emit(folders)

    def open_new_task_dialog(self, folders: list[Path]) -> NewTaskDialog:
        dialog = NewTaskDialog(
            folders,
            self._engines,
            self,
            default_engine=self._default_engine,
            policies=self._policies,
            hosts=self._hosts,
            default_host=self._default_host,
        )
        dialog.accepted.connect(lambda: self.create_tasks(dialog.requests()))
        self.new_task_dialog = dialog
        dialog.open()
        return dialog

    def create_tasks(self, requests: list[NewTaskRequest]) -> None:
        cairn = self.context.cairn
        for request in requests:

            def work(r: NewTaskRequest = request):
                made = cairn.tasks.new(
                    r.folder,
                    title=r.title,
                    engine=r.engine,
                    instructions=r.instructions,
                    host=r.host,
                )
                return task_row(cairn, made.task.id), made.note

            def created(result, r: NewTaskRequest = request) -> None:
                row, note = result
                self.lineage.add_task_row(row)
                self.lineage.select_task(row.task_id)
                said = f"Task “{row.title}” created from {r.folder}"
                self.show_status(f"{said}. Note: {note}" if note else said)
                if r.start:
                    self.start_task(row.task_id, row.title, r.engine, r.instructions)

            self.context.jobs.job(
                work, write=True, what=f"create a task from {request.folder}", parent=self
            ).success(created).failure(self.task_view.report_failure).run()

    def start_task(self, task_id: str, title: str, engine: str, instructions: str) -> None:
        """Start a task's first run (New Task's Create and Start), then follow it."""
        cairn = self.context.cairn
        commands, prompt = run_arguments(engine, instructions)
        self.show_status(f"Starting the run of “{title}”…")

        def started(run) -> None:
            self.show_status(f"Started a run of {title}")
            if run is not None and run.state in FOLLOWABLE:
                self.context.followers.follow(run.id)
            self.task_view.reload()

        self.context.jobs.job(
            lambda: cairn.runs.start(task_id, commands=commands, prompt=prompt),
            write=True,
            what=f"start the run of {title}",
            parent=self,
        ).success(started).failure(self.task_view.report_failure).run()

    # -- drag and drop ---------------------------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        # Any local item is accepted here so that dropping a file can explain why it is refused.
        if _local_paths(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if _local_paths(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = _local_paths(event.mimeData())
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.show_status("Looking at what was dropped…")
        self.offer_paths(paths)
