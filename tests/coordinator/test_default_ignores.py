"""Tool caches (.pytest_cache, __pycache__, ...) stay out of the trace by default, in a
repository without a .gitignore; the repository's .gitignore and $CORRAL_DEFAULT_IGNORES
override the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import Coordinator, ExecOutcome
from tests.conftest import make_repo

MAKE = ("mkdir -p .pytest_cache/v __pycache__ && echo c > .pytest_cache/v/x "
        "&& echo b > __pycache__/m.cpython-311.pyc && echo s > made.txt")


async def _exec_changes(tmp_path: Path, files: dict[str, str]) -> tuple[set[str], set[str]]:
    repo = make_repo(tmp_path / "repo", files)
    async with Coordinator.open(tmp_path / "state", repo, backend="copy") as coord:
        a = await coord.root.fork("a")
        r = await a.exec(["sh", "-c", MAKE])
        assert r.ok and isinstance(r.outcome, ExecOutcome)
        tree = {p for p, _, _ in coord.trace.iter_files(str(coord.trace.commit(a.head).tree_id))}
        return tree, set(r.outcome.ignored)


async def test_caches_stay_out_of_the_branch_without_a_gitignore(tmp_path):
    """No .gitignore: made.txt is committed, the caches are not (kept beside the tree)."""
    tree, ignored = await _exec_changes(tmp_path, {"README.md": "r\n"})
    assert "made.txt" in tree
    assert not any(p.startswith((".pytest_cache/", "__pycache__/")) for p in tree)
    assert ignored == {".pytest_cache/v/x", "__pycache__/m.cpython-311.pyc"}


@pytest.mark.slow
async def test_the_repositorys_gitignore_overrides_the_defaults(tmp_path):
    """`!.pytest_cache/` in .gitignore puts that cache back in the tree."""
    tree, _ = await _exec_changes(tmp_path, {".gitignore": "!.pytest_cache/\n"})
    assert ".pytest_cache/v/x" in tree and "__pycache__/m.cpython-311.pyc" not in tree


@pytest.mark.slow
async def test_the_environment_replaces_the_defaults(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """CORRAL_DEFAULT_IGNORES="" records everything, as before."""
    monkeypatch.setenv("CORRAL_DEFAULT_IGNORES", "")
    tree, ignored = await _exec_changes(tmp_path, {"README.md": "r\n"})
    assert {".pytest_cache/v/x", "__pycache__/m.cpython-311.pyc"} <= tree and not ignored
