"""Reading what a merge returns, and the tree diff that merges and rewinds use.

- `Trace.diff_trees` equals `git diff-tree -r` (no renames) on generated trees;
- `Trace.read` and `Trace.tree_paths` take a tree id (a dry run's merged tree)
  as well as a commit.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator import Coordinator, NotFound
from coordinator.store._trace import Trace

NAMES = ["a", "b", "a/x", "a/y", "b/c/d", "a/x/z", "e", "é ü", "b/c/e"]
MODES = [0o100644, 0o100755, 0o120000]

tree_spec = st.dictionaries(
    st.sampled_from(NAMES),
    st.tuples(st.sampled_from([b"1", b"2", b"3\n"]), st.sampled_from(MODES)),
    max_size=6,
)


def build(trace: Trace, spec: dict[str, tuple[bytes, int]]) -> str:
    # a path that is also a directory of another path is dropped (git cannot hold both)
    keep = {p: v for p, v in spec.items()
            if not any(q.startswith(p + "/") for q in spec)}
    return trace.build_tree(None, {p: (trace.write_blob(c), m) for p, (c, m) in keep.items()})


def git_diff_tree(git_dir: Path, old: str, new: str) -> dict[str, tuple[str, int] | None]:
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), "diff-tree", "-r", "-z", "--no-renames", old, new],
        check=True, capture_output=True,
    ).stdout.split(b"\0")
    got: dict[str, tuple[str, int] | None] = {}
    for meta, path in zip(out[0:-1:2], out[1::2], strict=True):
        _, new_mode, _, new_id, status = meta.decode().lstrip(":").split()
        name = path.decode()
        if status == "D":
            got.setdefault(name, None)
        else:
            got[name] = (new_id, int(new_mode, 8))
    return got


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_spec, tree_spec)
@pytest.mark.slow
def test_diff_trees_equals_git_diff_tree(old, new):
    """diff_trees gives, per changed path, the new (blob, mode) or None, exactly
    the paths `git diff-tree -r` lists (typechanges and file/directory swaps too)."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = Trace(Path(tmp) / "t.git")
        a, b = build(trace, old), build(trace, new)
        trace.checkpoint()
        assert trace.diff_trees(a, b) == git_diff_tree(trace.path, a, b)
        trace.close()


async def test_read_takes_the_tree_of_a_dry_run(tmp_path, sample_repo):
    """A dry run's merged tree is readable by its id (read, tree_paths, iter_files)."""
    async with Coordinator.open(tmp_path / "s", sample_repo) as coord:
        a = await coord.root.fork("a")
        b = await coord.root.fork("b")
        await a.write("src/new.py", b"ours\n")
        await b.write("docs/guide.md", b"theirs\n")
        dry = await a.merge(b, dry_run=True)
        assert dry.tree is not None and dry.commit is None
        trace = coord.trace
        assert trace.read(dry.tree, "docs/guide.md") == b"theirs\n"
        assert trace.read(dry.tree, "src/new.py") == b"ours\n"
        assert trace.read(a.head, "src/new.py") == b"ours\n"  # commits still work
        assert "docs/guide.md" in trace.tree_paths(dry.tree)
        assert trace.tree_paths(dry.tree) == sorted(p for p, _, _ in trace.iter_files(dry.tree))
        with pytest.raises(NotFound):
            trace.read(dry.tree, "missing.txt")
        with pytest.raises(NotFound):
            trace.read("0" * 40, "docs/guide.md")
