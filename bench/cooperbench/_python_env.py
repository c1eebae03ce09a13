"""Python's environment: a virtualenv in a directory the repository ignores, with the
task's package and test dependencies installed as its runner.sh installs them, once,
in the task's `env` scope (network on). The mini suite's tasks get a virtualenv of
/usr/bin/python3 with pytest unpacked into it, offline (`_pytest_seed`).

Its test command is the tail of the task's runner.sh (`_dataset.test_command`).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sandboxes import share_file

from ._dataset import Task
from ._dataset import test_command as runner_test_command
from ._recipe import REPO, LanguageSupport, Recipe, Snapshot, Unsupported
from ._repos import locked

__all__ = ["PYTEST_REQUIREMENT", "PYTHON"]


def _venv_dir(snapshot: Snapshot) -> str:
    # The repository's own name for a virtualenv when it ignores one; else a
    # directory Corral ignores by default.
    for name in (".venv", "venv", "env", ".tox/corral"):
        if snapshot.ignored(f"{name}/bin/python"):
            return name
    return ".cache/corral-venv"


def _pytest_seed(into: Path, cache: Path) -> None:
    """Puts in `into` a tar of pytest and its requirements (pure Python), to unpack into a
    virtualenv offline (the mini suite's tests need nothing else): this interpreter's
    pytest when it has one, else the pytest toolchain fetched once into `cache`. Built
    once per process, with hash-based pyc files (see _HASHED_PYC)."""
    share_file(_pytest_seed_tar(_pytest_path(cache)), into / "site-packages.tar")


PYTEST_REQUIREMENT = "pytest>=8"
"""The pytest the mini suite's tasks get when Corral's interpreter has none."""


def _pytest_path(cache: Path) -> tuple[str, ...]:
    """Where pytest's distributions are found: this interpreter's path when it has
    pytest (a development install), else a directory under `cache/toolchains` where
    pytest is installed from the package index once (a user's install has no pytest:
    it is a dev extra, and the tasks' tests need not share Corral's dependencies).
    Raises RuntimeError naming the log when the install fails."""
    from importlib import metadata

    try:
        metadata.distribution("pytest")
        return tuple(sys.path)
    except metadata.PackageNotFoundError:
        pass
    tag = sys.implementation.cache_tag
    root = cache / "toolchains" / f"pytest-{tag}"
    with locked(cache / "locks" / f"pytest-{tag}.toolchain"):
        if (root / "ready.json").exists():
            return (str(root / "site-packages"),)
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        log = root / "install.log"
        target = root / "site-packages"
        uv = shutil.which("uv")
        pip = ([uv, "pip", "install", "--python", sys.executable] if uv else
               [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"])
        argv = [*pip, "--quiet", "--no-compile", "--target", str(target), PYTEST_REQUIREMENT]
        started = time.monotonic()
        with log.open("w") as f:
            f.write(f"$ {' '.join(argv)}\n")
            f.flush()
            r = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise RuntimeError(f"installing {PYTEST_REQUIREMENT} for the mini suite's tests "
                               f"from the package index failed (see {log})")
        (root / "ready.json").write_text(json.dumps({
            "requirement": PYTEST_REQUIREMENT, "installer": "uv" if uv else "pip",
            "seconds": round(time.monotonic() - started, 2)}))
    return (str(target),)


@functools.cache
def _pytest_seed_tar(path: tuple[str, ...]) -> Path:
    import atexit
    import py_compile
    import tarfile
    import tempfile
    from importlib import metadata

    from packaging.requirements import Requirement

    out = Path(tempfile.mkdtemp(prefix="corral-seed-")) / "site-packages.tar"
    atexit.register(shutil.rmtree, out.parent, True)
    todo, seen = ["pytest"], set()
    with tarfile.open(out, "w") as tar:
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            dist = next(iter(metadata.distributions(name=name, path=list(path))), None)
            if dist is None:
                raise RuntimeError(f"{name}, which pytest requires, is not installed in "
                                   f"{', '.join(path[:3])}")
            for f in dist.files or ():
                src = Path(str(dist.locate_file(f)))
                if not src.is_file() or ".." in f.parts or "__pycache__" in f.parts:
                    continue
                tar.add(src, arcname=str(f))
                if src.suffix == ".py":
                    pyc = py_compile.compile(
                        str(src), cfile=str(out.parent / "pyc"), doraise=False,
                        invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
                    if pyc:
                        tar.add(pyc, arcname=str(f.parent / "__pycache__" / (
                            f"{src.stem}.{sys.implementation.cache_tag}.pyc")))
            for spec in dist.requires or ():
                req = Requirement(spec)
                if req.marker is None or req.marker.evaluate({"extra": ""}):
                    todo.append(req.name)
    return out


def _python_recipe(task: Task, snapshot: Snapshot, mini: bool) -> Recipe:
    venv = _venv_dir(snapshot)
    env = {"PATH": f"{REPO}/{venv}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
           "TMPDIR": "/tmp", "LANG": "C.UTF-8", "VIRTUAL_ENV": f"{REPO}/{venv}",
           "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": f"{REPO}/src" if snapshot.exists("src") else REPO,
           "PIP_NO_INDEX": "1",
           # pytest's cache in the command's private /tmp: in the workspace it would be
           # recorded (as ignored files) after every test run, for nothing.
           "PYTEST_ADDOPTS": "-o cache_dir=/tmp/.pytest_cache"}
    if mini:
        if sys.version_info[:2] != _system_python():
            raise Unsupported("the mini suite's environment puts pytest, compiled by this "
                              "interpreter, into a virtualenv of /usr/bin/python3, another "
                              "version "
                              f"({'.'.join(map(str, _system_python()))})")
        script = (f"set -e\npython3 -m venv --without-pip {venv}\n"
                  f"tar -xf \"$CORRAL_SEED/site-packages.tar\" -C \"$({venv}/bin/python -c "
                  "'import sysconfig; print(sysconfig.get_path(\"purelib\"))')\"\n")
        return Recipe("python", script, (venv,), tuple(env.items()), network=False,
                      seed=_pytest_seed)
    # As the task's runner.sh installs (test extras if any, else the package, then the
    # test tools), once.
    pip = f"{venv}/bin/python -m pip install -q"
    script = (f"set -e\nexport PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1\n"
              f"python3 -m venv {venv}\n"
              f"{pip} -e '.[test]' || {pip} -e .\n"
              f"{pip} pytest pytest-xdist pytest_mock\n"
              + _HASHED_PYC.format(venv=venv))
    return Recipe("python", script, (venv,), tuple(env.items()))


# The trace keeps no mtimes: every scope sees the environment's files with new ones, so
# the usual pyc files (keyed on the source's mtime) are stale in all of them and each
# test run would compile every module it imports again (twice the time of a run of the
# mini suite's tests). Hash-based pyc files (PEP 552) stay valid.
_HASHED_PYC = ("{venv}/bin/python -m compileall -q -f --invalidation-mode checked-hash "
               "{venv}/lib >/dev/null\n")


@functools.cache
def _system_python() -> tuple[int, int]:
    out = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(*sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1])


def _test_command(task: Task) -> str:
    return runner_test_command((task.path / "runner.sh").read_text())


PYTHON = LanguageSupport(recipe=_python_recipe, check=lambda: None, test_command=_test_command)
"""Python needs no toolchain check: the recipe builds on this machine's python3."""
