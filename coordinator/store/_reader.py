"""Reading a trace without its writer: the calls a tool that studies runs needs (a
dashboard, an exporter of training data, a notebook), as a Protocol, and
`open_trace`, which opens a state's trace read-only.

A reader sees what the coordinator committed, the journal's not yet checkpointed
part included, and cannot move a ref or write an object: `Trace` opened with
`writable=False` refuses to. Values are plain (ids as hex strings, files as bytes,
effects as `TraceEntry`s); nothing here hands out a pygit2 object.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from ..records._errors import NotFound
from ._log import LogPage, TraceEntry
from ._trace import Trace

__all__ = ["TraceReader", "open_trace"]


class TraceReader(Protocol):
    """What a reader of traces may call (`Trace` is one)."""

    path: Path

    def scope_names(self) -> list[str]:
        """Every live scope, by name."""
        ...

    def head(self, scope: str) -> str | None:
        """The head commit of scope `scope` (None when there is none)."""
        ...

    def fork_point(self, scope: str) -> str | None:
        """The commit scope `scope` was forked at."""
        ...

    def log(self, head: object) -> list[TraceEntry]:
        """The effects of the branch ending at `head` (a commit), oldest first."""
        ...

    def log_page(self, head: object, *, limit: int = 50, before: str | None = None) -> LogPage:
        ...

    def walk(self, head: str) -> Iterator[TraceEntry]:
        """The same, lazily."""
        ...

    def show(self, rev: str) -> TraceEntry:
        """One commit and its effect."""
        ...

    def read(self, rev: str, path: str) -> bytes:
        """The file at `path` in commit `rev`'s tree. Raises NotFound."""
        ...

    def blob(self, oid: str) -> bytes:
        """A blob's content (an effect's payload, a model call's request...)."""
        ...

    def commit_tree(self, commit: str) -> str:
        ...

    def iter_files(self, tree: str) -> Iterator[tuple[str, str, int]]:
        """(path, blob id, mode) of every file of tree `tree`."""
        ...

    def diff_trees(self, old: str, new: str) -> dict[str, tuple[str, int] | None]:
        """path -> (blob id, mode), or None for a deletion, from tree `old` to `new`."""
        ...

    def merge_base(self, a: str, b: str) -> str | None:
        ...

    def close(self) -> None:
        ...


def open_trace(state: str | Path) -> TraceReader:
    """The trace of the state directory `state` (or a trace repository itself), read-only.
    Raises NotFound when there is none. Close it when done."""
    path = Path(state)
    trace_dir = path / "trace.git" if (path / "trace.git").is_dir() else path
    if not (trace_dir / "HEAD").is_file():
        raise NotFound(f"no trace at {path} (give a state directory or its trace.git)")
    return Trace(trace_dir, writable=False)
