"""Approvals: the risk rules that classify what a run asks to do, and the judge on the host that
answers the in-sandbox gate through the run's mailbox.

Owns the rules file, classifying, the approval rows, the decision files and the small detached
judge process; the gate (resources/sandbox/approval-gate.py) only relays, and runs, checkpoints
and policy keep their own rules.

The mailbox. The gate writes `runs/<workspace>/<exec>/requests/<id>.json` (the attempt's folder,
writable by the sandbox) and waits. The judge answers in `approvals/<workspace>/<exec>/<id>.json`,
a folder the sandbox sees read-only at /cairn/decisions, so an agent never approves itself. The
request files are the truth: rows are made from them idempotently, and a decision is first
claimed in the database (one process wins) and then written as a file.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import fcntl
import getpass
import hashlib
import json
import logging
import os
import re
import shlex
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import approvals_exec
from core import events as ev
from core import runs as runs_mod
from core.approvals_exec import BadFacts, ExecFacts, classify_exec, describe
from core.context import Context, Lazy
from core.credentials import Credentials, SecretStore
from core.datadir import DataDir
from core.errors import CairnError, Conflict, IllegalTransition, InputError, NotFound
from core.launch import python_command, resource_path, stop_process
from core.locks import flock_holder_pid
from core.mailbox import (
    DECISIONS_IN_SANDBOX,
    decision_path,
    ensure_decisions_root,
)
from core.models import Run
from core.models import RunState as R
from core.policy import Policy
from core.redact import install_log_redaction, redact
from core.revisions import Revisions
from core.runs.checkpoints import Checkpoints
from core.runs.liveness import Sandboxes, run_liveness
from core.sandbox.base import CONTAINER_RUNS, CONTAINER_WORKSPACE
from core.sandboxes import sandbox_provider
from core.settings import Settings, replace_file
from core.snapshots import Snapshots

if TYPE_CHECKING:
    from core.sandbox.base import LiveSession

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
RULES_FILE = resource_path("policy", "risk-rules.json")
USER_RULES_NAME = "risk-rules.json"  # in the data folder: the user's rules, replacing RULES_FILE

GATE_IN_SANDBOX = "/cairn/tools/approval-gate.py"
REQUESTS_FOLDER = "requests"
EXEC_TOOL = "exec"  # the tool name of the supervisor's requests: one program start
TOOL_CALL_COVERS_S = 600.0  # an approved tool call covers the programs it starts for this long
TIMEOUT_ENV = "CAIRN_APPROVAL_TIMEOUT"
DEFAULT_TIMEOUT_S = 3600.0

# Row states. `auto-allowed` rows are the rules' own decisions, kept (flagged) for the record.
PENDING = "pending"
APPROVED = "approved"
DENIED = "denied"
TIMED_OUT = "timed-out"
AUTO_ALLOWED = "auto-allowed"
WITHDRAWN = "withdrawn"  # the run ended or moved to a new attempt before anyone decided
STATES = (PENDING, APPROVED, DENIED, TIMED_OUT, AUTO_ALLOWED, WITHDRAWN)
BY_RULES = "cairn:rules"
BY_TIMEOUT = "cairn:timeout"

REQUEST_ID_RE = re.compile(r"^ap_[0-9a-z]{14}$")
MAX_REQUEST_BYTES = 1 << 20
# Longer commands are not run through the patterns (their cost grows with the length): a person
# looks at them instead.
MAX_CHECKED_CHARS = 8 * 1024


# -- risk rules --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RiskRule:
    id: str
    pattern: re.Pattern[str]
    reason: str
    when: Mapping[str, Any]

    def applies(self, policy: Policy) -> bool:
        for key, wanted in self.when.items():
            value = getattr(policy, key, None)
            if value not in (wanted if isinstance(wanted, list) else [wanted]):
                return False
        return True


@dataclass(frozen=True)
class RuleSet:
    version: int
    rules: tuple[RiskRule, ...]


@dataclass(frozen=True)
class Verdict:
    needs_approval: bool
    rule_id: str | None = None
    reason: str | None = None


def load_rules(path: Path | str | None = None) -> RuleSet:
    """The risk rules of a policy file (default: the one Cairn ships)."""
    path = str(Path(path) if path else RULES_FILE)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CairnError(f"the risk rules in {path} cannot be used: {exc}") from exc
    try:
        return _parse_cached(text)
    except InputError as exc:
        raise CairnError(f"the risk rules in {path} cannot be used: {exc.message}") from exc


def user_rules_path(data_root: Path | str) -> Path:
    """The data folder's own risk rules; when present they replace the ones Cairn ships."""
    return Path(data_root) / USER_RULES_NAME


def rules_path_for(data_root: Path | str) -> Path:
    """The rules file in force for a data folder: the user's override, else Cairn's."""
    user = user_rules_path(data_root)
    return user if user.is_file() else RULES_FILE


def rules_for(data_root: Path | str) -> RuleSet:
    """The rules in force for a data folder, read now (a changed file applies at once)."""
    return load_rules(rules_path_for(data_root))


def parse_rules(text: str) -> RuleSet:
    """Risk rules from the text of a rules file, or InputError (one line, naming the rule)."""
    return _parse_cached(text)


@lru_cache(maxsize=8)
def _parse_cached(text: str) -> RuleSet:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"the risk rules are not JSON: {_one_line(exc)}") from None
    return _parse_doc(doc)


def _parse_doc(doc: Any) -> RuleSet:
    if not isinstance(doc, dict):
        raise InputError("the risk rules must be a JSON object with 'version' and 'rules'")
    version = doc.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise InputError("the risk rules need an integer 'version'")
    entries = doc.get("rules")
    if not isinstance(entries, list):
        raise InputError("the risk rules need a 'rules' list")
    rules: list[RiskRule] = []
    seen: set[str] = set()
    for number, entry in enumerate(entries, 1):
        name = f"rule {number}"
        if not isinstance(entry, dict):
            raise InputError(f"{name} is not a JSON object")
        rule_id = entry.get("id")
        if not isinstance(rule_id, str) or not rule_id.strip():
            raise InputError(f"{name} needs an 'id' (text)")
        name = f"rule {rule_id!r}"
        if rule_id in seen:
            raise InputError(f"two rules share the id {rule_id!r}")
        seen.add(rule_id)
        for key in ("pattern", "reason"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise InputError(f"{name} needs a {key!r} (text)")
        unknown_fields = set(entry) - {"id", "pattern", "reason", "when"}
        if unknown_fields:
            raise InputError(
                f"{name} has unknown fields {', '.join(sorted(unknown_fields))} "
                "(known: id, pattern, reason, when)"
            )
        when = entry.get("when") or {}
        if not isinstance(when, dict):
            raise InputError(f"{name}: 'when' must be an object of policy fields")
        unknown = set(when) - set(Policy.__dataclass_fields__)
        if unknown:
            raise InputError(f"{name}: 'when' names no policy field {', '.join(sorted(unknown))}")
        try:
            pattern = re.compile(entry["pattern"])
        except (re.error, RecursionError, OverflowError) as exc:
            raise InputError(
                f"{name}: the pattern is not a usable regular expression: {_one_line(exc)}"
            ) from None
        rules.append(RiskRule(rule_id, pattern, entry["reason"], dict(when)))
    return RuleSet(version, tuple(rules))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def classify(command: str, policy: Policy, rules: RuleSet | None = None) -> Verdict:
    """Whether `command` waits for a person, and which rule says so (the first that matches).
    A command the task's policy remembers as approved passes as it is, and only exactly."""
    if command in policy.approved:
        return Verdict(False, "remembered", "approved for this task before")
    if len(command) > MAX_CHECKED_CHARS:
        return Verdict(
            True,
            "too-long",
            f"is longer than {MAX_CHECKED_CHARS} characters, too long to check automatically",
        )
    for rule in (rules or load_rules()).rules:
        if rule.applies(policy) and rule.pattern.search(command):
            return Verdict(True, rule.id, rule.reason)
    return Verdict(False)


# -- the mailbox -------------------------------------------------------------------------------


def requests_dir(runs_root: Path, run: Run) -> Path:
    return runs_mod.run_files(runs_root, run).folder / REQUESTS_FOLDER


def write_json_atomic(path: Path, obj: dict, *, mode: int = 0o644) -> None:
    """Write a whole file or nothing: a temporary beside it, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, (json.dumps(obj, sort_keys=True) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class BadRequest(Exception):
    """A request file that cannot be used as it is."""


@dataclass(frozen=True)
class Request:
    """A request as the gate wrote it. Only `command`, `tool`, `cwd` and `created_at` come from
    the sandbox; which run and attempt it belongs to is where the host found it."""

    id: str
    run_id: str
    exec_id: str
    engine: str
    tool: str
    command: str
    cwd: str
    created_at: float
    facts: ExecFacts | None = None  # a program start the supervisor holds (tool "exec")
    verdict: Mapping[str, Any] | None = None  # what the supervisor's rules said of it
    # The digest of the bytes read. The folder is the sandbox's: a decision names the bytes it
    # is about, and the asker takes it only for the bytes it wrote.
    digest: str = ""


def request_ids(folder: Path) -> list[str]:
    """The request ids in a requests folder, oldest name first. The folder belongs to the
    sandbox: a symlink in its place is not followed."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        return []
    ids = []
    for name in os.listdir(folder):
        if name.endswith(".json") and REQUEST_ID_RE.match(name[:-5]):
            ids.append(name[:-5])
    return sorted(ids)


def read_request(folder: Path, request_id: str, run: Run) -> Request:
    path = folder / f"{request_id}.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BadRequest(f"cannot open it: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadRequest("it is not a regular file")
        raw = os.read(fd, MAX_REQUEST_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_REQUEST_BYTES:
        raise BadRequest(f"it is larger than {MAX_REQUEST_BYTES} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"it is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("id") != request_id:
        raise BadRequest("its id is not its file name")
    command, tool, cwd = doc.get("command"), doc.get("tool", "shell"), doc.get("cwd", "")
    if not isinstance(command, str) or not isinstance(tool, str) or not isinstance(cwd, str):
        raise BadRequest("command, tool and cwd must be strings")
    if doc.get("exec_id") not in (None, run.exec_id) or doc.get("run_id") not in (None, run.id):
        raise BadRequest("it names another run than the one whose folder holds it")
    created = doc.get("created_at")
    created = float(created) if isinstance(created, (int, float)) and created > 0 else 0.0
    named = doc.get("engine")
    engine = named if isinstance(named, str) else run.engine
    facts = None
    verdict = None
    if tool == EXEC_TOOL:
        try:
            facts = ExecFacts.from_request(doc)
        except (BadFacts, TypeError, ValueError) as exc:
            raise BadRequest(f"its program start cannot be read: {exc}") from None
        verdict = doc.get("verdict") if isinstance(doc.get("verdict"), dict) else None
    return Request(
        request_id,
        run.id,
        run.exec_id,
        engine[:64],
        tool[:128],
        command,
        cwd[:4096],
        created,
        facts,
        verdict,
        hashlib.sha256(raw).hexdigest(),
    )


def _holds_words(text: str, words: str) -> bool:
    """`words` appear in `text` as whole words (`sh` is not found in `bash`)."""
    return re.search(rf"(?<![\w./-]){re.escape(words)}(?![\w./-])", text) is not None


def exec_details(facts: ExecFacts, what: str, run: Run) -> dict[str, Any]:
    """What a card about a program start shows beyond its command line: the program, its
    arguments, where, the programs above it, and the script step it came from."""
    details: dict[str, Any] = {
        "kind": EXEC_TOOL,
        "program": facts.program,
        "argv": list(facts.argv),
        "cwd": facts.cwd,
        "what": what,
        "stdin": facts.stdin,
        "parents": list(facts.parents),
    }
    # What the program really is or touches, when its words say otherwise.
    if facts.same_as:
        details["same_as"] = list(facts.same_as)  # a copy of an image program
    if facts.stdin_path:
        details["stdin_path"] = facts.stdin_path
    if facts.links:
        details["links"] = {word: target for word, (target, _) in facts.links.items()}
    commands = run.spec.get("commands") if isinstance(run.spec, dict) else None
    step = facts.script_line
    if isinstance(commands, list) and step is not None and 0 < step <= len(commands):
        details["script"] = {"step": step - 1, "commands": [str(c) for c in commands]}
    return details


# -- approvals (rows) --------------------------------------------------------------------------


@dataclass(frozen=True)
class Approval:
    id: str
    run_id: str
    task_id: str | None
    command: str
    rule: str | None
    reason: str | None
    state: str
    decided_by: str | None
    decided_at: float | None
    policy_version: int | None
    created_at: float
    timeout_at: float | None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def auto(self) -> bool:
        return self.decided_by in (BY_RULES, BY_TIMEOUT)

    def waiting_s(self, now: float | None = None) -> float:
        end = self.decided_at if self.decided_at is not None else (now or time.time())
        return max(0.0, end - self.created_at)

    def to_json(self, now: float | None = None) -> dict:
        return {
            "id": self.id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "command": self.command,
            "rule": self.rule,
            "reason": self.reason,
            "state": self.state,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at,
            "policy_version": self.policy_version,
            "created_at": self.created_at,
            "timeout_at": self.timeout_at,
            "waiting_s": round(self.waiting_s(now), 3),
            "auto": self.auto,
            "details": dict(self.details),
        }


_SELECT = "SELECT a.*, r.task_id AS task_id FROM approvals a LEFT JOIN runs r ON r.id = a.run_id"


def _approval(row: sqlite3.Row) -> Approval:
    return Approval(
        row["id"],
        row["run_id"],
        row["task_id"],
        row["command"],
        row["rule"],
        row["reason"],
        row["state"],
        row["decided_by"],
        row["decided_at"],
        row["policy_version"],
        row["created_at"],
        row["timeout_at"],
        _details(row["details"]),
    )


def _details(raw: str | None) -> dict[str, Any]:
    try:
        found = json.loads(raw or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def timeout_from_env() -> float:
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{TIMEOUT_ENV} must be a number of seconds, not {text!r}") from None
    if value <= 0:
        raise InputError(f"{TIMEOUT_ENV} must be positive")
    return value


# -- the judge ---------------------------------------------------------------------------------


class Judge:
    """Answers the requests of the runs in flight: what the rules pass is allowed at once, the
    rest waits for `approve` or `deny` (or is denied at its timeout). Any number of judges, in
    any processes, may poll the same data folder: every decision is claimed in one statement."""

    def __init__(
        self,
        ctx: Context,
        *,
        checkpoints: Checkpoints,
        credentials: Lazy[Credentials],
        sandboxes: Sandboxes,
        timeout: float | None = None,
        clock: Callable[[], float] = time.time,
        rules: RuleSet | None = None,
    ):
        self.ctx = ctx
        self.store = ctx.store
        self._checkpoints = checkpoints
        self._credentials = credentials
        self._sandboxes = sandboxes
        self.timeout = timeout if timeout is not None else timeout_from_env()
        self.clock = clock
        self._fixed_rules = rules
        self._lock = threading.RLock()
        self._answered: set[tuple[str, str]] = set()  # (exec id, request id) with a decision file
        self._reported: set[tuple[str, str]] = set()  # unusable request files already logged
        self._secrets_known: set[str] = set()  # tasks whose secrets this process has learnt

    def with_options(
        self,
        *,
        timeout: float | None = None,
        clock: Callable[[], float] | None = None,
        rules: RuleSet | None = None,
    ) -> Judge:
        """Another judge of the same data folder, with its own timeout, clock or fixed rules."""
        return Judge(
            self.ctx,
            checkpoints=self._checkpoints,
            credentials=self._credentials,
            sandboxes=self._sandboxes,
            timeout=timeout if timeout is not None else self.timeout,
            clock=clock or self.clock,
            rules=rules or self._fixed_rules,
        )

    def alive(self, run: Run) -> bool | None:
        """Whether the run's process still runs (None: cannot be told now)."""
        return run_liveness(self.ctx, self._sandboxes, run)[0]

    @property
    def rules(self) -> RuleSet:
        """The rules given to this judge, else the data folder's rules as they are now (its
        override when there is one): an edited rules file applies to the next request."""
        return self._fixed_rules or rules_for(self.ctx.data.root)

    # -- reading -----------------------------------------------------------------------------

    def list(self, *, pending_only: bool = True) -> builtins.list[Approval]:
        where = " WHERE a.state = ?" if pending_only else ""
        rows = self.store.query(
            f"{_SELECT}{where} ORDER BY a.created_at, a.id", (PENDING,) if pending_only else ()
        )
        return [_approval(r) for r in rows]

    def decided(self, limit: int = 200) -> builtins.list[Approval]:
        """The decision history: the latest `limit` decided requests, newest first."""
        rows = self.store.query(
            f"{_SELECT} WHERE a.state != ? "
            "ORDER BY COALESCE(a.decided_at, a.created_at) DESC, a.id DESC LIMIT ?",
            (PENDING, max(0, int(limit))),
        )
        return [_approval(r) for r in rows]

    def get(self, ref: str) -> Approval:
        """An approval by its id or an unambiguous prefix of it."""
        if not ref:
            raise NotFound("no approval with id ''")
        rows = self.store.query(
            f"{_SELECT} WHERE substr(a.id, 1, ?) = ? ORDER BY a.id", (len(ref), ref)
        )
        exact = [r for r in rows if r["id"] == ref]
        if exact or len(rows) == 1:
            return _approval((exact or rows)[0])
        if not rows:
            raise NotFound(f"no approval with id {ref!r}")
        raise NotFound(f"the id {ref!r} matches {len(rows)} approvals; give more of it")

    def pending(self) -> builtins.list[Approval]:
        """Answer what the rules can answer now, apply timeouts, and return what still waits for
        a person (for the GUI's periodic refresh)."""
        self.poll()
        return self.list(pending_only=True)

    # -- risk rules ------------------------------------------------------------------------------
    # The data folder's `risk-rules.json`, when present, replaces the rules Cairn ships; every
    # judge reads the rules in force at each request, so a change applies to the next one.

    def risk_rules(self) -> dict:
        """The rules in force: `text` (the file), `rules` (id, pattern, reason, when, as plain
        values), `version`, `user` (True: the data folder's override; False: Cairn's own),
        `path`, and `problem` (why an override cannot be used, else None)."""
        path = rules_path_for(self.ctx.data.root)
        user = path != RULES_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CairnError(f"the risk rules in {path} cannot be read: {exc.strerror}") from exc
        rules: builtins.list[dict] = []
        version, problem = None, None
        try:
            version = parse_rules(text).version
            rules = self.check_risk_rules(text)
        except InputError as exc:
            problem = exc.message
        return {
            "text": text,
            "rules": rules,
            "version": version,
            "user": user,
            "path": str(path),
            "problem": problem,
        }

    def check_risk_rules(self, text: str) -> builtins.list[dict]:
        """The rules `text` holds (as `risk_rules()` lists them), or InputError (one line,
        naming the rule); nothing is written."""
        if not isinstance(text, str):
            raise InputError("the risk rules are text (a JSON document)")
        return [
            {"id": r.id, "pattern": r.pattern.pattern, "reason": r.reason, "when": dict(r.when)}
            for r in parse_rules(text).rules
        ]

    def set_risk_rules(self, text: str) -> dict:
        """Validate `text` as a rules file and make it the data folder's rules (written
        atomically); InputError (one line, naming the rule) writes nothing."""
        self.check_risk_rules(text)
        replace_file(
            user_rules_path(self.ctx.data.root), text if text.endswith("\n") else text + "\n"
        )
        return self.risk_rules()

    def reset_risk_rules(self) -> bool:
        """Go back to the rules Cairn ships; whether there was an override to remove."""
        try:
            user_rules_path(self.ctx.data.root).unlink()
        except FileNotFoundError:
            return False
        return True

    # -- polling -----------------------------------------------------------------------------

    def poll(self) -> builtins.list[Approval]:
        """One pass over the mailboxes: new requests, timeouts, runs that moved on, and the runs'
        states (RUNNING ⇄ WAITING_APPROVAL). Returns the approvals this pass made or decided."""
        with self._lock:
            now = self.clock()
            try:
                out = self._sweep(now)
                in_flight = self._runs_in_flight()
            except (CairnError, OSError, sqlite3.Error) as exc:
                log.warning("approvals: %s", exc)
                return []
            for run in in_flight:
                try:
                    out += self._poll_run(run, now)
                except (CairnError, OSError, sqlite3.Error) as exc:
                    log.warning("approvals of run %s: %s", run.id, exc)
            return out

    def sync_remote(self, runs: Iterable[Run], *, force: bool = False) -> None:
        """The mailboxes of runs in sandboxes on another machine, exchanged with the sandbox:
        their request files brought into the local run folder (where `poll` reads them) and the
        decisions written here sent there (every exec there sends them first). Nothing for a
        sandbox on this machine; a host that does not answer is asked again next time."""
        sandboxes = self._sandboxes.get()
        for run in runs:
            if run.state in runs_mod.IN_FLIGHT:
                sandboxes.sync_run_files(run, force=force)

    def _runs_in_flight(self) -> builtins.list[Run]:
        marks = ",".join("?" * len(runs_mod.IN_FLIGHT))
        rows = self.store.query(
            f"SELECT id FROM runs WHERE state IN ({marks}) ORDER BY created_at", runs_mod.IN_FLIGHT
        )
        ids = [r["id"] for r in rows]
        found = []
        for run_id in ids:
            with contextlib.suppress(NotFound):
                found.append(self.store.get_run(run_id))
        return found

    def _poll_run(self, run: Run, now: float) -> builtins.list[Approval]:
        if not run.workspace_id:
            return []
        files = runs_mod.run_files(self.ctx.data.runs_root, run)
        folder = files.folder / REQUESTS_FOLDER
        out = []
        for request_id in request_ids(folder):
            key = (run.exec_id, request_id)
            if key in self._answered:
                continue
            if self._decision_file(run, request_id).exists():
                self._answered.add(key)
                continue
            try:
                request = read_request(folder, request_id, run)
            except BadRequest as exc:
                if key not in self._reported:
                    self._reported.add(key)
                    log.warning("request %s of run %s is refused: %s", request_id, run.id, exc)
                self._write_decision(
                    run,
                    request_id,
                    "deny",
                    f"the request is unusable: {exc}",
                    rule=None,
                    by=BY_RULES,
                    policy_version=None,
                )
                continue
            made = self._take(run, request, now)
            if made is not None:
                out.append(made)
        if files.exit_code is None:
            self._settle_state(run)
        return out

    def _take(self, run: Run, request: Request, now: float) -> Approval | None:
        """Make the row of a request that has no decision file yet (or repair a decided one)."""
        row = self.store.query_one(f"{_SELECT} WHERE a.id = ?", (request.id,))
        if row is not None:
            known = _approval(row)
            if known.run_id != run.id:
                self._write_decision(
                    run,
                    request.id,
                    "deny",
                    "the request id is already used",
                    rule=None,
                    by=BY_RULES,
                    policy_version=None,
                )
            elif known.state != PENDING:
                # Decided, but the process that decided stopped before writing the file.
                self._write_decision_of(run, known)
            return None
        ws = self.store.get_workspace(run.workspace_id)  # type: ignore[arg-type]
        policy = Policy.from_dict(ws.policy)
        details: dict[str, Any] = {}
        if request.facts is not None:
            # A program start: the host classifies it again from its facts (the sandbox's
            # verdict only decided that it asks), and a remembered rule lets it through.
            found = classify_exec(request.facts)
            verdict = Verdict(found.needs_approval, found.rule, found.reason)
            details = exec_details(request.facts, found.what, run)
            if verdict.needs_approval and verdict.rule_id in policy.approved_rules:
                verdict = Verdict(False, "remembered", f"{verdict.rule_id} remembered for the task")
            elif verdict.needs_approval:
                covering = self._approved_tool_call(run, request.facts, found.what, now)
                if covering is not None:
                    # The person approved this very command as the agent's tool call a moment
                    # ago: the program it starts is what they saw, not a second question.
                    details["covered_by"] = covering.id
                    verdict = Verdict(False, verdict.rule_id, f"approved as {covering.id}")
            if verdict.rule_id:
                details["rule_reason"] = found.reason
            raw_command = describe(request.facts)
        else:
            verdict = classify(request.command, policy, self.rules)
            raw_command = request.command
        # Rows, events and logs keep the command with the task's secrets replaced by their names
        # (the rules saw it whole).
        self._learn_secrets(run.task_id)
        command = redact(raw_command)
        if details:
            details = json.loads(redact(json.dumps(details)))
        details["request_sha256"] = request.digest
        created = min(now, request.created_at) if request.created_at > 0 else now
        if not verdict.needs_approval:
            made = Approval(
                request.id,
                run.id,
                run.task_id,
                command,
                verdict.rule_id,
                verdict.reason,
                AUTO_ALLOWED,
                BY_RULES,
                now,
                policy.version,
                created,
                None,
                details,
            )
            if not self._insert(made):
                return None
            self._write_decision_of(run, made)
            self.ctx.events.publish(ev.APPROVAL_DECIDED, run.id, **self._event(made))
            return made
        made = Approval(
            request.id,
            run.id,
            run.task_id,
            command,
            verdict.rule_id,
            verdict.reason,
            PENDING,
            None,
            None,
            policy.version,
            created,
            created + self.timeout,
            details,
        )
        if not self._insert(made):
            return None
        log.info("run %s waits for approval %s: %s", run.id, made.id, made.command)
        self.ctx.events.publish(
            ev.APPROVAL_REQUESTED, run.id, **self._event(made), tool=request.tool, cwd=request.cwd
        )
        return made

    def _approved_tool_call(
        self, run: Run, facts: ExecFacts, what: str, now: float
    ) -> Approval | None:
        """An agent tool call of this run a person approved within TOOL_CALL_COVERS_S whose
        command holds this program start word for word (as written or as the rule read it)."""
        texts = {t for t in (what, shlex.join(facts.argv), " ".join(facts.argv)) if t.strip()}
        rows = self.store.query(
            f"{_SELECT} WHERE a.run_id = ? AND a.state = ? AND a.decided_at >= ?",
            (run.id, APPROVED, now - TOOL_CALL_COVERS_S),
        )
        for row in rows:
            a = _approval(row)
            if a.details.get("kind") == EXEC_TOOL:
                continue
            if any(_holds_words(a.command, t) for t in texts):
                return a
        return None

    def _learn_secrets(self, task_id: str) -> None:
        """Learn the secret values granted to the task (once per process), to redact them. A task
        without grants never touches the keyring."""
        if task_id in self._secrets_known:
            return
        self._secrets_known.add(task_id)
        try:
            self._credentials.get().resolve_env(task_id, require=False)
        except CairnError as exc:
            log.debug("no secrets to learn for task %s: %s", task_id, exc)

    def _insert(self, a: Approval) -> bool:
        """True when this call made the row (another judge may have been first)."""
        with self.store.transaction() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO approvals (id, run_id, command, rule, reason, state, "
                "decided_by, decided_at, policy_version, created_at, timeout_at, details) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    a.id,
                    a.run_id,
                    a.command,
                    a.rule,
                    a.reason,
                    a.state,
                    a.decided_by,
                    a.decided_at,
                    a.policy_version,
                    a.created_at,
                    a.timeout_at,
                    json.dumps(dict(a.details), sort_keys=True),
                ),
            )
            return cur.rowcount == 1

    def _sweep(self, now: float) -> builtins.list[Approval]:
        """Pending approvals whose run moved on are withdrawn; overdue ones are denied."""
        out = []
        for a in self.list(pending_only=True):
            try:
                run = self.store.get_run(a.run_id)
            except NotFound:
                run = None
            if run is None or not self._still_asked(run, a.id):
                if self._claim(a.id, WITHDRAWN, None, now):
                    decided = self.get(a.id)
                    self.ctx.events.publish(ev.APPROVAL_DECIDED, a.run_id, **self._event(decided))
                    out.append(decided)
                continue
            timed_out = a.timeout_at is not None and a.timeout_at <= now
            if timed_out and self._claim(a.id, TIMED_OUT, BY_TIMEOUT, now):
                decided = self.get(a.id)
                self._write_decision_of(run, decided)
                self.ctx.events.publish(ev.APPROVAL_DECIDED, run.id, **self._event(decided))
                self._settle_state(run)
                out.append(decided)
        return out

    def _still_asked(self, run: Run, request_id: str) -> bool:
        """The run is in flight, on the attempt that asked, and its process has not ended."""
        if run.state not in runs_mod.IN_FLIGHT or not run.workspace_id:
            return False
        files = runs_mod.run_files(self.ctx.data.runs_root, run)
        if files.exit_code is not None:
            return False
        return (files.folder / REQUESTS_FOLDER / f"{request_id}.json").exists()

    def _claim(
        self,
        approval_id: str,
        state: str,
        by: str | None,
        now: float,
        policy_version: int | None = None,
    ) -> bool:
        with self.store.transaction() as conn:
            cur = conn.execute(
                "UPDATE approvals SET state = ?, decided_by = ?, decided_at = ?, "
                "policy_version = COALESCE(?, policy_version) WHERE id = ? AND state = ?",
                (state, by, now, policy_version, approval_id, PENDING),
            )
            return cur.rowcount == 1

    def _settle_state(self, run: Run) -> None:
        """RUNNING while nothing waits for a person, WAITING_APPROVAL (with a checkpoint) while
        something does. Whoever makes the move writes the checkpoint."""
        run = self.store.get_run(run.id)
        waiting = (
            self.store.query_one(
                "SELECT 1 FROM approvals WHERE run_id = ? AND state = ? LIMIT 1", (run.id, PENDING)
            )
            is not None
        )
        try:
            if waiting and run.state == R.RUNNING.value:
                moved = runs_mod.move(self.store, run.id, R.WAITING_APPROVAL)
            elif not waiting and run.state == R.WAITING_APPROVAL.value:
                moved = runs_mod.move(self.store, run.id, R.RUNNING)
            else:
                return
        except IllegalTransition:
            return  # another process moved it first
        self.ctx.events.publish(ev.RUN_STATE, moved.id, state=moved.state, task_id=moved.task_id)
        if moved.state == R.WAITING_APPROVAL.value:
            try:
                self._checkpoints.of_task(moved.task_id)
            except CairnError as exc:
                log.warning(
                    "no checkpoint for run %s while it waits for approval: %s", moved.id, exc
                )

    # -- deciding ----------------------------------------------------------------------------

    def approve(
        self, approval_ref: str, *, remember: bool = False, by: str | None = None
    ) -> Approval:
        """Let the command run. With `remember`, the task's policy (a new version) lets this exact
        command run from now on without asking."""
        return self._decide(approval_ref, APPROVED, by or os_user(), remember=remember)

    def deny(
        self, approval_ref: str, *, by: str | None = None, reason: str | None = None
    ) -> Approval:
        return self._decide(approval_ref, DENIED, by or os_user(), note=reason)

    def _decide(
        self,
        approval_ref: str,
        state: str,
        by: str,
        *,
        remember: bool = False,
        note: str | None = None,
    ) -> Approval:
        with self._lock:
            a = self.get(approval_ref)
            if a.state != PENDING:
                raise Conflict(
                    f"approval {a.id} is {a.state} already"
                    + (f" (by {a.decided_by})" if a.decided_by else "")
                )
            run = self.store.get_run(a.run_id)
            if not self._still_asked(run, a.id):
                if self._claim(a.id, WITHDRAWN, None, self.clock()):
                    self.ctx.events.publish(
                        ev.APPROVAL_DECIDED, run.id, **self._event(self.get(a.id))
                    )
                raise Conflict(
                    f"run {run.id} no longer waits for approval {a.id} (it is "
                    f"{run.state}); nothing was decided"
                )
            now = self.clock()
            policy_changed = None
            with self.store.transaction():
                ws = self.store.get_workspace(run.workspace_id)  # type: ignore[arg-type]
                policy = Policy.from_dict(ws.policy)
                by_rule = a.details.get("kind") == EXEC_TOOL and bool(a.rule)
                if remember and by_rule and a.rule not in policy.approved_rules:
                    # A program start: "Remember" is for its rule, on this task only.
                    policy = policy.changed(approved_rules=(*policy.approved_rules, a.rule))
                    self.store.update_workspace(ws.id, policy=policy.to_dict())
                    policy_changed = (ws.id, policy.version)
                elif remember and not by_rule and a.command not in policy.approved:
                    policy = policy.changed(approved=(*policy.approved, a.command))
                    self.store.update_workspace(ws.id, policy=policy.to_dict())
                    policy_changed = (ws.id, policy.version)
                if not self._claim(a.id, state, by, now, policy.version):
                    raise Conflict(f"approval {a.id} was decided meanwhile")  # rolls back
                if note:
                    # The reason goes back to the agent and stays in the decision history.
                    with self.store.transaction() as conn:
                        conn.execute(
                            "UPDATE approvals SET details = ? WHERE id = ?",
                            (json.dumps({**a.details, "note": note}, sort_keys=True), a.id),
                        )
            decided = self.get(a.id)
            if state == APPROVED:
                why = f"approved by {by}" + (" (remembered for this task)" if remember else "")
            else:
                why = f"denied by {by}" + (f": {note}" if note else "")
            self._write_decision(
                run,
                a.id,
                "allow" if state == APPROVED else "deny",
                why,
                rule=a.rule,
                by=by,
                policy_version=decided.policy_version,
                request_sha256=a.details.get("request_sha256"),
            )
            if policy_changed:
                self.ctx.events.publish(
                    ev.POLICY_CHANGED,
                    policy_changed[0],
                    version=policy_changed[1],
                    approved=a.command,
                )
            self.ctx.events.publish(
                ev.APPROVAL_DECIDED, run.id, **self._event(decided), remembered=remember
            )
            self._settle_state(run)
            return decided

    # -- decision files ----------------------------------------------------------------------

    def _decision_file(self, run: Run, request_id: str) -> Path:
        return decision_path(self.ctx.data.root, run.workspace_id or "_", run.exec_id, request_id)

    def _write_decision_of(self, run: Run, a: Approval) -> None:
        allow = a.state in (APPROVED, AUTO_ALLOWED)
        if a.state == AUTO_ALLOWED:
            if a.details.get("covered_by"):
                why = f"approved with the tool call {a.details['covered_by']}"
            elif a.rule == "remembered":
                why = "allowed by the task's remembered approvals"
            else:
                why = "allowed by Cairn's risk rules"
        elif a.state == TIMED_OUT:
            why = f"no decision within {(a.timeout_at or 0) - a.created_at:g} s"
        elif a.state == WITHDRAWN:
            why = "the run moved on before a decision"
        else:
            # The same words the deciding process writes (another process may repair its file
            # first): the deny reason goes back to the run either way.
            note = a.details.get("note")
            why = f"{a.state} by {a.decided_by}" + (f": {note}" if note else "")
        self._write_decision(
            run,
            a.id,
            "allow" if allow else "deny",
            why,
            rule=a.rule,
            by=a.decided_by,
            policy_version=a.policy_version,
            request_sha256=a.details.get("request_sha256"),
        )

    def _write_decision(
        self,
        run: Run,
        request_id: str,
        decision: str,
        reason: str,
        *,
        rule: str | None,
        by: str | None,
        policy_version: int | None,
        request_sha256: str | None = None,
    ) -> None:
        root = ensure_decisions_root(self.ctx.data.root, run.workspace_id or "_")
        folder = root / run.exec_id
        folder.mkdir(exist_ok=True)
        os.chmod(folder, 0o755)
        write_json_atomic(
            folder / f"{request_id}.json",
            {
                "id": request_id,
                "run_id": run.id,
                "exec_id": run.exec_id,
                "decision": decision,
                "reason": reason,
                "rule": rule,
                "decided_by": by,
                "decided_at": self.clock(),
                "policy_version": policy_version,
                "rules_version": self.rules.version,
                "request_sha256": request_sha256,
            },
        )
        self._answered.add((run.exec_id, request_id))

    @staticmethod
    def _event(a: Approval) -> dict:
        return {
            "approval_id": a.id,
            "task_id": a.task_id,
            "command": a.command,
            "rule": a.rule,
            "reason": a.reason,
            "approval_state": a.state,
            "decided_by": a.decided_by,
            "timeout_at": a.timeout_at,
        }


# -- wiring a run to the gate --------------------------------------------------------------------


def gate_command(ctx: Context, workspace_id: str, live: LiveSession) -> list[str]:
    """The gate's command for this sandbox, or [] (with a problem event) when the sandbox cannot
    run it (an image without python3): the run then goes ungated, and says so."""
    argv = ["python3", live.visible_path(GATE_IN_SANDBOX)]
    try:
        result = live.exec([*argv, "--check"], env={}, cwd="/", timeout=20)
        ok = result.exit_code == 0
        why = (result.stderr or result.stdout).strip()[:200]
    except CairnError as exc:
        ok, why = False, str(exc)
    if ok:
        return argv
    ctx.events.publish(
        ev.WORKSPACE_PROBLEM,
        workspace_id,
        message=f"the approval gate cannot run in this sandbox "
        f"({why or 'no python3'}); commands of this run are NOT checked "
        "for approval",
        about="approvals",
    )
    return []


SUPERVISOR_IN_SANDBOX = "/cairn/tools/supervisor.py"
RULES_FOLDER = ".rules"  # in the decisions root: the sandbox reads the program rules there
RULES_MODULE = "exec_rules.py"


class Unsupervised(CairnError):
    """The sandbox cannot hold its program starts for judgement: the run does not start."""


def place_program_rules(data_root: Path, workspace_id: str) -> str:
    """Copy the program rules where the sandbox can read but never write them (the decisions
    folder); returns their path in the sandbox."""
    folder = ensure_decisions_root(data_root, workspace_id) / RULES_FOLDER
    folder.mkdir(exist_ok=True)
    os.chmod(folder, 0o755)
    text = Path(approvals_exec.__file__).read_text(encoding="utf-8")
    target = folder / RULES_MODULE
    tmp = folder / f".{RULES_MODULE}.{os.getpid()}.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return f"{DECISIONS_IN_SANDBOX}/{RULES_FOLDER}/{RULES_MODULE}"


def supervise_command(ctx: Context, workspace_id: str, live: LiveSession) -> list[str]:
    """The prefix that runs a command under the exec supervisor (every program start of its
    process tree judged by the program rules, the doubtful ones asked). Unsupervised when this
    sandbox cannot do it: then the run does not start, and the error says why."""
    rules = live.visible_path(place_program_rules(ctx.data.root, workspace_id))
    argv = ["python3", live.visible_path(SUPERVISOR_IN_SANDBOX)]
    code: int | None = None
    try:
        result = live.exec([*argv, "--rules", rules, "--check"], env={}, cwd="/", timeout=20)
        code = result.exit_code
        why = (result.stderr or result.stdout).strip().splitlines()
    except CairnError as exc:
        why = [str(exc)]
    if code != 0:
        reason = (why[-1] if why else "") or "the image has no python3"
        if code == 127 or "not found" in reason:
            reason = "the sandbox image has no python3"
        raise Unsupervised(
            "this sandbox cannot hold the programs a run starts for approval "
            f"({reason.removeprefix('cairn: ')[:200]}); the run did not start"
        )
    # The workspace as the run sees it: /workspace in a container, the folder on the host.
    workspace = live.visible_path(CONTAINER_WORKSPACE)
    return [*argv, "--judge", "--rules", rules, "--workspace", workspace]


def gate_environment(run: Run, live: LiveSession) -> dict[str, str]:
    """What the gate needs to know in each exec: which run and attempt it asks for, its
    mailbox, and how long to wait."""
    return {
        "CAIRN_RUN_ID": run.id,
        "CAIRN_EXEC_ID": run.exec_id,
        "CAIRN_APPROVAL_TIMEOUT": f"{timeout_from_env():g}",
        "CAIRN_APPROVAL_REQUESTS": live.visible_path(
            f"{CONTAINER_RUNS}/{run.exec_id}/{REQUESTS_FOLDER}"
        ),
        "CAIRN_APPROVAL_DECISIONS": live.visible_path(f"{DECISIONS_IN_SANDBOX}/{run.exec_id}"),
    }


# -- the detached judge ----------------------------------------------------------------------------
# Low-risk commands must go on while no Cairn window or command is open: one small process per
# data folder allows what the rules pass and applies timeouts. It never approves anything risky.

SERVE_INTERVAL_S = 0.1
IDLE_INTERVAL_S = 1.0
IDLE_EXIT_S = 60.0
LIVENESS_EVERY_S = 10.0
# A run in a sandbox on another machine has its mailbox synced by the judge this often (an exec
# over SSH each time); a decision the judge makes is sent at once.
REMOTE_SYNC_S = 0.5
REMOTE_SLOW_S = 2.0  # an exchange that took longer than this...
REMOTE_SLOW_BACKOFF_S = 15.0  # ...is not tried again for this long


def judge_dir(data_root: Path) -> Path:
    return Path(data_root) / "judge"


def judge_pid(data_root: Path) -> int | None:
    """The pid of the judge serving this data folder, or None. Liveness is the pid file's flock,
    held for as long as the judge runs (a stale file or a recycled pid fools nothing)."""
    return flock_holder_pid(judge_dir(data_root) / "judge.pid")


def ensure_judge(data: DataDir) -> int | None:
    """Start the data folder's judge unless one runs. Never fails a launch: without it, requests
    wait for the next Cairn that observes the run."""
    try:
        pid = judge_pid(data.root)
        if pid is not None:
            return pid
        folder = judge_dir(data.root)
        folder.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
            ),
        }
        with open(folder / "judge.log", "ab") as out:
            proc = subprocess.Popen(
                python_command("core.approvals", "serve", "--data-dir", str(data.root)),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                cwd=str(REPO_ROOT),
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        # Reaped here when this process lives on (the GUI); adopted by init otherwise.
        threading.Thread(target=proc.wait, name="judge-reaper", daemon=True).start()
        return proc.pid
    except OSError as exc:
        log.warning("could not start the approvals judge for %s: %s", data.root, exc)
        return None


def stop_judge(data_root: Path, timeout: float = 5.0) -> bool:
    """Stop the data folder's judge (SIGTERM, then SIGKILL); True if one was running."""
    pid = judge_pid(data_root)
    if pid is None:
        return False
    return stop_process(pid, lambda: judge_pid(data_root) is not None, timeout)


def serve(data_dir: str | Path, *, idle_exit: float = IDLE_EXIT_S) -> int:
    """Judge the data folder's mailboxes until no run needs it for `idle_exit` seconds (or a
    SIGTERM). Exit 3 when another judge serves the folder."""
    data = DataDir.resolve(data_dir)
    folder = judge_dir(data.root)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / "judge.pid", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    for _ in range(50):  # judge_pid() takes a shared lock for a moment to look
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(0.02)
    else:
        os.close(fd)
        return 3
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log.info("approvals judge %d serves %s", os.getpid(), data.root)
    try:
        ctx = Context(data)
        try:
            judge = _judge_of(ctx)
            idle_since: float | None = None
            gone: set[str] = set()  # runs whose process is known to be gone
            checked = 0.0
            exchanged: dict[str, float] = {}  # run id -> when its remote mailbox was last synced
            while not stop.is_set() and data.db_path.exists():
                try:
                    _judge_pass(judge, exchanged)
                    active = [
                        r
                        for r in judge._runs_in_flight()
                        if runs_mod.run_files(data.runs_root, r).exit_code is None
                    ]
                except (CairnError, OSError, sqlite3.Error) as exc:
                    log.warning("judging failed (trying again): %s", exc)
                    active = []
                now = time.monotonic()
                if now - checked >= LIVENESS_EVERY_S:
                    gone, checked = {r.id for r in active if _gone(judge, r)}, now
                busy = any(r.id not in gone for r in active)
                if busy:
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                elif now - idle_since >= idle_exit:
                    log.info("no run needs the judge any more; it stops")
                    break
                stop.wait(SERVE_INTERVAL_S if busy else IDLE_INTERVAL_S)
        finally:
            ctx.close()
    finally:
        os.close(fd)
    return 0


def _judge_pass(judge: Judge, exchanged: dict[str, float]) -> None:
    """One pass of the judge process: the requests of runs on other machines brought here (each
    run at most every REMOTE_SYNC_S), every mailbox judged, and the decisions this pass made
    sent to their runs' sandboxes at once. `exchanged` is when each run was last synced."""
    in_flight = judge._runs_in_flight()
    for run_id in set(exchanged) - {r.id for r in in_flight}:
        del exchanged[run_id]
    for run in in_flight:
        began = time.monotonic()
        if began - exchanged.get(run.id, float("-inf")) < REMOTE_SYNC_S:
            continue
        _sync_remote(judge, [run])  # a failure here leaves the local mailboxes to be judged
        took = time.monotonic() - began
        # A host that takes long to answer (or to fail: ssh's connect timeout) is asked less
        # often, so it does not hold up the runs of every other host.
        exchanged[run.id] = began + (REMOTE_SLOW_BACKOFF_S if took > REMOTE_SLOW_S else 0.0)
    decided = {a.run_id for a in judge.poll() if a.state != PENDING}
    if decided:
        _sync_remote(judge, [r for r in in_flight if r.id in decided])


def _sync_remote(judge: Judge, runs: list[Run]) -> None:
    try:
        judge.sync_remote(runs, force=True)
    except (CairnError, OSError) as exc:  # the sandbox manager could not be made, say
        log.warning("the mailboxes of runs on other hosts could not be exchanged: %s", exc)


def _judge_of(ctx: Context) -> Judge:
    """The judge process's own judge: the pieces it needs of the data folder, made here."""
    revisions = Revisions(ctx)
    settings = Settings(ctx.data.root)
    return Judge(
        ctx,
        checkpoints=Checkpoints(ctx, revisions, Snapshots(ctx, revisions)),
        credentials=Lazy(lambda: Credentials(ctx.store, SecretStore())),
        sandboxes=sandbox_provider(ctx, settings),
    )


def _gone(judge: Judge, run: Run) -> bool:
    """True only when the run's process is known to be gone (an unknown answer is not gone)."""
    try:
        alive = judge.alive(run)
    except (CairnError, OSError) as exc:
        log.debug("liveness of run %s unknown: %s", run.id, exc)
        return False
    return alive is False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m core.approvals", description="Cairn's approvals judge for one data folder."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "serve", help="allow what the risk rules pass and apply timeouts, until no run needs it"
    )
    p.add_argument("--data-dir", required=True)
    p.add_argument("--idle-exit", type=float, default=IDLE_EXIT_S)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s judge %(levelname)s %(message)s")
    install_log_redaction()
    return serve(args.data_dir, idle_exit=args.idle_exit)


if __name__ == "__main__":
    # Run the one copy of this module everything else imports, not a second `__main__` one.
    from core.approvals import main as _main

    sys.exit(_main())
