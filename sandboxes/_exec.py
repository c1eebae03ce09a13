"""Run one command isolated with bubblewrap, its tree bound at /workspace/repo.

The sandbox sees the host filesystem read-only (each top-level entry of / bound
on its own, so that /workspace can live in bwrap's private tmpfs root), a fresh
/dev, /proc and /tmp, and no network unless asked. Directories in `hide` (the
backends' state roots) are left out, so a sandbox never pins another
workspace's mounts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ._base import ExecUnavailable

__all__ = ["REPO_PATH", "Completed", "default_env", "run_isolated"]

REPO_PATH = "/workspace/repo"

# bwrap makes these itself, or they must not leak into the sandbox
_SKIP_TOP = frozenset({"proc", "dev", "tmp", "sys", "workspace"})


class Completed(NamedTuple):
    """How an isolated command ended."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    duration_s: float


def default_env() -> dict[str, str]:
    """The environment used when the caller gives none: the host PATH, nothing secret."""
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
    }


def bwrap_path() -> str:
    """The bubblewrap executable. Raises ExecUnavailable when it is not installed."""
    path = shutil.which("bwrap")
    if path is None:
        raise ExecUnavailable(
            "bubblewrap (bwrap) is not installed; install it with `apt-get install bubblewrap`"
        )
    return path


def _bind_tree(directory: Path, hide: Sequence[Path], args: list[str], seen: list[Path]) -> None:
    """Bind every entry of `directory` read-only, descending only into entries
    that contain a hidden path, so hidden trees (and their mounts) stay out."""
    seen.append(directory)
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if directory == Path("/") and entry.name in _SKIP_TOP:
            continue
        path = Path(entry.path)
        if entry.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif any(path == h for h in hide):
            continue
        elif entry.is_dir() and any(path in h.parents for h in hide):
            args += ["--dir", str(path)]
            _bind_tree(path, hide, args, seen)
        else:
            args += ["--ro-bind", str(path), str(path)]


_root_binds: dict[tuple[Path, ...], tuple[list[Path], tuple[int, ...], list[str]]] = {}


def _mtimes(dirs: Sequence[Path]) -> tuple[int, ...]:
    return tuple(os.stat(d).st_mtime_ns for d in dirs)


def _host_binds(hide: tuple[Path, ...]) -> list[str]:
    """The bind arguments for the host tree, cached until a listed directory changes
    (listing / on every run costs ~1.5 ms)."""
    cached = _root_binds.get(hide)
    if cached is not None:
        dirs, key, binds = cached
        with contextlib.suppress(OSError):
            if _mtimes(dirs) == key:
                return binds
    args: list[str] = []
    seen: list[Path] = []
    _bind_tree(Path("/"), hide, args, seen)
    _root_binds[hide] = (seen, _mtimes(seen), args)
    return args


def _tools_under_tmp(hide: Sequence[Path]) -> list[Path]:
    """Directories under /tmp that commands need to see through their private
    /tmp: the running Python environment (a virtualenv made in /tmp, as a fresh
    checkout's is) and the PATH entries there. Read-only; never one that holds
    a hidden tree."""
    candidates = {sys.prefix, sys.exec_prefix, sys.base_prefix,
                  os.path.dirname(os.path.realpath(sys.executable)),
                  *os.environ.get("PATH", "").split(os.pathsep)}
    tmp = Path("/tmp").resolve()
    out: list[Path] = []
    for c in sorted(c for c in candidates if c):
        path = Path(c).resolve()
        if tmp not in path.parents or not path.is_dir():
            continue
        if any(h == path or path in h.parents for h in hide):
            continue
        if not any(p in path.parents for p in out):
            out.append(path)
    return out


def _bwrap_args(repo: Path, network: bool, hide: Sequence[Path]) -> list[str]:
    args = [bwrap_path(), "--unshare-all", "--die-with-parent", "--new-session"]
    if network:
        args.append("--share-net")
    args += _host_binds(tuple(h.resolve() for h in hide))
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in _tools_under_tmp(hide):
        args += ["--ro-bind", str(path), str(path)]
    args += ["--perms", "0755", "--dir", "/workspace"]
    args += ["--bind", str(repo), REPO_PATH, "--remount-ro", "/", "--chdir", REPO_PATH]
    return args


def run_isolated(
    repo: Path,
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    network: bool = False,
    hide: Sequence[Path] = (),
) -> Completed:
    """Run `argv` with `repo` bound read-write at /workspace/repo (the cwd).

    Returns how it ended; on timeout bwrap and everything under it is killed,
    `timed_out` is True and the return code is negative. Raises ExecUnavailable
    when bubblewrap is missing or cannot set up the sandbox.
    """
    if not argv:
        raise ValueError("argv must not be empty")
    cmd = [*_bwrap_args(repo, network, hide), "--", *argv]
    start = time.monotonic()
    # own process group so a timeout kills bwrap and its helpers in one signal;
    # the sandboxed tree dies with bwrap (pid namespace + --die-with-parent)
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else default_env(),
        start_new_session=True,
    )
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        stdout, stderr = proc.communicate()
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    duration = time.monotonic() - start
    returncode = proc.returncode
    if timed_out and returncode >= 0:
        returncode = -signal.SIGKILL
    # bwrap's own setup failures exit 1 with one "bwrap: ..." line
    if returncode == 1 and stderr.startswith(b"bwrap: ") and _is_setup_error(stderr):
        raise ExecUnavailable(f"bubblewrap could not set up the sandbox: {stderr.decode()}")
    return Completed(returncode, stdout, stderr, timed_out, duration)


def _is_setup_error(stderr: bytes) -> bool:
    markers = (b"Creating new namespace failed", b"Can't mount", b"No permissions to create")
    return any(m in stderr for m in markers)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
