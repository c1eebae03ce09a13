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

import atexit
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import pygit2
from pygit2.enums import ObjectType

__all__ = ["GitDir", "MergeTree", "git_renames", "merge_tree", "tree_bytes"]

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


def git_renames(gone: Mapping[str, bytes], added: Mapping[str, bytes]) -> list[tuple[str, str]]:
    """The renames git finds (old path, new path) from files deleted (`gone`: path ->
    content) to files added: `git diff-tree -r -M` between a tree of just the one and
    a tree of just the other, which pairs nothing else and scores as git's merge does
    (whole paths kept: git prefers a match with the same basename)."""
    if not gone or not added:
        return []
    with GitDir() as git:
        def tree(files: Mapping[str, bytes]) -> str:
            top: dict[str, dict[str, bytes] | bytes] = {}
            for path, data in files.items():
                head, _, rest = path.partition("/")
                if rest:
                    sub = top.setdefault(head, {})
                    assert isinstance(sub, dict)
                    sub[rest] = data
                else:
                    top[head] = data
            return git.write(ObjectType.TREE, tree_bytes({
                name: ((git.blob(v), 0o100644) if isinstance(v, bytes)
                       else (tree(v), 0o040000)) for name, v in top.items()}))

        done = git.run("diff-tree", "-r", "-M", "-z", "--name-status", tree(gone), tree(added))
        if done.returncode != 0:
            raise OSError(f"git diff-tree failed: {done.stderr.decode(errors='replace')}")
    fields = done.stdout.split(b"\0")
    out, i = [], 0
    while i < len(fields) - 1:
        status = fields[i]
        if status.startswith(b"R"):
            out.append((fields[i + 1].decode(), fields[i + 2].decode()))
            i += 3
        else:
            i += 2
    return out


class GitDir:
    """A bare git directory in a temp dir, removed on exit."""

    def __init__(self, attributes: str = "", config: str = "") -> None:
        self.path = Path(tempfile.mkdtemp(prefix="corral-git-", dir=_SCRATCH_ROOT))
        (self.path / "objects").mkdir()
        (self.path / "refs").mkdir()
        (self.path / "HEAD").write_text("ref: refs/heads/main\n")
        (self.path / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
            "[gc]\n\tauto = 0\n" + config
        )
        self.attributes = self.path / "attributes"
        self.attributes.write_text(attributes)
        self.odb = pygit2.Odb()
        # zlib level 1: these objects live for a few commands, and the default
        # level costs more than the merge of a 100 KB file (libgit2 level 0 git cannot read)
        self.odb.add_backend(pygit2.OdbBackendLoose(str(self.path / "objects"), 1, False), 1)

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
        return subprocess.run(self.argv(*args), input=input, capture_output=True,
                              env=self.env(env), cwd=cwd or self.path)

    def argv(self, *args: str) -> list[str]:
        return ["git", "-c", f"core.attributesFile={self.attributes}", *args]

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        full = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
        full.update({
            "GIT_DIR": str(self.path),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
        })
        full.update(extra or {})
        return full


class MergeTree:
    """A long-running `git merge-tree --write-tree --stdin` on its own GitDir.

    Starting git costs ~12 ms here under load (a load average of 10 on the
    2 cores); a merge on a running one costs ~0.1 ms plus the merge. Where
    coreutils' `stdbuf` is missing (git 2.39 does not flush its answers to a
    pipe), each merge runs its own `git merge-tree` instead. Callers hold
    `session()` (one merge at a time), write the commits' objects into its
    GitDir, and call `merge`. The directory is replaced every `MAX_MERGES`
    merges, so the objects written there do not pile up.
    """

    MAX_MERGES = 256

    def __init__(self, attributes: str, config: str = "") -> None:
        self._attributes, self._config = attributes, config
        self._lock = threading.Lock()
        self._git: GitDir | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._merges = 0

    @contextmanager
    def session(self) -> Iterator[GitDir]:
        with self._lock:
            if self._git is None or (self._proc is not None and self._proc.poll() is not None) \
                    or self._merges >= self.MAX_MERGES:
                self._start()
            assert self._git is not None
            self._merges += 1
            try:
                yield self._git
            except BaseException:
                self.close()  # a half-read answer would desynchronize the next one
                raise

    def merge(self, ours: str, theirs: str) -> tuple[str, set[str]]:
        """Merge two commits of the session's GitDir (their merge base as git
        finds it). Returns (merged tree id, the paths git left conflicted).
        Call inside `session()`."""
        proc = self._proc
        if proc is None:  # no stdbuf: one git process per merge
            assert self._git is not None
            done = self._git.run("merge-tree", "--write-tree", "-z", "--no-messages",
                                 ours, theirs)
            if done.returncode not in (0, 1):
                raise OSError(done.stderr.decode(errors="replace").strip())
            head, *entries = done.stdout.split(b"\0")
            return head.decode(), {_entry_path(e) for e in entries if e}
        assert proc.stdin is not None
        try:
            proc.stdin.write(f"{ours} {theirs}\n".encode())
            proc.stdin.flush()
            self._field()  # the status: 1 clean, 0 conflicted (the entries say which)
            tree, conflicted = self._field(), set()
            while entry := self._field():  # conflicted entries, up to the empty field
                conflicted.add(_entry_path(entry.encode()))
        except (OSError, EOFError) as e:
            self.close()
            raise OSError(f"git merge-tree stopped: {e}") from e
        return tree, conflicted

    def _field(self) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        while b"\0" not in self._buf:
            chunk = os.read(self._proc.stdout.fileno(), 65536)
            if not chunk:
                raise EOFError("no answer")
            self._buf += chunk
        field, _, self._buf = self._buf.partition(b"\0")
        return field.decode()

    def _start(self) -> None:
        self.close()
        self._git = GitDir(self._attributes, self._config)
        self._buf, self._merges = b"", 0
        if _STDBUF is None:
            return
        # git 2.39's merge-tree does not flush its answers: unbuffer its stdout
        self._proc = subprocess.Popen(
            [_STDBUF, "-o0",
             *self._git.argv("merge-tree", "--write-tree", "--stdin", "--no-messages")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=self._git.env(), cwd=self._git.path,
        )

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None
        if self._git is not None:
            self._git.__exit__(None, None, None)
            self._git = None


def _entry_path(entry: bytes) -> str:
    """The path of a conflicted entry, `<mode> <object> <stage>\\t<path>`."""
    return entry.split(b"\t", 1)[1].decode()


_STDBUF = shutil.which("stdbuf")
_SERVERS: dict[tuple[str, str], MergeTree] = {}
_SERVERS_LOCK = threading.Lock()


def merge_tree(attributes: str, config: str = "") -> MergeTree:
    """The process-wide MergeTree for these attributes and config lines (started
    on first use)."""
    with _SERVERS_LOCK:
        server = _SERVERS.get((attributes, config))
        if server is None:
            server = _SERVERS[attributes, config] = MergeTree(attributes, config)
        return server


@atexit.register
def _stop_servers() -> None:
    for server in _SERVERS.values():
        server.close()
