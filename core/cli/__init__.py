"""`cairnctl`: Cairn on the command line, for scripts and checks, over the same facade as the GUI.

Owns argument parsing and output (plain text, or one JSON object with --json); every decision
is the facade's. Each command, its arguments beside what it runs, is a class in
core/cli/commands/; this module builds the parser from them and runs the one asked for. Errors
exit 2 with one line on stderr (core/cli/output.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from core import events
from core.app import Cairn
from core.cli.arguments import Parser, add_common
from core.cli.commands import COMMANDS, by_name
from core.cli.output import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, PROG, error, warn
from core.errors import CairnError
from core.events import Event
from core.redact import install_log_redaction, redact_exception

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """`cairnctl` with every command of the registry as a sub-command."""
    parser = Parser(prog=PROG, description="Cairn on the command line.")
    add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        add_common(p, top=False)
        command.add_arguments(p)
    return parser


def _warn_problems(event: Event) -> None:
    if event.kind == events.WORKSPACE_PROBLEM:
        warn(event.payload["message"])


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
            error(f"{args.command} takes no command after --")
            return EXIT_ERROR
        args.argv = list(args.argv) + tail
    install_log_redaction()
    try:
        with Cairn(args.data_dir) as app:
            app.events.subscribe(_warn_problems)
            by_name()[args.command].run(app, args)
    except CairnError as exc:
        error(redact_exception(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # an unexpected failure is still one clear line
        if os.environ.get("CAIRN_DEBUG"):
            raise
        error(f"internal error: {type(exc).__name__}: {redact_exception(exc)}")
        return EXIT_ERROR
    return EXIT_OK
