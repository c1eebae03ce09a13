"""Run one command in a sandbox with bubblewrap, its tree bound at /workspace/repo.

What the command gets (see the README's "What a command can see and touch"):

- an unprivileged user: bubblewrap runs as the *sandbox uid* (`SANDBOX_UID`,
  never 0) when the coordinator is root, else as the coordinator's own user,
  in a new user namespace with every capability dropped, no_new_privs, and the
  seccomp filter of `_seccomp` (no mounts, no new namespaces, no ptrace, no
  keyrings or bpf, no Unix sockets without network);
- new pid, ipc, uts, cgroup and (unless `network`) net namespaces: it sees
  only its own processes, and dies with bubblewrap;
- a minimal host, read-only: /usr and the /bin, /lib* links or dirs, /etc
  without its secrets (shadow, gshadow, ssh, ssl/private), and the declared
  toolchain directories; no /root, /home, /run, /var, /opt, /srv, /mnt, and
  never the coordinator's state directory;
- a fresh /dev and /proc, a private /tmp of `Limits.tmp` bytes;
- the environment it is given, applied inside the sandbox only (bubblewrap's
  own process gets an empty one);
- the limits of `Limits`: processes, address space, file size, open files,
  output kept, and a wall-clock timeout.
"""

from __future__ import annotations

import contextlib
import functools
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ._base import ExecUnavailable, Limits
from ._cgroup import CommandGroup
from ._seccomp import seccomp_filter

__all__ = [
    "REPO_PATH",
    "SANDBOX_UID",
    "Completed",
    "check_hidden",
    "default_env",
    "run_bare_bwrap",
    "run_isolated",
    "sandbox_idmap",
    "sandbox_path",
]

REPO_PATH = "/workspace/repo"

SANDBOX_UID = int(os.environ.get("CORRAL_SANDBOX_UID", "2000000000"))
"""The host uid (and gid) commands run as when the coordinator is root; nothing
else should use it. Override with $CORRAL_SANDBOX_UID (read at import)."""

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

# Shown read-only when present: the system's programs, libraries and config.
_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
SYSTEM_DIRS = tuple(Path("/") / d for d in _SYSTEM)
"""The host's directories every command sees (read-only, where they exist): a
toolchain under one of them needs no showing of its own."""


def sandbox_can_read(path: Path) -> bool:
    """Whether a sandboxed command can read `path`: as root the coordinator runs
    commands as `SANDBOX_UID`, which every directory on the way must let in."""
    if os.geteuid() != 0:
        return os.access(path, os.R_OK | os.X_OK)
    try:
        modes = [p.stat().st_mode for p in (path, *path.parents)]
    except OSError:
        return False
    return all(m & 0o001 for m in modes) and bool(modes[0] & 0o004)
# Hidden inside /etc: credentials and keys (files masked by /dev/null, dirs by
# an empty tmpfs).
_ETC_SECRET_FILES = ("shadow", "shadow-", "gshadow", "gshadow-", "security/opasswd",
                     "sudoers")
_ETC_SECRET_DIRS = ("ssh", "ssl/private", "sudoers.d")


class Completed(NamedTuple):
    """How an isolated command ended."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    duration_s: float
    truncated: bool = False


def sandbox_path(toolchain: Sequence[Path] = ()) -> str:
    """PATH for a command: each toolchain directory's bin/ (or the directory
    itself when it has none), then the system's."""
    dirs = [str(t / "bin") if (t / "bin").is_dir() else str(t) for t in toolchain]
    return os.pathsep.join([*dirs, SYSTEM_PATH])


def default_env(toolchain: Sequence[Path] = ()) -> dict[str, str]:
    """The environment used when the caller gives none: PATH from the toolchain
    and the system, nothing of the coordinator's."""
    return {"PATH": sandbox_path(toolchain), "HOME": "/tmp", "LANG": "C.UTF-8",
            "TMPDIR": "/tmp"}


@functools.cache
def _tool(name: str) -> str:
    path = shutil.which(name, path=SYSTEM_PATH + ":/usr/sbin:/sbin")
    if path is None:
        package = "bubblewrap" if name == "bwrap" else "util-linux"
        raise ExecUnavailable(
            f"{name} is not installed; install it with `apt-get install {package}`")
    return path


def bwrap_path() -> str:
    """The bubblewrap executable. Raises ExecUnavailable when it is not installed."""
    return _tool("bwrap")


# ---- the sandbox user and its idmapping

_idmap_lock = threading.Lock()
_idmap_fd: int | None = None


def sandbox_idmap() -> int | None:
    """A user namespace fd mapping uid/gid 0 to SANDBOX_UID, for idmapped mounts
    that show root-owned trees as the sandbox user's (None unless root). Made
    once per process. Raises ExecUnavailable when user namespaces are off."""
    global _idmap_fd
    if os.geteuid() != 0:
        return None
    with _idmap_lock:
        if _idmap_fd is None:
            _idmap_fd = _make_userns(SANDBOX_UID)
        return _idmap_fd


def _make_userns(uid: int) -> int:
    own = os.readlink("/proc/self/ns/user")
    helper = subprocess.Popen([_tool("unshare"), "--user", "--", _tool("sleep"), "60"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 5
        while True:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{helper.pid}/ns/user") != own:
                    # unshare(1) has made the namespace and exec'd sleep
                    if os.readlink(f"/proc/{helper.pid}/exe").endswith("sleep"):
                        break
            if helper.poll() is not None or time.monotonic() > deadline:
                err = helper.stderr.read().decode() if helper.stderr else ""
                raise ExecUnavailable(f"cannot create a user namespace: {err.strip()}")
            time.sleep(0.001)
        for name, line in (("uid_map", f"0 {uid} 1\n"), ("setgroups", "deny"),
                           ("gid_map", f"0 {uid} 1\n")):
            with open(f"/proc/{helper.pid}/{name}", "w") as f:
                f.write(line)
        return os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.kill()
        helper.wait()


# ---- the host view

@functools.cache
def _system_binds() -> tuple[str, ...]:
    """bwrap arguments showing the system directories read-only and /etc's secrets
    hidden (symlinks such as /bin -> usr/bin recreated as symlinks)."""
    args: list[str] = []
    for name in _SYSTEM:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for rel in _ETC_SECRET_FILES:
        if os.path.isfile(f"/etc/{rel}"):
            args += ["--ro-bind", "/dev/null", f"/etc/{rel}"]
    for rel in _ETC_SECRET_DIRS:
        if os.path.isdir(f"/etc/{rel}"):
            args += ["--perms", "0755", "--tmpfs", f"/etc/{rel}"]
    return tuple(args)


def check_hidden(hidden: Path, toolchain: Sequence[Path] = ()) -> None:
    """Raise ValueError when a command would see `hidden` (the state directory):
    when it lies in a system directory commands see, or overlaps a toolchain
    directory. (Every exec asks; a pair that passed once is not checked again.)"""
    _check_hidden(Path(hidden), tuple(Path(t) for t in toolchain))


@functools.lru_cache(maxsize=64)
def _check_hidden(hidden: Path, toolchain: tuple[Path, ...]) -> None:
    hidden = hidden.resolve()
    for name in _SYSTEM:
        top = Path("/") / name
        if not top.is_symlink() and (hidden == top or top in hidden.parents):
            raise ValueError(f"the state directory {hidden} is inside {top}, which every "
                             "command sees; put it elsewhere")
    _check_toolchain(toolchain, [hidden])


def _check_toolchain(toolchain: Sequence[Path], hide: Sequence[Path]) -> list[Path]:
    out = []
    for t in toolchain:
        path = Path(t).resolve()
        if not path.is_dir():
            raise ValueError(f"toolchain directory {t} does not exist")
        for h in hide:
            h = h.resolve()
            if path == h or h in path.parents or path in h.parents:
                raise ValueError(
                    f"toolchain directory {t} overlaps the state directory {h}: "
                    "a command must never see it")
        out.append(path)
    return out


def _bwrap_args(repo: Path, tmp: Path | None, network: bool, limits: Limits,
                toolchain: Sequence[Path], seccomp_fd: int, env: Mapping[str, str],
                shm: Path | None = None) -> list[str]:
    """bubblewrap's arguments for the sandbox. `tmp` and `shm`, when given, are
    host directories bound at /tmp and /dev/shm (sized by the caller); else
    each is a tmpfs of `limits.tmp` bytes."""
    args = [bwrap_path(), "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--disable-userns", "--cap-drop", "ALL",
            "--die-with-parent", "--new-session"]
    if not network:
        args.append("--unshare-net")
    args += _system_binds()
    # bwrap's /dev (device nodes, its own devpts) made read-only: a file written
    # there would sit on a tmpfs no limit covers; /dev/shm is sized like /tmp
    args += ["--dev", "/dev", "--remount-ro", "/dev", "--proc", "/proc"]
    for where, given in (("/tmp", tmp), ("/dev/shm", shm)):
        if given is not None:
            args += ["--bind", str(given), where]
        else:
            args += ["--size", str(limits.tmp), "--perms", "1777", "--tmpfs", where]
    for t in toolchain:  # after /tmp: a toolchain may live there
        args += ["--ro-bind", str(t), str(t)]
    args += ["--perms", "0755", "--dir", "/workspace", "--bind", str(repo), REPO_PATH,
             "--remount-ro", "/", "--chdir", REPO_PATH, "--seccomp", str(seccomp_fd),
             "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


@functools.cache
def _filter(network: bool) -> bytes:
    return seccomp_filter(network=network)


def _launcher(limits: Limits) -> list[str]:
    """The host-side programs before bwrap: as root, setpriv drops to the sandbox
    uid (so the coordinator spawns with vfork, whatever its size, instead of
    forking itself to call setuid), then prlimit sets the limits."""
    drop = ([_tool("setpriv"), f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}",
             "--clear-groups", "--"] if os.geteuid() == 0 else [])
    return [*drop, _tool("prlimit"), f"--nproc={limits.processes}", f"--as={limits.memory}",
            f"--fsize={limits.file_size}", f"--nofile={limits.open_files}", "--core=0", "--"]


def run_isolated(
    repo: Path,
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    network: bool = False,
    hide: Sequence[Path] = (),
    limits: Limits | None = None,
    toolchain: Sequence[Path] = (),
    tmp: Path | None = None,
) -> Completed:
    """Run `argv` with `repo` bound read-write at /workspace/repo (the cwd).

    `env` (default: `default_env(toolchain)`) is the command's whole environment,
    set inside the sandbox. `toolchain` directories are shown read-only at their
    own paths; none may overlap a `hide` directory (the state). `tmp`, when
    given, is bound as /tmp (a directory the sandbox user may write, sized by
    the caller); else /tmp is a tmpfs of `limits.tmp` bytes. When the
    coordinator is root, `repo` and `tmp` must be reachable by SANDBOX_UID.

    Returns how it ended; on timeout everything under bubblewrap is killed,
    `timed_out` is True and the return code is negative. Raises ExecUnavailable
    when bubblewrap is missing or cannot set up the sandbox, ValueError for an
    empty argv, a bad toolchain or a timeout past `limits.timeout_max`.
    """
    if not argv:
        raise ValueError("argv must not be empty")
    limits = limits or Limits()
    if not 0 < timeout <= limits.timeout_max:
        raise ValueError(f"timeout must be in (0, {limits.timeout_max:g}] seconds, not {timeout}")
    tools = _check_toolchain(toolchain, hide)
    env = dict(env) if env is not None else default_env(tools)
    group = CommandGroup.open(limits.memory, limits.processes)
    try:
        return _run(repo, argv, timeout, env, network, limits, tools, tmp, group)
    finally:
        if group is not None:
            group.close()


def _run(repo: Path, argv: Sequence[str], timeout: float, env: dict[str, str], network: bool,
         limits: Limits, tools: list[Path], tmp: Path | None,
         group: CommandGroup | None) -> Completed:
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, _filter(network))
        os.close(write_fd)
        write_fd = -1
        cmd = [*(group.launcher() if group is not None else []), *_launcher(limits),
               *_bwrap_args(repo, tmp, network, limits, tools, read_fd, env), "--", *argv]
        start = time.monotonic()
        # own process group so a timeout kills bwrap and its helpers in one
        # signal; the sandboxed tree dies with bwrap (pid namespace)
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={}, start_new_session=True, pass_fds=(read_fd,), cwd="/",
        )
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    try:
        stdout, stderr, timed_out, truncated = _collect(proc, start + timeout, limits.output)
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
    return Completed(returncode, stdout, stderr, timed_out, duration, truncated)


def _collect(proc: subprocess.Popen[bytes], deadline: float,
             cap: int) -> tuple[bytes, bytes, bool, bool]:
    """Read stdout and stderr as they come, keeping `cap` bytes of each, until
    both close and the process exits, or `deadline` passes (then kill)."""
    assert proc.stdout is not None and proc.stderr is not None
    kept: dict[int, bytearray] = {proc.stdout.fileno(): bytearray(),
                                  proc.stderr.fileno(): bytearray()}
    truncated = timed_out = False
    with selectors.DefaultSelector() as sel:
        for stream in (proc.stdout, proc.stderr):
            sel.register(stream, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                _kill_group(proc)
                left = 5.0  # drain what the killed processes left in the pipes
                deadline = time.monotonic() + left
            for key, _ in sel.select(timeout=min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = kept[key.fd]
                room = cap - len(buf)
                if len(chunk) > room:
                    truncated = True
                    chunk = chunk[:max(room, 0)]
                buf += chunk
            if timed_out and time.monotonic() > deadline:
                break
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()) if not timed_out else 5)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    out, err = kept.values()
    proc.stdout.close()
    proc.stderr.close()
    return bytes(out), bytes(err), timed_out, truncated


def _is_setup_error(stderr: bytes) -> bool:
    markers = (b"Creating new namespace failed", b"Can't mount", b"No permissions to create",
               b"Can't find source path", b"setting up uid map")
    return any(m in stderr for m in markers)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_bare_bwrap(repo: Path, argv: Sequence[str], *, network: bool = False) -> int:
    """Run `argv` under bubblewrap alone, with the flags a command gets (the same
    namespaces, host view, seccomp filter, /tmp and /dev/shm tmpfs), but no uid
    drop, rlimits, cgroup or launcher: the floor the benchmarks hold `exec`
    against. Returns the exit code. Raises ExecUnavailable without bwrap."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, _filter(network))
        os.close(write_fd)
        write_fd = -1
        args = _bwrap_args(repo, None, network, Limits(), (), read_fd, default_env())
        return subprocess.run([*args, "--", *argv], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={}, pass_fds=(read_fd,), cwd="/", check=False).returncode
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
