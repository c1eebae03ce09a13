"""Task repositories and test environments, each prepared once per task and cached.

The base repository of a task is a fresh git repository holding only the base commit
(fetched with `--depth 1` from a local mirror): the agents cannot see the history that
followed, where the real implementation lives.

The environment is a virtualenv with the task's package and test dependencies,
installed once (network allowed only then, uv when present, else pip). Tests then run
offline (`unshare --net` where possible) with the task's own test command, the checkout
under test first on the import path.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ._dataset import Task
from ._lab import git

__all__ = [
    "Environment",
    "Unsupported",
    "base_repo",
    "check_toolchain",
    "find_source",
    "prepare_env",
]


class Unsupported(Exception):
    """A task this machine cannot run (its toolchain is missing); not a failure."""


@dataclass(frozen=True, slots=True)
class Environment:
    """Where a task's tests run from."""

    bin: Path
    """Directory whose `python` (and `pytest`) run the tests."""
    extra: tuple[tuple[str, str], ...] = ()
    """More environment variables for the test commands."""
    prepared_s: float = 0.0
    """Seconds its preparation took (0 when it came from the cache)."""
    cached: bool = False
    offline: bool = True

    def env(self, checkout: Path) -> dict[str, str]:
        """The environment variables of a test command run in `checkout`."""
        path = f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        src = checkout / "src"
        out = {
            "PATH": path, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
            "VIRTUAL_ENV": str(self.bin.parent), "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(src) if src.is_dir() else str(checkout),
            "PIP_NO_INDEX": "1", "UV_OFFLINE": "1",
        }
        out.update(self.extra)
        if self.offline and _can_unshare():
            out["CORRAL_BENCH_OFFLINE"] = "1"
        return out

    @classmethod
    def current(cls) -> Environment:
        """This interpreter's environment (the mini suite's tests need only pytest)."""
        # The mini suite's tests need no pytest plugin; this interpreter's environment
        # may hold heavy ones (seconds of imports per run).
        return cls(Path(sys.executable).parent, cached=True,
                   extra=(("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1"),))


_UNSHARE: bool | None = None


def _can_unshare() -> bool:
    global _UNSHARE
    if _UNSHARE is None:
        try:
            _UNSHARE = subprocess.run(["unshare", "--net", "--", "true"],
                                      capture_output=True).returncode == 0
        except OSError:
            _UNSHARE = False
    return _UNSHARE


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def find_source(task: Task, repos: Path | None) -> Path:
    """A local repository (bare mirror, clone or bundle) holding the task's upstream.
    Raises FileNotFoundError naming the places looked at."""
    owner, _, name = task.upstream.partition("/")
    roots = [repos] if repos else []
    names = [f"{owner}+{name}/repo", f"{owner}+{name}", f"{owner}/{name}", name,
             f"{name}.git", task.setup.get("REPO_NAME", ""), f"{name}.bundle",
             f"{task.setup.get('REPO_NAME', '')}.bundle"]
    tried = []
    for root in roots:
        for n in names:
            if not n:
                continue
            p = root / n
            tried.append(str(p))
            if p.is_file() and p.suffix == ".bundle":
                return p
            if (p / "HEAD").exists() or (p / ".git").exists():
                return p
    raise FileNotFoundError(
        f"no local repository for {task.upstream} (task {task.key}); give --repos DIR "
        f"holding a mirror or clone; looked at: {', '.join(tried) or 'nothing'}")


def base_repo(task: Task, repos: Path | None, cache: Path) -> Path:
    """A git repository holding only the task's base commit, checked out (cached)."""
    dst = cache / "repos" / task.key.replace("/", "-")
    with _locked(cache / "locks" / (task.key.replace("/", "-") + ".repo")):
        if (dst / ".git" / "corral-base-ready").exists():
            return dst
        src = find_source(task, repos)
        if dst.exists():
            shutil.rmtree(dst)
        dst.mkdir(parents=True)
        git(dst, "init", "-q")
        if src.suffix == ".bundle":
            # A bundle of the mini suite holds the base commit alone.
            git(dst, "fetch", "-q", "--no-tags", str(src.resolve()),
                "refs/heads/*:refs/remotes/source/*")
        else:
            git(dst, "fetch", "-q", "--no-tags", "--depth", "1", f"file://{src.resolve()}",
                task.base_commit)
        git(dst, "checkout", "-q", "--detach", task.base_commit)
        git(dst, "branch", "-q", "-f", "base", task.base_commit)
        (dst / ".git" / "corral-base-ready").write_text(task.base_commit + "\n")
    return dst


def check_toolchain(task: Task) -> None:
    """Raises Unsupported when this machine cannot prepare `task`'s environment."""
    if task.language != "python":
        from ._toolchains import check  # Go, TypeScript, Rust: one preparer each

        return check(task)


def prepare_env(task: Task, repo: Path, cache: Path, *, mini: bool = False) -> Environment:
    """The task's test environment, prepared once and cached under `cache/envs`.

    Raises Unsupported when the task's toolchain is missing here, RuntimeError when
    installing fails.
    """
    if mini:
        return Environment.current()
    check_toolchain(task)
    if task.language != "python":
        from ._toolchains import prepare

        return prepare(task, repo, cache)
    root = cache / "envs" / task.key.replace("/", "-")
    ready = root / "ready.json"
    with _locked(cache / "locks" / (task.key.replace("/", "-") + ".env")):
        if ready.exists():
            return Environment(root / "venv" / "bin", cached=True)
        started = time.monotonic()
        if root.exists():
            shutil.rmtree(root)
        src = root / "src"
        shutil.copytree(repo, src, ignore=shutil.ignore_patterns(".git"))
        log = root / "prepare.log"
        uv = shutil.which("uv")
        py = root / "venv" / "bin" / "python"

        def run(argv: list[str], check: bool = True) -> bool:
            with log.open("a") as f:
                f.write(f"$ {' '.join(argv)}\n")
                f.flush()
                r = subprocess.run(argv, cwd=src, stdout=f, stderr=subprocess.STDOUT)
            if check and r.returncode != 0:
                raise RuntimeError(f"preparing {task.key}: {' '.join(argv)} failed "
                                   f"(see {log})")
            return r.returncode == 0

        if uv:
            run([uv, "venv", "-q", "--python", sys.executable, str(root / "venv")])
            pip = [uv, "pip", "install", "-q", "--python", str(py)]
        else:
            run([sys.executable, "-m", "venv", str(root / "venv")])
            pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # As the task's own setup does: test extras if there are any, else the package.
        if not run([*pip, "-e", ".[test]"], check=False):
            run([*pip, "-e", "."])
        run([*pip, "pytest", "pytest-xdist", "pytest_mock"])
        seconds = time.monotonic() - started
        ready.write_text(json.dumps({"task": task.key, "prepared_s": round(seconds, 2),
                                     "installer": "uv" if uv else "pip"}))
        return Environment(root / "venv" / "bin", prepared_s=seconds)
