"""The desktop entry and the AppStream metainfo: both validate with the freedesktop tools, name the
same app id the GUI gives Qt, open folders, and say the version the package has."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from core import __version__

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGING = REPO_ROOT / "packaging"
APP_ID = "io.cairn.Cairn"
DESKTOP_FILE = PACKAGING / f"{APP_ID}.desktop"
METAINFO = PACKAGING / f"{APP_ID}.metainfo.xml"


def tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(
            f"{name} is not installed (Debian package {package}; scripts/setup.sh installs it)"
        )
    return path


def desktop_entry() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive
    parser.read(DESKTOP_FILE, encoding="utf-8")
    return parser["Desktop Entry"]


def test_the_desktop_file_validates():
    result = subprocess.run(
        [tool("desktop-file-validate", "desktop-file-utils"), str(DESKTOP_FILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_the_metainfo_validates():
    result = subprocess.run(
        [tool("appstreamcli", "appstream"), "validate", "--no-net", str(METAINFO)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "W:" not in result.stdout and "E:" not in result.stdout, result.stdout


def test_the_desktop_file_opens_folders_in_cairn_and_matches_the_window():
    from gui.main import APP_NAME, DESKTOP_FILE_NAME

    entry = desktop_entry()
    assert DESKTOP_FILE_NAME == APP_ID == DESKTOP_FILE.stem
    exec_args = entry["Exec"].split()
    assert exec_args[0] == "cairn"  # install.sh makes it the installed bundle's absolute path
    assert "%F" in exec_args or "%U" in exec_args  # "Open with" passes the folders
    assert "inode/directory" in entry["MimeType"].split(";")
    assert entry["Icon"] == APP_ID
    assert entry["Type"] == "Application" and entry["Terminal"] == "false"
    # Qt on X11 sets WM_CLASS to ("cairn", application name): docks match the window by the latter.
    assert entry["StartupWMClass"] == APP_NAME


def test_the_metainfo_describes_this_version_of_this_app():
    root = ET.parse(METAINFO).getroot()
    assert root.get("type") == "desktop-application"
    assert root.findtext("id") == APP_ID
    assert root.find("launchable[@type='desktop-id']").text == DESKTOP_FILE.name
    newest = root.find("releases/release")
    assert newest is not None and newest.get("version") == __version__, (
        f'add a <release version="{__version__}"> at the top of <releases> in {METAINFO.name}'
    )
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert root.findtext("project_license") == pyproject["project"]["license"]["text"]
    assert root.find("content_rating") is not None
