"""A gate rule's path glob means what the same line means in a .gitignore: each
case is checked against git itself (`git check-ignore`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from coordinator import FsWrite
from coordinator.policies import GateRule

CASES = [
    ("src/*", "src/a.py"),
    ("src/*", "src/a/b.py"),  # src/a matches, so everything under it does
    ("src/*", "lib/src/a.py"),  # a slash anchors the glob at the root
    ("src/*.py", "src/b.py"),
    ("src/*.py", "src/a/b.py"),  # `*` stops at `/` (fnmatch's crossed it)
    ("src/**/*.py", "src/a/b/c.py"),
    ("*.py", "x/y/z.py"),  # no slash: any depth
    ("*.lock", "poetry.lock"),
    ("docs", "a/docs/x.md"),
    ("/a.py", "x/a.py"),
    ("/a.py", "a.py"),
    ("build/", "build/out.o"),
    ("build/", "build"),  # a trailing slash: only a directory, and a written path is a file
]


@pytest.mark.parametrize(("glob", "path"), CASES)
def test_gate_glob_matches_as_git_ignores(tmp_path: Path, glob: str, path: str) -> None:
    """The rule matches a written path exactly when git would ignore it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(glob + "\n")
    git = subprocess.run(["git", "-C", str(tmp_path), "check-ignore", "-q", "--no-index",
                          path])
    assert git.returncode in (0, 1), git
    rule = GateRule.parse(f"fs.write:{glob}")
    assert rule.matches(FsWrite(path=path, blob="0" * 40)) == (git.returncode == 0)
