"""The remote mount's metadata and block arithmetic (``regency._mount._tree``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from regency._mount._tree import BLOCK, blocks_of, children, list_tree


def test_the_tree_lists_dirs_and_files_read_only_and_stays_inside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (tmp_path / "secret").write_text("outside")
    os.symlink(tmp_path / "secret", root / "escape")
    tree = list_tree(root)
    assert sorted(tree) == ["/", "/pkg", "/pkg/a.py", "/run.sh"]
    assert tree["/pkg/a.py"][1] == 6
    assert stat.S_ISDIR(tree["/pkg"][0])
    assert all(mode & 0o222 == 0 for mode, _, _ in tree.values())
    assert tree["/run.sh"][0] & 0o111
    assert children(tree) == {"/": ["pkg", "run.sh"], "/pkg": ["a.py"]}


@given(st.integers(0, 5 * BLOCK), st.integers(0, 3 * BLOCK), st.integers(0, 5 * BLOCK))
def test_blocks_of_covers_exactly_the_bytes_read(offset: int, size: int, length: int) -> None:
    blocks = blocks_of(offset, size, length)
    end = min(offset + size, length)
    if end <= offset:
        assert len(blocks) == 0
        return
    assert blocks[0] * BLOCK <= offset < (blocks[0] + 1) * BLOCK
    assert blocks[-1] * BLOCK < end <= (blocks[-1] + 1) * BLOCK
    assert list(blocks) == list(range(blocks[0], blocks[-1] + 1))
