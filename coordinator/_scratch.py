"""A throwaway git directory holding only the objects one git command needs.

Merges with a favor (`ours`, `theirs`, `union`) and patches are done by git
itself, so they give git's results: its histogram diff (libgit2 has only
Myers) and `git apply`'s exact rules. The trace cannot be handed to git as it
is: its newest objects sit in the journal, in memory, until a checkpoint. So
the few blobs a command needs are written, loose, into a fresh git directory
in a temp dir, git runs there with no system or user configuration, and the
objects it writes are read back from that directory alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import pygit2
from pygit2.enums import ObjectType

__all__ = ["GitDir", "tree_bytes"]

_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
             "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CEILING_DIRECTORIES")


def _scratch_root() -> str | None:
    """tmpfs when there is one: on this kind of disk every directory made and
    removed costs ~0.5-4 ms, and a scratch directory makes a dozen."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


_SCRATCH_ROOT = _scratch_root()


def tree_bytes(entries: Mapping[str, tuple[str, int]]) -> bytes:
    """A flat git tree object's content: `entries` maps a name (no '/') to
    (object id, mode), written in git's order."""

    def key(name: str) -> bytes:
        raw = name.encode()
        return raw + b"/" if entries[name][1] == 0o040000 else raw

    return b"".join(
        f"{entries[n][1]:o} ".encode() + n.encode() + b"\0" + bytes.fromhex(entries[n][0])
        for n in sorted(entries, key=key)
    )


class GitDir:
    """A bare git directory in a temp dir, removed on exit."""

    def __init__(self, attributes: str = "") -> None:
        self.path = Path(tempfile.mkdtemp(prefix="corral-git-", dir=_SCRATCH_ROOT))
        (self.path / "objects").mkdir()
        (self.path / "refs").mkdir()
        (self.path / "HEAD").write_text("ref: refs/heads/main\n")
        (self.path / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
            "[gc]\n\tauto = 0\n"
        )
        self.attributes = self.path / "attributes"
        self.attributes.write_text(attributes)
        self.odb = pygit2.Odb()
        self.odb.add_backend(pygit2.OdbBackendLoose(str(self.path / "objects"), -1, False), 1)

    def __enter__(self) -> GitDir:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def write(self, kind: int, data: bytes) -> str:
        return str(self.odb.write(kind, data))

    def blob(self, data: bytes) -> str:
        return self.write(ObjectType.BLOB, data)

    def read(self, oid: str) -> tuple[int, bytes]:
        kind, data = self.odb.read(pygit2.Oid(hex=oid))
        return int(kind), bytes(data)

    def commit(self, tree: str, parents: Sequence[str] = ()) -> str:
        lines = [f"tree {tree}", *(f"parent {p}" for p in parents),
                 "author corral <corral@localhost> 0 +0000",
                 "committer corral <corral@localhost> 0 +0000", "", "corral"]
        return self.write(ObjectType.COMMIT, ("\n".join(lines) + "\n").encode())

    def run(self, *args: str, input: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: Path | None = None,
            ) -> subprocess.CompletedProcess[bytes]:
        """`git <args>` on this directory, with only its own configuration
        (plus `core.attributesFile` = this directory's `attributes`)."""
        full = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
        full.update({
            "GIT_DIR": str(self.path),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
        })
        full.update(env or {})
        return subprocess.run(
            ["git", "-c", f"core.attributesFile={self.attributes}", *args],
            input=input, capture_output=True, env=full, cwd=cwd or self.path,
        )
