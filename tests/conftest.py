"""Shared fixtures: real git repositories in temp dirs, and the sandbox backends."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def make_repo(path: Path, files: dict[str, str | bytes]) -> Path:
    """A git repository at `path` with one commit holding `files`."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, content in files.items():
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(content.encode() if isinstance(content, str) else content)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "snapshot")
    return path


SAMPLE = {
    "README.md": "# sample\n",
    "src/app.py": "".join(f"line {i}\n" for i in range(1, 21)),
    "src/util.py": "def helper():\n    return 1\n",
    "docs/guide.md": "guide\n",
    ".gitignore": "__pycache__/\n*.pyc\nbuild/\n",
}


@pytest.fixture
def sample_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", SAMPLE)


def _backends() -> list[str]:
    import sandboxes

    return list(sandboxes.backends)


# overlay and fuse mount: marked `root`, so `-m "not root"` is what runs unprivileged;
# both are `slow` too: the fast subset runs each backend test on the copy backend
@pytest.fixture(params=[pytest.param("overlay", marks=[pytest.mark.root, pytest.mark.slow]),
                        "copy",
                        pytest.param("fuse", marks=[pytest.mark.root, pytest.mark.slow])])
def backend(request: pytest.FixtureRequest) -> str:
    """Each sandbox backend; skips (with the reason) where one cannot run here."""
    import sandboxes

    cls = sandboxes.backends.get(request.param)
    if cls is None:
        pytest.skip(f"backend {request.param} is not built")
    reason = cls.unavailable_reason()
    if reason:
        pytest.skip(f"backend {request.param} unavailable: {reason}")
    return request.param
