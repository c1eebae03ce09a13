"""The host-side environment of the stock-git workbench (`GitWorkbench`, the reference
the scope evaluation is checked against), for Python tasks only: a virtualenv under
`cache/envs/<task>/` with the task's package and test dependencies, prepared once.
Runs in Corral build every language's environment in the task's snapshot instead
(`_task_state`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ._dataset import Task
from ._environment import check_toolchain
from ._recipe import Unsupported
from ._repos import locked

__all__ = ["Environment", "prepare_env"]


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
        # A private temporary directory: pytest's shared /tmp/pytest-of-USER is cleaned
        # by every session, and another program's busy mount there fails suites that
        # turn warnings into errors (click's).
        tmp = checkout.parent / f".{checkout.name}.tmp"
        tmp.mkdir(exist_ok=True)
        out["TMPDIR"] = str(tmp)
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



def prepare_env(task: Task, repo: Path, cache: Path, *, mini: bool = False) -> Environment:
    """The task's test environment, prepared once and cached under `cache/envs`.

    Raises Unsupported when the task's toolchain is missing here, RuntimeError when
    installing fails.
    """
    if mini:
        return Environment.current()
    check_toolchain(task)
    if task.language != "python":
        # The other languages' environments are built in the task's snapshot only.
        raise Unsupported(f"{task.language} task: the host-side environment is Python's "
                          "only (the scope evaluation builds the others)")
    root = cache / "envs" / task.key.replace("/", "-")
    ready = root / "ready.json"
    with locked(cache / "locks" / (task.key.replace("/", "-") + ".env")):
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

