"""Which paths the trace does not put in its trees: those matched by the
repository's .gitignore files, and by default the caches tools leave behind
(`DEFAULT_IGNORES`). Their content is still recorded, beside the tree: in the
effect that wrote them (`ignored_files`) and in a per-scope tree of them
(`Trace.ignored_files`), so nothing acknowledged is lost over a restart.

Without the defaults, a command run in a repository with no .gitignore (say `pytest`)
committed `.pytest_cache/` and `__pycache__/` into the agent's branch and on into every
merge. They are the lowest rule: the repository's .gitignore overrides them (`!.pytest_cache/`
keeps that cache in the tree), and `$CORRAL_DEFAULT_IGNORES` replaces them (patterns
separated by commas; empty: none).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

import pathspec
import pygit2
from pydantic import TypeAdapter

from ..records._effects import FileChange
from ._gitnames import entry


class Objects(Protocol):
    """What ignored-file records need of the trace (a `Trace`)."""

    @property
    def repo(self) -> pygit2.Repository: ...
    def tree(self, oid: str) -> pygit2.Tree: ...
    def commit_tree(self, commit: str) -> str: ...
    def blob(self, oid: str) -> bytes: ...
    def write_blob(self, data: bytes) -> str: ...

__all__ = [
    "DEFAULT_IGNORES",
    "IgnoreRules",
    "default_ignores",
    "load_ignored",
    "split_ignored",
    "store_ignored",
]

DEFAULT_IGNORES = (
    "__pycache__/", "*.py[co]", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/",
    ".hypothesis/", ".tox/", ".nox/", ".coverage", ".cache/",
)
"""Tool caches never recorded unless the repository's .gitignore says otherwise."""


def default_ignores() -> tuple[str, ...]:
    """DEFAULT_IGNORES, or the patterns in $CORRAL_DEFAULT_IGNORES when it is set."""
    value = os.environ.get("CORRAL_DEFAULT_IGNORES")
    if value is None:
        return DEFAULT_IGNORES
    return tuple(p.strip() for p in value.split(",") if p.strip())


@lru_cache(maxsize=256)
def _spec(text: bytes) -> pathspec.PathSpec:
    return pathspec.GitIgnoreSpec.from_lines(text.decode("utf-8", "replace").splitlines())


class IgnoreRules:
    """The .gitignore rules of one tree, looked up lazily along each path.

    Only the .gitignore files on a path's way down are read (cost follows the
    path depth, not the repository), as git does for a single path.
    """

    def __init__(self, repo: pygit2.Repository, tree: pygit2.Tree,
                 defaults: tuple[str, ...] | None = None) -> None:
        self._repo = repo
        self._tree = tree
        patterns = default_ignores() if defaults is None else defaults
        self._defaults = _spec("\n".join(patterns).encode()) if patterns else None

    def _rules(self, directory: str) -> pathspec.PathSpec | None:
        obj = entry(self._tree, f"{directory}/.gitignore" if directory else ".gitignore")
        if obj is None or obj.type != pygit2.enums.ObjectType.BLOB:
            return None
        return _spec(obj.read_raw())

    def ignored(self, path: str) -> bool:
        """True when git would ignore `path` (a file) given this tree's .gitignore files."""
        parts = path.split("/")
        verdict = False
        if self._defaults is not None:  # the lowest rule: any .gitignore overrides it
            verdict = bool(self._defaults.check_file(path).include)
        for depth in range(len(parts)):
            directory = "/".join(parts[:depth])
            spec = self._rules(directory)
            if spec is None:
                continue
            # GitIgnoreSpec applies directory patterns ("build/") to the files
            # below them; a deeper .gitignore overrides a shallower one.
            result = spec.check_file("/".join(parts[depth:]))
            if result.include is not None:
                verdict = bool(result.include)
        return verdict


_IGNORED = TypeAdapter(list[FileChange])


def split_ignored(
    trace: Objects, head: str, changes: Sequence[FileChange]
) -> tuple[list[FileChange], list[FileChange]]:
    """`changes` split into (tracked, ignored) by the ignore rules of `head`'s tree."""
    rules = IgnoreRules(trace.repo, trace.tree(trace.commit_tree(head)))
    tracked: list[FileChange] = []
    ignored: list[FileChange] = []
    for c in changes:
        (ignored if rules.ignored(c.path) else tracked).append(c)
    return tracked, ignored


def store_ignored(trace: Objects, changes: Sequence[FileChange]) -> str | None:
    """The blob an outcome's `ignored_files` names (None when there are none)."""
    return trace.write_blob(_IGNORED.dump_json(list(changes))) if changes else None


def load_ignored(trace: Objects, blob: str | None) -> list[FileChange]:
    """The changes an outcome's `ignored_files` blob lists."""
    return _IGNORED.validate_json(trace.blob(blob)) if blob else []
