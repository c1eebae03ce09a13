"""Task repositories and test environments, each prepared once per task and cached.

The base repository of a task is a fresh git repository holding only the base commit
(fetched with `--depth 1` from a local mirror): the agents cannot see the history that
followed, where the real implementation lives.

The environment lives in the task's Corral snapshot: a `Recipe` (one per language,
`recipe(task)`; other languages plug in with `register_recipe`) is a script run once in
the task's `env` scope at /workspace/repo, network on, that builds the environment under
paths the repository ignores (a virtualenv with the task's package and test
dependencies, for Python). Every scope of the task is forked from `env`, so all of them
and every test run share it copy-on-write, and tests run offline in Corral scopes. The
built paths are kept as a tar under `cache/envs/<task>/` and later runs unpack it in the
`env` scope instead of building again.

Python's recipe is here; Go's, TypeScript's and Rust's are in `_toolchains`.

`Environment` and `prepare_env` are the host-side environment of the stock-git `Lab`
(the reference the scope evaluation is checked against), for Python tasks only.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ._dataset import Task
from ._lab import git

__all__ = [
    "REPO",
    "UNSUPPORTED_MARK",
    "Environment",
    "Recipe",
    "Snapshot",
    "Unsupported",
    "base_repo",
    "check_toolchain",
    "find_source",
    "prepare_env",
    "recipe",
    "register_recipe",
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
        # The base as a root commit of the same tree: a shallow commit's parents are
        # missing objects, which Corral's merge (the merge base walk) cannot read.
        tree = git(dst, "rev-parse", f"{task.base_commit}^{{tree}}").stdout.strip()
        root = git(dst, "-c", "user.name=corral", "-c", "user.email=corral@localhost",
                   "commit-tree", tree, "-m", f"base {task.base_commit}").stdout.strip()
        git(dst, "checkout", "-q", "--detach", root)
        git(dst, "branch", "-q", "-f", "base", root)
        (dst / ".git" / "corral-base-ready").write_text(task.base_commit + "\n")
    return dst


def check_toolchain(task: Task) -> None:
    """Raises Unsupported when this machine cannot prepare `task`'s environment."""
    if task.language != "python":
        from ._toolchains import check  # Go, TypeScript, Rust: one recipe each

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
        # The other languages' environments are built in the task's snapshot only.
        raise Unsupported(f"{task.language} task: the host-side environment is Python's "
                          "only (the scope evaluation builds the others)")
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


# -- environments in the snapshot ---------------------------------------------------

REPO = "/workspace/repo"
"""Where every Corral command sees its scope: an environment built there works
unchanged in every fork."""


@dataclass(frozen=True, slots=True)
class Recipe:
    """How a task's test environment is built, once, in the task's `env` scope."""

    language: str
    script: str
    """bash run at /workspace/repo (network as `network` says) that builds `paths`;
    `$CORRAL_SEED` names the directory `seed` filled, when there is one. A script that
    finds the environment cannot be built on this machine (dependencies out of reach)
    prints a line `UNSUPPORTED_MARK + reason` and exits non-zero: the task is then
    `unsupported` with that reason, not an error."""
    paths: tuple[str, ...]
    """Workspace paths the environment lives in, all ignored by the repository (so
    they stay out of every tree, patch and merge): what the cache keeps."""
    env: tuple[tuple[str, str], ...]
    """The whole environment of every test command, inside the sandbox."""
    network: bool = True
    seed: Callable[[Path, Path], None] | None = None
    """`seed(into, cache)` fills the host directory `into`, which the script reads
    (shown read-only inside); `cache` is the run's cache, for what it fetches once."""
    toolchain: tuple[Path, ...] = ()
    """Host directories every command must see read-only (a compiler's prefix)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a recipe may ask of the task's base tree."""

    ignored: Callable[[str], bool]
    """Whether a path is ignored by the tree's rules (so it stays out of every tree)."""
    exists: Callable[[str], bool]
    read: Callable[[str], bytes | None] = lambda path: None
    """A file's content in the base tree (None when there is none)."""


UNSUPPORTED_MARK = "corral-unsupported: "
"""How a recipe's script says the task cannot run here (see `Recipe.script`)."""


RecipeFactory = Callable[["Task", Snapshot, bool], Recipe]
"""(task, its snapshot, mini) -> its Recipe; raises Unsupported."""

_RECIPES: dict[str, RecipeFactory] = {}


def register_recipe(language: str, factory: RecipeFactory) -> None:
    """Plug in the environment recipe of one language (python is built in)."""
    _RECIPES[language] = factory


def recipe(task: Task, snapshot: Snapshot, *, mini: bool = False) -> Recipe:
    """The recipe of `task`'s environment. Raises Unsupported when this machine
    cannot build it (no recipe for its language, a missing toolchain)."""
    factory = _RECIPES.get(task.language)
    if factory is None:
        check_toolchain(task)  # the reason a language without a recipe is unsupported
        raise Unsupported(f"{task.language} task: no environment recipe")
    return factory(task, snapshot, mini)


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
    _share_file(_pytest_seed_tar(_pytest_path(cache)), into / "site-packages.tar")


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
    with _locked(cache / "locks" / f"pytest-{tag}.toolchain"):
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


def _share_file(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


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


register_recipe("python", _python_recipe)

# Go, TypeScript and Rust register theirs (imported last: they build on this module).
from . import _toolchains as _toolchains  # noqa: E402
