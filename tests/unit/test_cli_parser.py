"""cairnctl's parser and registry: every command is declared once with its arguments, listed in
the order `cairnctl --help` shows, takes --data-dir and --json before or after its name; usage
errors and refusals are one `cairnctl: ` line on stderr with exit 2; sizes and durations are read
and printed the one way."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from core import cli
from core.cli import arguments, output
from core.cli.command import Command
from core.cli.commands import COMMANDS, by_name
from core.policy import NETWORK_MODES

REPO_ROOT = Path(__file__).resolve().parents[2]

# The order `cairnctl --help` lists the commands in (engine sign-in after the credentials).
HELP_ORDER = [
    "new",
    "continue",
    "fork",
    "tasks",
    "show",
    "rename",
    "edit",
    "delete",
    "revisions",
    "capture",
    "watch",
    "diff",
    "snapshot",
    "snapshot-name",
    "materialize",
    "restore",
    "run",
    "checkpoint",
    "follow",
    "status",
    "stop",
    "resume",
    "reconcile",
    "cost",
    "secret",
    "grant",
    "revoke",
    "engine",
    "host",
    "policy",
    "promote",
    "export",
    "artifacts",
    "config",
    "approvals",
    "approve",
    "deny",
    "archive",
    "unarchive",
    "housekeeping",
]


@pytest.fixture(autouse=True)
def root_logger_as_found():
    """main() installs log redaction on the root logger; other tests expect it as they found it."""
    root = logging.getLogger()
    filters = root.filters[:]
    handler_filters = [(handler, handler.filters[:]) for handler in root.handlers]
    yield
    root.filters[:] = filters
    for handler, kept in handler_filters:
        handler.filters[:] = kept


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_the_registry_lists_each_command_once_in_the_help_order():
    assert [c.name for c in COMMANDS] == HELP_ORDER
    assert list(by_name()) == HELP_ORDER
    assert all(isinstance(c, Command) and c.help for c in COMMANDS)


def test_the_parser_has_one_sub_command_per_registered_command_with_its_help():
    subs = subcommands(cli.build_parser())
    assert list(subs) == HELP_ORDER
    for command in COMMANDS:
        assert subs[command.name].description == command.help


@pytest.mark.parametrize("name", HELP_ORDER)
def test_every_command_takes_data_dir_and_json_after_its_name(name):
    p = subcommands(cli.build_parser())[name]
    options = {o for a in p._actions for o in a.option_strings}
    assert {"--data-dir", "--json", "-h"} <= options


def test_data_dir_and_json_go_before_or_after_the_command():
    parser = cli.build_parser()
    before = parser.parse_args(["--data-dir", "/d", "--json", "tasks"])
    after = parser.parse_args(["tasks", "--data-dir", "/d", "--json"])
    plain = parser.parse_args(["tasks"])
    assert (before.data_dir, before.json) == (after.data_dir, after.json) == ("/d", True)
    assert (plain.data_dir, plain.json) == (None, False)


def test_a_command_declares_its_own_arguments():
    args = cli.build_parser().parse_args(
        ["new", "src", "--quota", "2G", "--expires-in", "12h", "--allow", "h:1", "--allow", "h:2"]
    )
    assert args.command == "new"
    assert (args.path, args.quota, args.expires_in) == ("src", 2 << 30, 12 * 3600.0)
    assert args.allow == ["h:1", "h:2"] and args.network is None and args.message == ""


def test_network_choices_are_the_policy_modes():
    subs = subcommands(cli.build_parser())
    for name in ("new", "policy"):
        (network,) = [a for a in subs[name]._actions if "--network" in a.option_strings]
        assert tuple(network.choices) == NETWORK_MODES


def test_a_usage_error_is_one_prefixed_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["new", "src", "--network", "wide"])
    assert exited.value.code == output.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("cairnctl: argument --network: invalid choice: 'wide'")
    assert err.count("\n") == 1


def test_words_after_double_dash_go_to_the_command_that_takes_them_only(capsys):
    assert cli.main(["tasks", "--", "echo", "hi"]) == output.EXIT_ERROR
    assert capsys.readouterr().err == "cairnctl: tasks takes no command after --\n"


@pytest.mark.parametrize(
    ("text", "value"),
    [("500M", 500 << 20), ("2G", 2 << 30), ("2GiB", 2 << 30), ("1.5k", 1536), ("4096", 4096)],
)
def test_sizes_are_read_in_binary_units(text, value):
    assert arguments.size(text) == value


@pytest.mark.parametrize(
    ("text", "value"), [("90s", 90.0), ("30m", 1800.0), ("12h", 43200.0), ("2w", 1209600.0)]
)
def test_durations_are_read_with_a_unit_or_as_seconds(text, value):
    assert arguments.duration(text) == value


@pytest.mark.parametrize("text", ["lots", "0", "-1G"])
def test_a_size_that_is_not_one_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        arguments.size(text)


@pytest.mark.parametrize("text", ["soon", "0", "3y"])
def test_a_duration_that_is_not_one_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        arguments.duration(text)


def test_sizes_are_printed_in_iec_units_and_unknown_as_a_question_mark():
    assert output.size(3) == "3 B"
    assert output.size(2048) == "2.0 KiB"
    assert output.size(5 << 30) == "5.0 GiB"
    assert output.size(None) == "?"


def test_emit_prints_json_or_text(capsys):
    output.emit(argparse.Namespace(json=True), {"b": 1, "a": [2]}, "unused")
    output.emit(argparse.Namespace(json=False), {"b": 1}, lambda: "made late\n\n")
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[0]) == {"a": [2], "b": 1}
    assert out[1:] == ["made late"]


def test_a_command_runs_against_a_data_folder(data_dir, capsys):
    assert cli.main(["--data-dir", str(data_dir), "tasks", "--json"]) == output.EXIT_OK
    assert json.loads(capsys.readouterr().out) == {"tasks": []}


def test_a_refusal_is_one_prefixed_line_and_exit_2(data_dir, capsys):
    assert cli.main(["--data-dir", str(data_dir), "show", "nope"]) == output.EXIT_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("cairnctl: ") and captured.err.count("\n") == 1


def test_an_unset_setting_exits_1_with_nothing_printed(data_dir, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--data-dir", str(data_dir), "config", "get", "defaults.engine"])
    assert exited.value.code == output.EXIT_FAILED
    assert capsys.readouterr() == ("", "")


def test_python_dash_m_core_cli_is_cairnctl():
    proc = subprocess.run(
        [sys.executable, "-m", "core.cli", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("usage: cairnctl")
