"""core.launch: the resources folder and the helper processes' command lines are right from a
checkout and from the frozen bundle, the bundle's module switch runs a module like `python -m`,
and the programs Cairn starts from the bundle get the user's library path back."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from core import approvals, launch, sandboxes
from core.sandbox import egress

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def frozen(monkeypatch, tmp_path):
    """This process as the bundle sees itself: sys.frozen set and _MEIPASS its contents folder."""
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    return tmp_path


def test_from_a_checkout_resources_are_at_the_top_and_helpers_run_with_dash_m():
    assert not launch.is_frozen()
    assert launch.resources_root() == REPO_ROOT / "resources"
    assert launch.python_command("core.approvals", "serve") == [
        sys.executable,
        "-m",
        "core.approvals",
        "serve",
    ]


def test_frozen_resources_are_in_the_bundle_and_helpers_use_the_module_switch(frozen):
    assert launch.is_frozen()
    assert launch.resources_root() == frozen / "resources"
    assert launch.resource_path("policy", "x.json") == frozen / "resources" / "policy" / "x.json"
    assert launch.python_command("core.sandbox.egress", "--detach") == [
        sys.executable,
        "--cairn-module",
        "core.sandbox.egress",
        "--detach",
    ]


def test_another_interpreter_always_takes_dash_m(frozen):
    assert launch.python_command("m", "a", python="/usr/bin/python3") == [
        "/usr/bin/python3",
        "-m",
        "m",
        "a",
    ]


def test_the_shipped_resources_are_found_where_core_looks_for_them():
    assert approvals.RULES_FILE.is_file()
    assert (sandboxes.RESOURCES_SANDBOX / "approval-gate.py").is_file()
    assert (sandboxes.RESOURCES_SANDBOX / "redact-output.py").is_file()
    assert egress.FORWARDER_SCRIPT.is_file()


def test_the_bundle_gives_child_processes_the_users_library_path(frozen):
    env = {"LD_LIBRARY_PATH": "/bundle/_internal:/opt/lib", "LD_LIBRARY_PATH_ORIG": "/opt/lib"}
    launch.restore_library_path(env)
    assert env == {"LD_LIBRARY_PATH": "/opt/lib"}

    env = {"LD_LIBRARY_PATH": "/bundle/_internal", "PATH": "/bin"}
    launch.restore_library_path(env)
    assert env == {"PATH": "/bin"}  # the user had none


def test_from_a_checkout_the_library_path_is_left_alone():
    env = {"LD_LIBRARY_PATH": "/opt/lib", "LD_LIBRARY_PATH_ORIG": "/x"}
    launch.restore_library_path(env)
    assert env == {"LD_LIBRARY_PATH": "/opt/lib", "LD_LIBRARY_PATH_ORIG": "/x"}


def test_other_command_lines_are_not_for_the_module_switch():
    assert launch.run_module_switch([]) is None
    assert launch.run_module_switch(["--version"]) is None
    assert launch.run_module_switch(["/some/folder", "--cairn-module"]) is None


def test_the_module_switch_without_a_module_is_a_usage_error(capsys):
    assert launch.run_module_switch(["--cairn-module"]) == 2
    assert "--cairn-module MODULE" in capsys.readouterr().err


def test_the_module_switch_runs_the_module_as_main_with_its_arguments(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "cairn_launch_probe.py").write_text(
        textwrap.dedent("""
        import sys
        if __name__ == "__main__":
            print("argv", sys.argv[1:])
            sys.exit(int(sys.argv[1]))
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["cairn"])
    with pytest.raises(SystemExit) as exit_info:
        launch.run_module_switch(["--cairn-module", "cairn_launch_probe", "3", "--flag"])
    assert exit_info.value.code == 3
    assert "argv ['3', '--flag']" in capsys.readouterr().out
    sys.modules.pop("cairn_launch_probe", None)
