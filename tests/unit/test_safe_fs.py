"""Host writes into sandbox-writable folders never follow a planted link."""

import os

import pytest

from core.errors import CairnError
from core.safe_fs import ensure_dir, write_file


def test_a_planted_link_to_a_folder_is_replaced_not_followed(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (root / "r_1.2").symlink_to(victim)
    write_file(root, "r_1.2/script.sh", "echo hi\n")
    assert not (root / "r_1.2").is_symlink()
    assert (root / "r_1.2" / "script.sh").read_text() == "echo hi\n"
    assert list(victim.iterdir()) == []


def test_a_planted_link_at_the_file_name_is_replaced(tmp_path):
    root = tmp_path / "home"
    root.mkdir()
    target = tmp_path / "passwd"
    target.write_text("precious\n")
    ensure_dir(root, ".codex")
    (root / ".codex" / "config.toml").symlink_to(target)
    write_file(root, ".codex/config.toml", "model = 'x'\n")
    assert target.read_text() == "precious\n"
    assert not (root / ".codex" / "config.toml").is_symlink()
    assert (root / ".codex" / "config.toml").read_text() == "model = 'x'\n"


def test_a_file_where_a_folder_belongs_is_replaced(tmp_path):
    (tmp_path / "x").write_text("file")
    ensure_dir(tmp_path, "x/y")
    assert (tmp_path / "x" / "y").is_dir()


def test_unsafe_paths_are_refused(tmp_path):
    with pytest.raises(CairnError):
        write_file(tmp_path, "../escape", "no")
    assert not (tmp_path.parent / "escape").exists()


def test_the_written_mode_is_kept(tmp_path):
    p = write_file(tmp_path, "a/b.sh", "x", mode=0o755)
    assert os.stat(p).st_mode & 0o777 == 0o755
