"""The calc repository the grading and task-state tests build in a temp dir: two
functions and one test, a diff helper and its task directory."""

from __future__ import annotations

from pathlib import Path

from bench.cooperbench._dataset import Task
from bench.cooperbench._repos import git

BASE = {
    "calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
}
COMMAND = "set -e\npython -m pytest tests/test_calc.py -q -p no:cacheprovider\n"


def calc_diff(repo: Path, files: dict[str, str], paths: tuple[str, ...] = ()) -> str:
    """The git diff from base that writes `files` (then the checkout goes back to base)."""
    for p, text in files.items():
        (repo / p).parent.mkdir(parents=True, exist_ok=True)
        (repo / p).write_text(text)
    git(repo, "add", "-A")
    out = git(repo, "diff", "--cached", "base", "--", *(paths or ["."])).stdout
    git(repo, "reset", "-q", "--hard", "base")
    git(repo, "clean", "-fdxq")
    return out


def make_calc_repo(tmp_path: Path) -> Path:
    """The calc repository at `tmp_path/repo`, its base commit on branch `base`."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    for p, text in BASE.items():
        (r / p).parent.mkdir(parents=True, exist_ok=True)
        (r / p).write_text(text)
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "base")
    git(r, "branch", "base")
    return r


def calc_task(root: Path) -> Task:
    """A task directory of the calc repository whose runner runs COMMAND."""
    (root / "feature1").mkdir(parents=True)
    (root / "setup.sh").write_text('REPO_NAME="calc"\nBASE_COMMIT="base"\n')
    (root / "Dockerfile").write_text("FROM python:3.11-slim\n")
    (root / "runner.sh").write_text("# Running tests\n" + COMMAND)
    return Task(repo="calc_task", id=1, path=root)
