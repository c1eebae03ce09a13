"""The environment step: which languages a task's test environment can be built for,
in one registry (`LANGUAGES`), and what the rest of the pipeline asks of it: a task's
`recipe`, whether this machine can run it (`check_toolchain`), its test command.

    python       `_python_env.PYTHON`  a virtualenv (the mini suite: pytest, offline)
    go           `_toolchains.GO`      the module cache and a warm build cache
    typescript   `_toolchains.TYPESCRIPT`  node_modules by the lockfile's manager
    rust         `_toolchains.RUST`    vendored crates and a built target directory

A language plugs in with one more entry here. The recipe is run in the task's `env`
scope by `_task_state`; the host-side environment of the stock-git workbench is
`_host_env`.
"""

from __future__ import annotations

from types import MappingProxyType

from ._dataset import Task
from ._dataset import test_command as runner_test_command
from ._python_env import PYTHON
from ._recipe import LanguageSupport, Recipe, Snapshot, Unsupported
from ._toolchains import GO, RUST, TYPESCRIPT

__all__ = ["LANGUAGES", "check_toolchain", "recipe", "task_test_command"]

LANGUAGES: MappingProxyType[str, LanguageSupport] = MappingProxyType({
    "python": PYTHON,
    "go": GO,
    "typescript": TYPESCRIPT,
    "rust": RUST,
})
"""Every language a task's environment can be built for, by `Task.language`."""


def _support(task: Task) -> LanguageSupport:
    support = LANGUAGES.get(task.language)
    if support is None:
        raise Unsupported(f"{task.language} task: no environment recipe")
    return support


def check_toolchain(task: Task) -> None:
    """Raises Unsupported when this machine cannot prepare `task`'s environment."""
    _support(task).check()


def recipe(task: Task, snapshot: Snapshot, *, mini: bool = False) -> Recipe:
    """The recipe of `task`'s environment. Raises Unsupported when this machine
    cannot build it (no recipe for its language, a missing toolchain)."""
    return _support(task).recipe(task, snapshot, mini)


def task_test_command(task: Task) -> str:
    """The test step of `task`'s runner.sh, run at /workspace/repo in a scope forked
    from the task's `env` (a task of no known language: the runner's Python tail).
    Raises ValueError when the runner has none."""
    support = LANGUAGES.get(task.language)
    if support is None:
        return runner_test_command((task.path / "runner.sh").read_text())
    return support.test_command(task)
