"""Engines: signing an agent engine in and out, and what each has of what its first run needs.

Owns these commands' arguments and output. A credential's value is read from stdin (a terminal
gets a hidden prompt), never from the arguments, and never printed; guessing its kind, the
keyring and the checks are core.signin's.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from core import signin
from core.app import Cairn
from core.cli.command import Command
from core.cli.output import emit, warn
from core.engines import engine_for
from core.errors import CairnError, InputError
from core.signin import EngineStatus


def _read_value(engine: str, kind: str | None) -> str:
    """The credential from stdin: a hidden prompt on a terminal, else everything piped in."""
    if sys.stdin is not None and sys.stdin.isatty():
        kinds = signin.kinds_of(engine)
        chosen = [k for k in kinds if k.kind == kind] or list(kinds)
        what = " or ".join(k.label for k in chosen)
        for k in chosen:
            if k.how:
                print(f"{k.label}: {k.how}", file=sys.stderr)
        return getpass.getpass(f"{what} for {engine} (hidden): ")
    return sys.stdin.read() if sys.stdin is not None else ""


def _check_engine(name: str) -> str:
    engine = engine_for(name)  # InputError naming the known engines
    if not engine.credential_kinds:
        raise InputError(f"the {name} engine runs your commands; it needs no sign-in")
    return name


class EngineCommand(Command):
    name = "engine"
    help = (
        "agent engines: engine login ENGINE [--kind KIND] (the token or key on stdin) | "
        "logout ENGINE [--kind KIND] | status [ENGINE]"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("action", choices=["login", "logout", "status"])
        p.add_argument("engine", nargs="?")
        p.add_argument(
            "--kind",
            help="oauth-token (a subscription's long-lived token) or api-key; "
            "told by the value's start when left out",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        if args.action == "status":
            if args.kind:
                raise CairnError("engine status takes no --kind")
            self.status(app, args)
            return
        if not args.engine:
            raise CairnError(f"engine {args.action} needs an ENGINE, e.g. claude-code or codex")
        engine = _check_engine(args.engine)
        if args.action == "login":
            self.login(app, args, engine)
        else:
            self.logout(app, args, engine)

    def login(self, app: Cairn, args: argparse.Namespace, engine: str) -> None:
        if args.kind:
            signin.guess_kind(engine, "", args.kind)  # an unknown kind is refused before reading
        value = _read_value(engine, args.kind)
        kind = signin.sign_in(app.credentials, engine, value, args.kind)
        del value
        used = signin.signed_in_with(app.credentials, engine, app.settings.engine(engine))
        if used is not None and used.secret != kind.secret:
            if used.source == "setting":
                warn(
                    f"engines.{engine}.api_key_secret names {used.secret!r}, which runs use "
                    f"instead; unset it to use this one: cairnctl config unset "
                    f"engines.{engine}.api_key_secret"
                )
            else:
                warn(
                    f"the {engine} engine is also signed in with {used.kind.label}, which runs "
                    f"prefer; sign that out to use this one: cairnctl engine logout {engine} "
                    f"--kind {used.kind.kind}"
                )
        emit(
            args,
            {"engine": engine, "kind": kind.kind, "secret": kind.secret, "signed_in": True},
            f"{engine} signed in with {kind.label}, kept in the OS keyring as {kind.secret}",
        )

    def logout(self, app: Cairn, args: argparse.Namespace, engine: str) -> None:
        removed = signin.sign_out(app.credentials, engine, args.kind)
        names = ", ".join(k.secret for k in removed)
        emit(
            args,
            {"engine": engine, "removed": [k.kind for k in removed], "secrets": names.split(", ")},
            f"{engine} signed out: {names} removed from the keyring",
        )

    def status(self, app: Cairn, args: argparse.Namespace) -> None:
        if args.engine:
            engine_for(args.engine)
            names = [args.engine]
        else:
            names = signin.agent_engines()
        credentials = app.credentials
        found = [signin.status(credentials, name, app.settings) for name in names]
        emit(
            args,
            {"engines": [st.to_dict() for st in found]},
            lambda: "\n".join(_status_text(st) for st in found),
        )


def _status_text(st: EngineStatus) -> str:
    problems = len(st.issues)
    state = "ready" if st.ok else f"{problems} problem{'s' if problems != 1 else ''}"
    lines = [f"{st.engine}: {state}"]

    def row(label: str, value: str) -> None:
        lines.append(f"  {label + ':':<11}{value}")

    f = st.found
    if not signin.kinds_of(st.engine) and st.endpoint is None:
        row("runs", "your commands; it needs no model or key")
        return "\n".join(lines)
    row("found", str(f.path) if f.path else "no")
    if f.binary is not None:
        row("binary", str(f.binary))
    row("version", f.version or "unknown")
    row("source", f.source)
    if f.note:
        row("note", f.note)
    if st.sign_in is not None:
        where = st.sign_in.secret
        if st.sign_in.source == "setting":
            where += f" (engines.{st.engine}.api_key_secret)"
        row("signed in", f"{st.sign_in.kind.label} [{st.sign_in.kind.kind}], keyring {where}")
    else:
        row("signed in", "no")
    if st.endpoint:
        reach = (
            f"reachable under a new task's default policy ({st.network})"
            if st.reachable
            else f"NOT reachable under a new task's default policy ({st.network})"
            if st.reachable is False
            else "not checked"
        )
        row("endpoint", f"{st.endpoint} ({st.endpoint_entry or '?'}), {reach}")
    if st.note:
        row("sign-in", st.note)
    for p in st.issues:
        row("problem", p.what)
        if p.fix:
            row("  fix", p.fix)
    return "\n".join(lines)


COMMANDS: tuple[Command, ...] = (EngineCommand(),)
