"""`cairnctl`: Cairn on the command line, for scripts and checks, over the same facade as the GUI.

Owns argument parsing and output (plain text, or one JSON object with --json); every decision
is the facade's. Errors exit 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from core.app import Cairn
from core.views import revision_json, snapshot_json
from core.diffs import diff_to_json, render_unified
from core.errors import CairnError
from core.redact import install_log_redaction, redact_exception
from core.workspaces import human_size

EXIT_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: one line, exit 2
        sys.stderr.write(f"cairnctl: {message}\n")
        raise SystemExit(EXIT_ERROR)


def _common(p: argparse.ArgumentParser, *, top: bool) -> None:
    default = None if top else argparse.SUPPRESS
    p.add_argument("--data-dir", default=default, help="Cairn's data folder (or CAIRN_DATA_DIR)")
    p.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print one JSON object",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cairnctl", description="Cairn on the command line.")
    _common(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        _common(p, top=False)
        return p

    p = add("new", "import a folder and start a task on a new workspace")
    p.add_argument("path")
    p.add_argument("--title")
    p.add_argument(
        "--engine", help="the task's engine (default: the setting defaults.engine, else shell)"
    )
    p.add_argument(
        "-m",
        "--message",
        default="",
        help="the task's instructions; given, the first run starts at once",
    )
    p.add_argument("--quota", type=_size, help="disk quota of the workspace, e.g. 2G")
    p.add_argument("--expires-in", type=_duration, help="expiry of the workspace, e.g. 30d or 12h")
    p.add_argument("--detach", action="store_true", help="start the first run and return")
    p.add_argument(
        "--network",
        choices=["none", "allowlist", "open"],
        help="the sandbox's network policy from the start (default: the setting "
        "defaults.network, else none)",
    )
    p.add_argument(
        "--allow", action="append", default=[], help="host:port reachable under allowlist"
    )
    p = add("continue", "a child task that keeps working in the parent's workspace and session")
    p.add_argument("task")
    p.add_argument("-m", "--message", required=True)
    p.add_argument("--title")
    p.add_argument("--detach", action="store_true")
    p = add("fork", "a child task with its own workspace from a revision of the parent")
    p.add_argument("task")
    p.add_argument("--at", dest="at_revision", help="the revision to fork from (default: latest)")
    p.add_argument("-m", "--message", required=True)
    p.add_argument("--title")
    p.add_argument("--detach", action="store_true")
    add("tasks", "list tasks as lineage trees")
    p = add("show", "show a task, its workspace, revisions and snapshots")
    p.add_argument("task")
    p = add("revisions", "list a task's revisions")
    p.add_argument("task")
    p = add("capture", "record the workspace's files now (a full, verifying capture)")
    p.add_argument("task")
    p.add_argument(
        "--trigger",
        default="manual",
        choices=("manual", "watch", "checkpoint", "external"),
        help="what the revision says caused it (default: manual)",
    )
    p.add_argument("--run", default=None, metavar="RUN", help="the run whose edits these are")
    p = add("watch", "record every change of a task's workspace until interrupted")
    p.add_argument("task")
    p = add("diff", "diff two revisions (default: base to latest); REV may be TASK:REV")
    p.add_argument("task")
    p.add_argument("rev_a", nargs="?")
    p.add_argument("rev_b", nargs="?")
    p.add_argument("--max-bytes", type=int, default=2_000_000)
    p = add("snapshot", "make a durable snapshot of a task's workspace")
    p.add_argument("task")
    p = add("materialize", "restore a snapshot's files into a new folder")
    p.add_argument("snapshot")
    p.add_argument("dir")

    p = add("run", "run commands in the task's sandbox (the shell engine): run TASK -- CMD...")
    p.add_argument("task")
    p.add_argument("--detach", action="store_true", help="start the run and return")
    p.add_argument(
        "--step",
        action="append",
        default=[],
        help="one command of a multi-step run (repeatable) instead of -- CMD",
    )
    p.add_argument("argv", nargs="*", metavar="CMD", help="the command, after --")
    p = add("checkpoint", "write a checkpoint of the task's run now")
    p.add_argument("task")
    p = add("follow", "observe the task's run in flight until it ends")
    p.add_argument("task")
    add("status", "every sandbox session and snapshot: state, image, age, size")
    p = add("stop", "cancel the task's run in flight and stop its sandbox")
    p.add_argument("task")
    p = add("resume", "resume the task's interrupted run (the resume ladder)")
    p.add_argument("task")
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--on-top",
        action="store_true",
        help="keep edits made outside Cairn and continue on top of them",
    )
    g.add_argument(
        "--restore-into-new",
        action="store_true",
        help="restore the last checkpoint into a new workspace (the edited one is kept)",
    )
    p.add_argument("--accept-tool-change", action="store_true")
    p.add_argument("--detach", action="store_true", help="resume and return")
    add("reconcile", "match containers and runs with the store; list orphans (deletes nothing)")
    p = add("secret", "keep a secret in the OS keyring (the value is read from stdin)")
    p.add_argument("action", choices=["set", "rm", "list"])
    p.add_argument("name", nargs="?")
    p = add("grant", "give a task's lineage a keyring secret as an environment variable")
    p.add_argument("task")
    p.add_argument("name")
    p.add_argument("--env", required=True, dest="env_var")
    p = add("revoke", "take a secret back from a task's lineage")
    p.add_argument("task")
    p.add_argument("name")
    p = add("policy", "show or tighten/loosen the task's sandbox policy (a new version)")
    p.add_argument("task")
    p.add_argument("--network", choices=["none", "allowlist", "open"])
    p.add_argument("--allow", action="append", help="host:port reachable under allowlist")
    p.add_argument(
        "--secrets",
        help="comma-separated secret names the sandbox may receive ('*' for every granted one)",
    )
    p.add_argument("--pids", type=int)
    p.add_argument("--memory", type=_size)
    # -- artifacts, promotion, patches and engine settings
    p = add(
        "promote",
        "take a revision out of the sandbox: as a new branch in your repository "
        "(--branch) or as an artifact (--artifact); scanned for secrets first",
    )
    p.add_argument("task")
    p.add_argument("--revision", help="revision id, base, latest (default) or TASK:REV")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--branch", help="create this branch in the task's source repository")
    g.add_argument(
        "--artifact",
        action="store_true",
        help="store a file (--path) or the whole revision as a content-addressed artifact",
    )
    p.add_argument("--path", help="with --artifact: one file of the revision")
    p.add_argument(
        "--evidence",
        help="with --artifact: a file (or - for stdin) kept with the "
        "artifact as validation evidence, e.g. test output",
    )
    p = add("export", "print the task's changes since the import as a patch (git apply / git am)")
    p.add_argument("task")
    p.add_argument("--revision", help="revision id, base, latest (default) or TASK:REV")
    p.add_argument(
        "--from",
        dest="since",
        choices=["base", "head"],
        default="base",
        help="base (default): the folder as imported, uncommitted files included; "
        "head: the repository's HEAD at import",
    )
    p = add("artifacts", "list promoted artifacts")
    p.add_argument("task", nargs="?")
    p.add_argument("--verify", action="store_true", help="re-hash every listed artifact")
    p = add(
        "config",
        "settings: config set engines.ENGINE.KEY VALUE | set defaults.KEY VALUE "
        "(engine, image, network, allow, backend) | get KEY | unset KEY | show",
    )
    p.add_argument("action", choices=["set", "get", "unset", "show"])
    p.add_argument("key", nargs="?")
    p.add_argument("value", nargs="?")
    # -- approvals
    p = add(
        "approvals",
        "commands waiting for a person's approval: id, task, command, rule, "
        "time waiting (--all: every request and its decision)",
    )
    p.add_argument("--all", action="store_true", help="decided requests too, newest last")
    p = add("approve", "let a waiting command run")
    p.add_argument("approval", help="the approval id (or an unambiguous prefix)")
    p.add_argument(
        "--remember",
        action="store_true",
        help="also let this exact command run without asking for the rest of the task",
    )
    p = add("deny", "refuse a waiting command (the run is told why)")
    p.add_argument("approval", help="the approval id (or an unambiguous prefix)")
    p.add_argument("--reason", help="said to the run with the refusal")
    # -- housekeeping
    p = add(
        "archive",
        "archive a task's workspace: snapshot it; its files go at the next "
        "housekeeping (history stays); refused while anything of it runs",
    )
    p.add_argument("task")
    p = add(
        "unarchive",
        "bring an archived workspace back (its files restored from its newest "
        "snapshot when they were removed)",
    )
    p.add_argument("task")
    p = add(
        "housekeeping",
        "show the data folder's disk use and what a cleanup would free; --yes cleans",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="only show the plan (the default without --yes)"
    )
    p.add_argument("--yes", action="store_true", help="carry out the cleanup")
    return parser


def _size(text: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        value = int(float(num) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 500M or 2G)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a quota must be positive: {text!r}")
    return value


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 12h or 30d)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive: {text!r}")
    return value


def _emit(args: argparse.Namespace, obj: dict, text: str | Callable[[], str]) -> None:
    if args.json:
        sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    else:
        sys.stdout.write((text() if callable(text) else text).rstrip("\n") + "\n")


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def cmd_new(app: Cairn, args: argparse.Namespace) -> None:
    from core.policy import Policy

    # Without --network or --allow the settings' defaults apply (defaults.network, .allow).
    policy = (
        Policy(network=args.network or "none", allow=tuple(args.allow))
        if args.network or args.allow
        else None
    )
    made = app.tasks.new(
        args.path,
        title=args.title,
        engine=args.engine,
        instructions=args.message,
        quota_bytes=args.quota,
        expires_in=args.expires_in,
        policy=policy,
    )
    obj = {
        "task_id": made.task.id,
        "workspace_id": made.workspace.id,
        "workspace_root": made.workspace.root,
        "base_revision": made.base_revision,
    }
    text = (
        f"task {made.task.id} ({made.task.title})\n"
        f"workspace {made.workspace.id} at {made.workspace.root}\n"
        f"base revision {made.base_revision}"
    )
    if not args.message:
        _emit(args, obj, text)
        return
    if not args.json:
        print(text, flush=True)
    run = app.runs.start(made.task.id, prompt=args.message)
    _finish_run_command(app, args, run, obj)


def _finish_run_command(app: Cairn, args: argparse.Namespace, run: Any, obj: dict) -> None:
    """Follow a run a command started (unless --detach) and report it with `obj`."""
    result = _run_json(run) if args.detach else _follow(app, args, run.id)
    _emit(
        args,
        {**obj, **result},
        lambda: (
            f"run {result['run_id']} {result['state']}"
            + (f" (exit code {result['exit_code']})" if result["exit_code"] is not None else "")
            + (f": {result['note']}" if result["note"] and result["state"] != "succeeded" else "")
        ),
    )
    if result["state"] not in ("succeeded", "running", "preparing", "queued"):
        raise SystemExit(1)


def cmd_continue(app: Cairn, args: argparse.Namespace) -> None:
    child, run = app.tasks.continue_from(args.task, args.message, title=args.title)
    _finish_run_command(
        app,
        args,
        run,
        {
            "task_id": child.id,
            "parent_task_id": child.parent_task_id,
            "workspace_id": child.workspace_id,
        },
    )


def cmd_fork(app: Cairn, args: argparse.Namespace) -> None:
    child, run = app.tasks.fork(
        args.task, args.message, at_revision=args.at_revision, title=args.title
    )
    ws = app.tasks.workspace_of(child)
    _finish_run_command(
        app,
        args,
        run,
        {
            "task_id": child.id,
            "parent_task_id": child.parent_task_id,
            "workspace_id": ws.id,
            "workspace_root": ws.root,
            "from_revision": child.from_revision,
        },
    )


def cmd_tasks(app: Cairn, args: argparse.Namespace) -> None:
    rows = []
    states = {}
    for t in app.tasks.all():
        ws = app.ctx.store.get_workspace(t.workspace_id) if t.workspace_id else None
        run = app.runs.latest(t)
        states[t.id] = run.state if run else (ws.state if ws else "-")
        rows.append(
            {
                "task_id": t.id,
                "title": t.title,
                "engine": t.engine,
                "source": t.source,
                "parent_task_id": t.parent_task_id,
                "from_revision": t.from_revision,
                "workspace_id": t.workspace_id,
                "state": ws.state if ws else None,
                "run_state": run.state if run else None,
                "created_at": t.created_at,
            }
        )

    def tree() -> str:
        children: dict[str | None, list[dict]] = {}
        for r in rows:
            children.setdefault(r["parent_task_id"], []).append(r)
        lines: list[str] = []

        def walk(row: dict, prefix: str, last: bool, top: bool) -> None:
            branch = "" if top else ("└─ " if last else "├─ ")
            how = "" if top else f"[{row['source']}] "
            lines.append(
                f"{prefix}{branch}{row['task_id']}  {states[row['task_id']]:16}  "
                f"{how}{row['title']}  ({row['engine']})"
            )
            kids = children.get(row["task_id"], [])
            for i, kid in enumerate(kids):
                walk(
                    kid,
                    prefix + ("" if top else ("   " if last else "│  ")),
                    i == len(kids) - 1,
                    False,
                )

        for root in children.get(None, []):
            walk(root, "", True, True)
        return "\n".join(lines) or "no tasks"

    _emit(args, {"tasks": rows}, tree)


def cmd_show(app: Cairn, args: argparse.Namespace) -> None:
    d = app.views.task_details(args.task)

    def text() -> str:
        lines = [
            f"task       {d['task_id']}  {d['title']}",
            f"engine     {d['engine']}",
            f"source     {d['source_path']}",
            f"workspace  {d['workspace_id']}  {d['state']}  {d['workspace_root']}"
            + ("" if d["workspace_present"] else "  (missing on disk)"),
            f"branch     {d['branch']}",
            f"revisions  {len(d['revisions'])}, latest {(d['current_revision'] or '-')[:12]}",
            f"snapshots  {len(d['snapshots'])}",
        ]
        return "\n".join(lines)

    _emit(args, d, text)


def cmd_revisions(app: Cairn, args: argparse.Namespace) -> None:
    revs = [revision_json(r) for r in app.revisions.all(args.task)]
    _emit(
        args,
        {"revisions": revs},
        lambda: "\n".join(
            f"{r['seq']:>4}  {r['id'][:12]}  {_when(r['created_at'])}  {r['trigger']:10}  "
            f"{r['files_changed']} file(s)" + (f"  run {r['run_id']}" if r["run_id"] else "")
            for r in revs
        ),
    )


def cmd_capture(app: Cairn, args: argparse.Namespace) -> None:
    rev, changed = app.revisions.capture(args.task, trigger=args.trigger, run_id=args.run)
    _emit(
        args,
        {
            "revision": rev.id,
            "changed": changed,
            "files_changed": rev.files_changed if changed else 0,
        },
        f"{rev.id}" + ("" if changed else "  (no change since the last revision)"),
    )


def cmd_watch(app: Cairn, args: argparse.Namespace) -> None:
    recorded: list[dict] = []
    stop = threading.Event()

    def on_event(event: Any) -> None:
        if event.kind == "revision.recorded":
            recorded.append(
                {
                    "id": event.payload["revision"],
                    "trigger": event.payload["trigger"],
                    "files_changed": event.payload["files_changed"],
                }
            )
            if not args.json:
                print(
                    f"{event.payload['revision'][:12]}  {event.payload['trigger']}  "
                    f"{event.payload['files_changed']} file(s)",
                    flush=True,
                )

    app.events.subscribe(on_event)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    task = app.tasks.get(args.task)
    app.revisions.watch(task.id)
    if not args.json:
        print(f"watching {app.tasks.workspace_of(task).root} (Ctrl-C to stop)", flush=True)
    while not stop.wait(0.2):
        pass
    app.revisions.stop_watching(task.workspace_id or "")
    if args.json:
        _emit(args, {"task_id": task.id, "revisions": recorded}, "")


def cmd_diff(app: Cairn, args: argparse.Namespace) -> None:
    diff = app.revisions.diff(args.task, args.rev_a, args.rev_b, max_bytes=args.max_bytes)
    _emit(args, diff_to_json(diff), lambda: render_unified(diff))


def cmd_snapshot(app: Cairn, args: argparse.Namespace) -> None:
    snap = app.snapshots.take(args.task)
    _emit(
        args,
        {
            "snapshot_id": snap.id,
            "revision": snap.revision_id,
            **{
                k: v for k, v in snapshot_json(snap).items() if k not in ("snapshot_id", "revision")
            },
        },
        f"snapshot {snap.id} of revision {snap.revision_id}",
    )


def cmd_materialize(app: Cairn, args: argparse.Namespace) -> None:
    root, tree = app.snapshots.materialize(args.snapshot, args.dir)
    _emit(args, {"root": str(root), "tree": tree}, f"restored into {root} (tree {tree})")


def _print_output(stream: str, text: str) -> None:
    target = sys.stdout if stream == "stdout" else sys.stderr
    target.write(text)
    target.flush()


def _follow(app: Cairn, args: argparse.Namespace, run_id: str) -> dict:
    """Observe until the run ends; Ctrl-C stops observing, never the run."""
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run = app.runs.follow(
        run_id, on_output=None if args.json else _print_output, should_stop=stop.is_set, record=True
    )
    return _run_json(run)


def _run_json(run: Any) -> dict:
    return {
        "run_id": run.id,
        "task_id": run.task_id,
        "state": run.state,
        "exit_code": run.exit_code,
        "attempt": run.attempt,
        "note": run.note,
        "resume_report": run.resume_report,
    }


def cmd_run(app: Cairn, args: argparse.Namespace) -> None:
    command = list(args.argv)
    steps = list(args.step)
    if command:
        steps.append(" ".join(_shell_quote(c) for c in command) if len(command) > 1 else command[0])
    if not steps:
        raise CairnError("give the command after --, e.g. cairnctl run TASK -- make test")
    run = app.runs.start(args.task, commands=steps)
    _finish_run_command(app, args, run, {})


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def cmd_follow(app: Cairn, args: argparse.Namespace) -> None:
    task = app.tasks.get(args.task)
    run = app.runs.latest(task)
    if run is None:
        raise CairnError(f"task {task.id} has no run")
    if run.state in ("running", "waiting_approval", "preparing", "queued"):
        app.runs.settle(run)
    result = _follow(app, args, run.id)
    _emit(args, result, lambda: f"run {result['run_id']} {result['state']}")


def cmd_checkpoint(app: Cairn, args: argparse.Namespace) -> None:
    ck = app.runs.checkpoint(args.task)
    _emit(
        args,
        {
            "checkpoint_id": ck.id,
            "run_id": ck.run_id,
            "snapshot_id": ck.snapshot_id,
            "workspace_ref": ck.workspace_ref,
            "tree": ck.tree,
            "run_state_version": ck.run_state_version,
            "pending_step": ck.pending_step,
        },
        f"checkpoint {ck.id} of run {ck.run_id} (snapshot {ck.snapshot_id})",
    )


def cmd_status(app: Cairn, args: argparse.Namespace) -> None:
    st = app.views.status()

    def text() -> str:
        lines = []
        if st["problem"]:
            lines.append(f"sandboxes: {st['problem']}")
        for s in st["sessions"]:
            size = "?" if s.get("size") is None else human_size(s["size"])
            unsafe = "  UNSAFE: no isolation" if s.get("unsafe") else ""
            lines.append(
                f"session {s['session_id']}  {s['state']:8}  {s['container']}  "
                f"image {(s['image'] or '?')[:19]}  gen {s['generation']}  "
                f"snapshot {s['snapshot_id']}  {size}  {_age(s['age_s'])} old{unsafe}"
            )
        for s in st["snapshots"]:
            size = "?" if s["size"] is None else human_size(s["size"])
            lines.append(
                f"snapshot {s['snapshot_id']}  {s['revision'][:12]}  {size}  "
                f"{_age(s['age_s'])} old  "
                + ("restorable" if s["restorable"] else "NOT restorable")
            )
        return "\n".join(lines) or "no sessions or snapshots"

    _emit(args, st, text)


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def cmd_stop(app: Cairn, args: argparse.Namespace) -> None:
    result = app.runs.stop(args.task)
    _emit(
        args,
        result,
        lambda: (
            (f"run {result['run']} cancelled; " if result["run"] else "")
            + (
                f"sandbox {result['sandbox']} stopped"
                if result["sandbox"]
                else "no sandbox running"
            )
        ),
    )


def cmd_resume(app: Cairn, args: argparse.Namespace) -> None:
    from core.runs.ladder import ON_TOP, RESTORE_INTO_NEW

    choice = ON_TOP if args.on_top else RESTORE_INTO_NEW if args.restore_into_new else None
    run, report = app.runs.resume(
        args.task, choice=choice, accept_tool_change=args.accept_tool_change
    )
    if not args.json:
        print("resumed: " + report.summary(), flush=True)
        for note in report.notes:
            print(f"  {note}", flush=True)
    if args.detach:
        _emit(args, {**_run_json(run), "report": report.to_dict()}, f"run {run.id} running")
        return
    result = _follow(app, args, run.id)
    _emit(
        args,
        {**result, "report": report.to_dict()},
        lambda: f"run {result['run_id']} {result['state']}",
    )


def cmd_reconcile(app: Cairn, args: argparse.Namespace) -> None:
    report = app.runs.reconcile().to_dict()
    _emit(
        args,
        report,
        lambda: "\n".join(f"{k}: {', '.join(v) if v else '-'}" for k, v in report.items()),
    )


def cmd_secret(app: Cairn, args: argparse.Namespace) -> None:
    secrets = app.credentials.secrets
    if args.action == "list":
        names = secrets.names()
        _emit(args, {"secrets": names}, "\n".join(names) or "no secrets")
        return
    if not args.name:
        raise CairnError(f"secret {args.action} needs a NAME")
    if args.action == "set":
        value = sys.stdin.read().rstrip("\n")
        if not value:
            raise CairnError(
                "no value on stdin (pipe the secret in: ... | cairnctl secret set NAME)"
            )
        secrets.set(args.name, value)
        _emit(args, {"secret": args.name, "set": True}, f"secret {args.name} stored in the keyring")
    else:
        secrets.delete(args.name)
        _emit(args, {"secret": args.name, "removed": True}, f"secret {args.name} removed")


def cmd_grant(app: Cairn, args: argparse.Namespace) -> None:
    task = app.tasks.get(args.task)
    grant = app.credentials.grant(task.id, args.name, args.env_var)
    _emit(
        args,
        {"grant_id": grant.id, "task_id": task.id, "secret": args.name, "env": args.env_var},
        f"{args.name} → ${args.env_var} for {task.id} and its descendants",
    )


def cmd_revoke(app: Cairn, args: argparse.Namespace) -> None:
    task = app.tasks.get(args.task)
    revoked = app.credentials.revoke(task.id, args.name)
    _emit(
        args,
        {"task_id": task.id, "secret": args.name, "revoked": len(revoked)},
        f"{args.name} revoked for {task.id}",
    )


def cmd_policy(app: Cairn, args: argparse.Namespace) -> None:
    changes: dict[str, Any] = {}
    if args.network:
        changes["network"] = args.network
    if args.allow is not None:
        changes["allow"] = args.allow
    if args.secrets is not None:
        changes["secrets"] = (
            None
            if args.secrets.strip() == "*"
            else [n for n in args.secrets.split(",") if n.strip()]
        )
    limits = {k: v for k, v in (("pids", args.pids), ("memory_bytes", args.memory)) if v}
    if limits:
        changes["limits"] = limits
    if changes:
        policy = app.tasks.set_policy(args.task, **changes)
    else:
        policy = app.tasks.policy_of(app.tasks.workspace_of(app.tasks.get(args.task)))
    _emit(args, policy.to_dict(), lambda: json.dumps(policy.to_dict(), indent=2))


def cmd_promote(app: Cairn, args: argparse.Namespace) -> None:
    if args.branch is not None:
        if args.path or args.evidence:
            raise CairnError("--path and --evidence go with --artifact, not --branch")
        made = app.artifacts.promote_to_branch(args.task, args.branch, revision=args.revision)
        _emit(
            args,
            made.to_json(),
            f"branch {made.branch} created in {made.repository} "
            f"at {made.commit} (revision {made.revision[:12]})",
        )
        return
    evidence = name = None
    if args.evidence:
        name = "stdin" if args.evidence == "-" else os.path.basename(args.evidence)
        try:
            if args.evidence == "-":
                evidence = sys.stdin.buffer.read()
            else:
                with open(args.evidence, "rb") as f:
                    evidence = f.read()
        except OSError as exc:
            raise CairnError(
                f"cannot read the evidence file {args.evidence}: {exc.strerror}"
            ) from None
    art = app.artifacts.promote(
        args.task, revision=args.revision, path=args.path, evidence=evidence, evidence_name=name
    )
    _emit(
        args,
        art.to_json(),
        f"artifact {art.id}  {art.kind}  sha256 {art.sha256}"
        + (f"  {art.path}" if art.path else ""),
    )


def cmd_export(app: Cairn, args: argparse.Namespace) -> None:
    patch = app.artifacts.export_patch(args.task, revision=args.revision, since=args.since)
    if args.json:
        _emit(
            args,
            {
                "task_id": app.tasks.get(args.task).id,
                "from": args.since,
                "patch": patch.decode("utf-8", "replace"),
            },
            "",
        )
        return
    sys.stdout.flush()
    sys.stdout.buffer.write(patch)
    sys.stdout.buffer.flush()


def cmd_artifacts(app: Cairn, args: argparse.Namespace) -> None:
    arts = app.artifacts.all(args.task)
    rows = []
    for art in arts:
        row = art.to_json()
        if args.verify:
            try:
                app.artifacts.verify(art.id)
                row["verified"] = True
            except CairnError as exc:
                row["verified"], row["problem"] = False, str(exc)
        rows.append(row)

    def text() -> str:
        lines = []
        for r in rows:
            size = "?" if r["size"] is None else human_size(r["size"])
            check = "" if "verified" not in r else ("  ok" if r["verified"] else "  CORRUPT")
            lines.append(
                f"{r['artifact_id']}  {_when(r['created_at'])}  {r['kind']:8}  "
                f"{r['sha256'][:16]}  {size:>8}  {r['task_id']}  "
                f"{r['path'] or (r['revision'] or '')[:12]}{check}"
            )
        return "\n".join(lines) or "no artifacts"

    _emit(args, {"artifacts": rows}, text)
    if any(r.get("verified") is False for r in rows):
        raise CairnError(next(r["problem"] for r in rows if r.get("verified") is False))


def cmd_config(app: Cairn, args: argparse.Namespace) -> None:
    from core.settings import read_settings, settings_path

    if args.action == "show":
        if args.key or args.value:
            raise CairnError("config show takes no key")
        data = read_settings(settings_path(app.data.root))
        _emit(
            args,
            data,
            lambda: json.dumps(data, indent=2, sort_keys=True) if data else "no settings",
        )
        return
    if not args.key:
        raise CairnError(
            f"config {args.action} needs a KEY, e.g. engines.codex.model or defaults.engine"
        )
    if args.action == "set":
        if args.value is None:
            raise CairnError("config set needs a VALUE: config set KEY VALUE")
        stored = app.settings.set(args.key, args.value)
        _emit(args, {"key": args.key, "value": stored}, f"{args.key} = {stored}")
        return
    if args.value is not None:
        raise CairnError(f"config {args.action} takes a KEY only")
    if args.action == "unset":
        removed = app.settings.unset(args.key)
        _emit(
            args,
            {"key": args.key, "removed": removed},
            f"{args.key} removed" if removed else f"{args.key} was not set",
        )
        return
    value = app.settings.get(args.key)
    if value is None:
        if args.json:
            _emit(args, {"key": args.key, "value": None}, "")
        raise SystemExit(1)  # like `git config --get`: unset is exit 1 with nothing printed
    _emit(
        args,
        {"key": args.key, "value": value},
        lambda: (
            json.dumps(value, indent=2, sort_keys=True) if isinstance(value, dict) else str(value)
        ),
    )


def _approval_text(a: Any, now: float) -> str:
    head = f"{a.id}  task {a.task_id}  {a.state}"
    if a.state == "pending":
        head += f"  waiting {_age(a.waiting_s(now))}"
        if a.timeout_at:
            head += f" (denied in {_age(max(0.0, a.timeout_at - now))})"
    elif a.decided_by:
        head += f"  by {a.decided_by}"
    why = f"  [{a.rule}] {a.reason}" if a.rule else ""
    return f"{head}{why}\n    $ {a.command}"


def cmd_approvals(app: Cairn, args: argparse.Namespace) -> None:
    pending = app.approvals.pending()
    found = app.approvals.list(pending_only=False) if args.all else pending
    now = time.time()
    _emit(
        args,
        {"approvals": [a.to_json(now) for a in found]},
        lambda: (
            "\n".join(_approval_text(a, now) for a in found)
            or ("no approvals" if args.all else "nothing waits for approval")
        ),
    )


def cmd_approve(app: Cairn, args: argparse.Namespace) -> None:
    a = app.approvals.approve(args.approval, remember=args.remember)
    _emit(
        args,
        a.to_json(),
        f"approved {a.id}: {a.command}" + ("  (remembered for this task)" if args.remember else ""),
    )


def cmd_deny(app: Cairn, args: argparse.Namespace) -> None:
    a = app.approvals.deny(args.approval, reason=args.reason)
    _emit(args, a.to_json(), f"denied {a.id}: {a.command}")


def cmd_archive(app: Cairn, args: argparse.Namespace) -> None:
    ws = app.housekeeping.archive(args.task)
    _emit(
        args,
        {"workspace_id": ws.id, "state": ws.state},
        f"workspace {ws.id} archived (its files go at the next `cairnctl housekeeping --yes`)",
    )


def cmd_unarchive(app: Cairn, args: argparse.Namespace) -> None:
    ws = app.housekeeping.unarchive(args.task)
    _emit(
        args,
        {"workspace_id": ws.id, "state": ws.state, "root": ws.root},
        f"workspace {ws.id} is {ws.state} again at {ws.root}",
    )


def cmd_housekeeping(app: Cairn, args: argparse.Namespace) -> None:
    from core.humanize import size as human_bytes

    if args.yes and args.dry_run:
        raise CairnError("give --dry-run or --yes, not both")
    plan = app.housekeeping.plan()
    result = app.housekeeping.clean(plan) if args.yes else None

    def text() -> str:
        u = plan.usage
        lines = [f"data folder {u.root}: {human_bytes(u.total)}"]
        lines += [f"  {name:11} {human_bytes(size):>10}" for name, size in u.parts.items()]
        if plan.empty:
            lines.append("nothing to clean up")
        for item in plan.items:
            lines.append(f"{human_bytes(item.bytes):>10}  {item.description}")
        lines += [f"note: {n}" for n in plan.notes]
        if result is None:
            if not plan.empty:
                lines.append(
                    f"will free {human_bytes(plan.total)} "
                    "(dry run; `cairnctl housekeeping --yes` cleans)"
                )
        else:
            lines += [f"skipped: {s.item.description}: {s.reason}" for s in result.skipped]
            lines += [f"note: {n}" for n in result.notes]
            lines.append(f"freed {human_bytes(result.freed)}")
        return "\n".join(lines)

    _emit(
        args,
        {
            "plan": plan.to_json(),
            "dry_run": result is None,
            "result": result.to_json() if result is not None else None,
        },
        text,
    )


def _warn_problems(event: Any) -> None:
    if event.kind == "workspace.problem":
        print(f"cairnctl: warning: {event.payload['message']}", file=sys.stderr, flush=True)


COMMANDS: dict[str, Callable[[Cairn, argparse.Namespace], None]] = {
    "new": cmd_new,
    "tasks": cmd_tasks,
    "show": cmd_show,
    "revisions": cmd_revisions,
    "capture": cmd_capture,
    "watch": cmd_watch,
    "diff": cmd_diff,
    "snapshot": cmd_snapshot,
    "materialize": cmd_materialize,
    "run": cmd_run,
    "follow": cmd_follow,
    "checkpoint": cmd_checkpoint,
    "status": cmd_status,
    "stop": cmd_stop,
    "resume": cmd_resume,
    "reconcile": cmd_reconcile,
    "secret": cmd_secret,
    "grant": cmd_grant,
    "revoke": cmd_revoke,
    "policy": cmd_policy,
    "continue": cmd_continue,
    "fork": cmd_fork,
    "promote": cmd_promote,
    "export": cmd_export,
    "artifacts": cmd_artifacts,
    "config": cmd_config,
    "approvals": cmd_approvals,
    "approve": cmd_approve,
    "deny": cmd_deny,
    "archive": cmd_archive,
    "unarchive": cmd_unarchive,
    "housekeeping": cmd_housekeeping,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after `--` is the command to run, untouched (argparse's own handling of `--`
    # inside a sub-command is unreliable).
    tail: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    if tail:
        if not hasattr(args, "argv"):
            sys.stderr.write(f"cairnctl: {args.command} takes no command after --\n")
            return EXIT_ERROR
        args.argv = list(args.argv) + tail
    install_log_redaction()
    try:
        with Cairn(args.data_dir) as app:
            app.events.subscribe(_warn_problems)
            COMMANDS[args.command](app, args)
    except CairnError as exc:
        sys.stderr.write(f"cairnctl: {redact_exception(exc)}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # an unexpected failure is still one clear line
        if os.environ.get("CAIRN_DEBUG"):
            raise
        sys.stderr.write(
            f"cairnctl: internal error: {type(exc).__name__}: {redact_exception(exc)}\n"
        )
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
