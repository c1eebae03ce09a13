"""A real third-party project for the end-to-end tests: a released sdist from the package
index (downloaded with pip at test time, never a fixture written for the tests), extracted
and committed as a git repository."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import make_repo

REAL = "itsdangerous==2.2.0"
"""It ships its tests and requirements/tests.txt in its sdist, and its suite takes seconds."""


def real_project(where: Path) -> Path:
    """itsdangerous's sdist as a git repository at `where/repo` (one commit). Skips, with
    pip's error as the reason, when the package index cannot be reached from here."""
    where.mkdir(parents=True, exist_ok=True)
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                          ":all:", REAL, "-d", str(where)],
                         capture_output=True, text=True, timeout=300)
    sdists = list(where.glob("itsdangerous-*.tar.gz"))
    if got.returncode != 0 or not sdists:
        pytest.skip(f"the package index is unreachable from here: pip download {REAL} "
                    f"failed: {got.stderr.strip()[-300:]}")
    with tarfile.open(sdists[0]) as tar:
        tar.extractall(where, filter="data")
    src = next(p for p in where.iterdir() if p.is_dir() and p.name.startswith("itsdangerous"))
    assert (src / "tests").is_dir() and (src / "requirements" / "tests.txt").is_file()
    files = {str(p.relative_to(src)): p.read_bytes() for p in src.rglob("*") if p.is_file()}
    return make_repo(where / "repo", files)
