"""Objects are compressed with a window sized to them: the same bytes come back, and git reads
what the vault writes, whatever the size."""

from __future__ import annotations

import os
import subprocess
import zlib

import pytest

from core.vault.objects import deflate


@pytest.mark.parametrize("size", [0, 1, 250, 262, 263, 4000, 40_000, 70_000, 1_000_000])
def test_what_is_deflated_inflates_to_the_same_bytes_and_git_reads_it(vault, size):
    data = (os.urandom(size // 2) + b"text " * (size // 10))[:size]
    assert zlib.decompress(deflate(data)) == data
    sha = vault.objects.write_blob(data)
    shown = subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "cat-file", "blob", sha],
        capture_output=True,
        check=True,
    ).stdout
    assert shown == data
    subprocess.run(["git", "--git-dir", str(vault.git_dir), "fsck", "--strict"], check=True)
