"""`cairn`'s own options and folders are told apart from Qt's, however Qt's are written."""

from __future__ import annotations

from pathlib import Path

import pytest

from gui.main import build_parser, split_qt_arguments


@pytest.mark.parametrize(
    "argv,ours,qt",
    [
        (["-platform", "xcb", "-style", "Fusion"], [], ["-platform", "xcb", "-style", "Fusion"]),
        (["-platform=offscreen", "/src"], ["/src"], ["-platform", "offscreen"]),
        (["--platform", "offscreen", "--data-dir", "/d"], ["--data-dir", "/d"], ["-platform", "offscreen"]),
        (["/a", "-reverse", "/b"], ["/a", "/b"], ["-reverse"]),
        (["--", "-platform"], ["--", "-platform"], []),
        (["-platform"], [], ["-platform"]),
    ],
)  # fmt: skip
def test_qt_options_and_their_values_go_to_qt(argv, ours, qt):
    assert split_qt_arguments(argv) == (ours, qt)


def test_the_readme_example_parses_as_written():
    ours, qt = split_qt_arguments(["-platform", "offscreen", "--data-dir", "/tmp/d", "/src/repo"])
    args = build_parser().parse_args(ours)
    assert qt == ["-platform", "offscreen"]
    assert args.paths == [Path("/src/repo")] and args.data_dir == Path("/tmp/d")


def test_an_unknown_option_is_an_error_not_a_folder(capsys):
    ours, _ = split_qt_arguments(["--no-such-option"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(ours)
    assert "--no-such-option" in capsys.readouterr().err
