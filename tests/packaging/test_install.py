"""install.sh and uninstall.sh against a throwaway home and a small stand-in bundle: the app lands
where desktops look for it (menu entry, icons, metainfo, commands), separate from Cairn's data;
nothing in the way is overwritten; a failed install leaves nothing behind; and uninstalling leaves
the home exactly as it was."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGING = REPO_ROOT / "packaging"
APP_ID = "io.cairn.Cairn"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
FAKE_VERSION = "9.8.7"


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XDG_DATA_HOME"}
    env["CAIRN_VENV_PYTHON"] = sys.executable  # build.sh renders the icons with this Python
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, **kwargs)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A stand-in for dist/cairn: two scripts, a VERSION, and the real share/ from build.sh."""
    folder = tmp_path_factory.mktemp("bundle") / "cairn"
    (folder / "_internal").mkdir(parents=True)
    (folder / "_internal" / "VERSION").write_text(f"{FAKE_VERSION}\n")
    for name in ("cairn", "cairnctl"):
        script = folder / name
        script.write_text(f'#!/bin/sh\necho "{name} {FAKE_VERSION} $*"\n')
        script.chmod(0o755)
    result = run(["bash", str(PACKAGING / "build.sh"), "--share-only", "--bundle", str(folder)])
    assert result.returncode == 0, result.stderr
    return folder


@pytest.fixture
def home(tmp_path) -> Path:
    """A home with a space in its name and things of its own: a bin folder, another app's menu
    entry and Cairn's data folder (which the app folder must stay apart from)."""
    home = tmp_path / "home of user"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "other-tool").write_text("#!/bin/sh\n")
    applications = home / ".local" / "share" / "applications"
    applications.mkdir(parents=True)
    (applications / "other.desktop").write_text(
        "[Desktop Entry]\nType=Application\nName=Other\nExec=other\n"
    )
    data = home / ".local" / "share" / "cairn"
    data.mkdir()
    (data / "cairn.db").write_bytes(b"user data")
    (home / ".config").mkdir(mode=0o700)
    return home


def tree(root: Path) -> list[tuple[str, str, str]]:
    """Every path under root with its mode, and a symlink's target or a file's content hash."""
    entries = []
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            detail = os.readlink(path)
        elif stat.S_ISREG(mode):
            detail = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            detail = ""
        entries.append((str(path.relative_to(root)), stat.filemode(mode), detail))
    return entries


def install(bundle: Path, home: Path) -> subprocess.CompletedProcess:
    return run(
        ["bash", str(PACKAGING / "install.sh"), "--bundle", str(bundle), "--home", str(home)]
    )


def uninstall(home: Path) -> subprocess.CompletedProcess:
    return run(["bash", str(PACKAGING / "uninstall.sh"), "--home", str(home)])


def test_install_puts_the_app_where_desktops_look_and_uninstall_restores_the_home(bundle, home):
    before = tree(home)
    result = install(bundle, home)
    assert result.returncode == 0, result.stderr

    share = home / ".local" / "share"
    app = share / APP_ID / "app"
    assert (app / "cairn").is_file() and (
        app / "_internal" / "VERSION"
    ).read_text().strip() == FAKE_VERSION
    for name in ("cairn", "cairnctl"):
        link = home / ".local" / "bin" / name
        assert link.is_symlink() and Path(os.readlink(link)) == app / name
        assert run([str(link), "--version"]).stdout.strip() == f"{name} {FAKE_VERSION} --version"

    desktop = share / "applications" / f"{APP_ID}.desktop"
    validate = (
        run(["desktop-file-validate", str(desktop)])
        if shutil.which("desktop-file-validate")
        else None
    )
    assert validate is None or (validate.returncode == 0 and not validate.stdout.strip()), (
        validate.stdout
    )
    exec_line = next(line for line in desktop.read_text().splitlines() if line.startswith("Exec="))
    exec_args = shlex.split(exec_line.removeprefix("Exec="))  # the home's space makes it quoted
    assert exec_args == [str(app / "cairn"), "%F"]
    assert os.access(exec_args[0], os.X_OK)

    assert (share / "metainfo" / f"{APP_ID}.metainfo.xml").is_file()
    icons = share / "icons" / "hicolor"
    for size in ICON_SIZES:
        png = icons / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert (icons / "scalable" / "apps" / f"{APP_ID}.svg").read_bytes() == (
        REPO_ROOT / "resources" / "icons" / "cairn.svg"
    ).read_bytes()
    assert (share / "cairn" / "cairn.db").read_bytes() == b"user data"  # the data folder is apart

    # The copy installed beside the manifest works without the checkout.
    result = run(["bash", str(share / APP_ID / "uninstall.sh")], cwd=home)
    assert result.returncode == 0, result.stderr
    assert tree(home) == before


def test_installing_again_replaces_the_earlier_install(bundle, home):
    before = tree(home)
    assert install(bundle, home).returncode == 0
    first = tree(home)
    second = install(bundle, home)
    assert second.returncode == 0, second.stderr
    assert "removing the earlier install" in second.stderr
    assert tree(home) == first
    assert uninstall(home).returncode == 0
    assert tree(home) == before


def test_a_file_in_the_way_stops_the_install_before_it_changes_anything(bundle, home):
    (home / ".local" / "bin" / "cairn").write_text("#!/bin/sh\necho someone else's cairn\n")
    before = tree(home)
    result = install(bundle, home)
    assert result.returncode != 0
    assert str(home / ".local" / "bin" / "cairn") in result.stderr
    assert tree(home) == before


def test_a_failed_install_takes_back_what_it_had_added(bundle, home):
    (home / ".local" / "share" / "metainfo").write_text(
        "not a folder"
    )  # met after bundle and links
    before = tree(home)
    result = install(bundle, home)
    assert result.returncode != 0
    assert "taking back what it added" in result.stderr
    assert tree(home) == before


def test_uninstall_keeps_folders_that_hold_other_files_and_says_when_nothing_is_installed(
    bundle, home
):
    assert install(bundle, home).returncode == 0
    other_icon = home / ".local" / "share" / "icons" / "hicolor" / "48x48" / "apps" / "other.png"
    other_icon.write_bytes(b"png")
    assert uninstall(home).returncode == 0
    assert other_icon.read_bytes() == b"png"
    assert not (other_icon.parent / f"{APP_ID}.png").exists()
    assert not (home / ".local" / "share" / APP_ID).exists()
    assert not (home / ".local" / "share" / "icons" / "hicolor" / "16x16").exists()

    again = uninstall(home)
    assert again.returncode != 0 and "not installed" in again.stderr


def test_a_brand_new_home_gets_every_folder_it_needs_and_uninstall_leaves_it_as_it_was(
    bundle, tmp_path
):
    home = tmp_path / "new user"
    home.mkdir()  # nothing in it: no ~/.local at all
    result = install(bundle, home)
    assert result.returncode == 0, result.stderr
    assert (home / ".local" / "share" / APP_ID / "app" / "cairn").is_file()
    assert (home / ".local" / "bin" / "cairn").is_symlink()
    removed = uninstall(home)
    assert removed.returncode == 0, removed.stderr
    assert tree(home) == []  # ~/.local and everything under it were the install's: all gone


def test_a_failed_install_in_a_brand_new_home_leaves_it_empty(bundle, tmp_path):
    home = tmp_path / "new user"
    home.mkdir()
    (home / ".local").mkdir()
    (home / ".local" / "share").write_text("in the way")  # a file where a folder must go
    before = tree(home)
    result = install(bundle, home)
    assert result.returncode != 0
    assert tree(home) == before
