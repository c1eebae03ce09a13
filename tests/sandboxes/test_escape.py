"""The escape suite: every attack of issue 9 (and its kin) run as a command, each
checked for its real effect on the host, which must be absent.

Commands go through the public API (`Scope.exec`, overlay backend, state
directory inside the repository as `corral serve`'s default puts it) and a
few through `run_isolated` directly. Needs root, bubblewrap and user
namespaces; skips with the reason otherwise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sandboxes
from coordinator import Coordinator, ExecError, ExecOutcome
from coordinator.records._effects import Exec
from sandboxes import SANDBOX_UID, Limits
from sandboxes._exec import run_isolated

_MiB = 1024 * 1024


def _why_skip() -> str | None:
    if os.geteuid() != 0:
        return "the escape suite runs the sandbox as root does (needs root)"
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed"
    reason = sandboxes.OverlayBackend.unavailable_reason()
    if reason is not None:
        return f"overlay backend unavailable: {reason}"
    if Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
        return "user namespaces are disabled (user.max_user_namespaces = 0)"
    return None


pytestmark = [pytest.mark.skipif(_why_skip() is not None, reason=str(_why_skip())),
              pytest.mark.root, pytest.mark.slow]

SECRET = "corral-host-secret-4f1c9a"


@dataclasses.dataclass
class Run:
    returncode: int
    out: str
    err: str
    outcome: ExecOutcome


@pytest.fixture
async def env(sample_repo: Path) -> AsyncIterator[tuple[Coordinator, Path]]:
    """A coordinator whose state is `.corral` inside the repository (the default of
    `corral serve`), holding a fake server key; yields it and the state path."""
    state = sample_repo / ".corral"
    async with Coordinator.open(state, sample_repo, backend="overlay") as coord:
        (state / "server.key").write_text(SECRET)
        yield coord, state


def _is_slot(path: Path, base: Path) -> bool:
    """True for a warm sandbox's slot (kept while its workspace lives), not what's in it."""
    return path.parent == base and path.name.startswith("w") and len(path.name) == 17


async def run(coord: Coordinator, script: str, *, scope: str = "a", **kw) -> Run:
    s = coord.scopes.get(scope) or await coord.root.fork(scope)
    r = await s.exec(["sh", "-c", script], **kw)
    out = r.outcome
    assert isinstance(out, ExecOutcome), r.effect
    return Run(out.returncode, coord.trace.blob(out.stdout).decode(errors="replace"),
               coord.trace.blob(out.stderr).decode(errors="replace"), out)


def _host_pids(marker: str) -> list[int]:
    """Host pids of the processes whose command line starts with `marker`."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if cmdline.startswith(marker.encode()):
                pids.append(int(entry.name))
    return pids


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


# ---- who the command is


async def test_command_is_an_unprivileged_host_user(env) -> None:
    """Seen from the host, the command runs as the sandbox uid, not 0, with no
    capabilities, no_new_privs and a seccomp filter."""
    coord, _ = env
    task = asyncio.create_task(run(coord, "exec sleep 3.14159"))
    pids: list[int] = []
    for _ in range(200):
        pids = _host_pids("sleep 3.14159")
        if pids:
            break
        await asyncio.sleep(0.02)
    assert pids, "the command never showed up on the host"
    st = _status(pids[0])
    await task
    assert st["Uid"].split() == [str(SANDBOX_UID)] * 4
    assert st["Gid"].split() == [str(SANDBOX_UID)] * 4
    assert SANDBOX_UID != 0
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[cap], 16) == 0, (cap, st[cap])
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2"


async def test_setuid_binaries_give_nothing(env) -> None:
    """A setuid-root program (su, mount) runs without privileges: no_new_privs."""
    coord, _ = env
    r = await run(coord, "grep -E '^(NoNewPrivs|CapEff|CapBnd)' /proc/self/status; "
                  "mount -t tmpfs none /tmp 2>&1; echo rc=$?")
    assert "NoNewPrivs:\t1" in r.out
    assert "CapEff:\t0000000000000000" in r.out
    assert "CapBnd:\t0000000000000000" in r.out
    assert "rc=0" not in r.out


# ---- finding 1: remount a bound directory read-write, then write


@pytest.mark.parametrize("target", ["/usr", "/etc", "/"])
async def test_remount_read_write_fails_and_host_is_untouched(env, target: str) -> None:
    """`mount -o remount,rw,bind` of a host bind fails; the write after it changes
    nothing on the host."""
    coord, _ = env
    victim = Path(target) / f"corral-pwned-{os.getpid()}"
    r = await run(coord, f"mount -o remount,rw,bind {target} 2>&1; echo mount=$?; "
                  f"echo pwned > {victim} 2>&1; echo write=$?")
    assert "mount=0" not in r.out
    assert "write=0" not in r.out
    assert not victim.exists()


async def test_mount_syscalls_are_denied(env) -> None:
    """mount(2), umount2, unshare of a user or mount namespace, setns, keyctl, bpf,
    perf_event_open, ptrace, io_uring and TIOCSTI all fail inside a command."""
    coord, _ = env
    code = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, nr, *args):
    rc = libc.syscall(nr, *args)
    print(name, "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?"))
call("mount", 165, b"none", b"/tmp", b"tmpfs", 0, None)
call("umount2", 166, b"/proc", 2)
call("unshare-user", 272, 0x10000000)
call("unshare-mount", 272, 0x00020000)
call("clone-newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
call("keyctl", 250, 0, 0, 0, 0, 0)
call("add_key", 248, b"user", b"k", b"v", 1, -2)
call("bpf", 321, 0, 0, 0)
call("perf_event_open", 298, 0, 0, -1, -1, 0)
call("ptrace-traceme", 101, 0, 0, 0, 0)
call("io_uring_setup", 425, 8, 0)
call("clone3", 435, 0, 0)
call("ioctl-tiocsti", 16, 0, 0x5412, ctypes.c_char_p(b"x"))
"""
    r = await run(coord, f"python3 -c '{code}'")
    lines = dict(line.split() for line in r.out.splitlines())
    assert r.returncode == 0, r.err
    assert set(lines) == {"mount", "umount2", "unshare-user", "unshare-mount", "clone-newuser",
                          "keyctl", "add_key", "bpf", "perf_event_open", "ptrace-traceme",
                          "io_uring_setup", "clone3", "ioctl-tiocsti"}
    assert "ok" not in lines.values(), lines
    assert lines["clone3"] == "ENOSYS" and lines["io_uring_setup"] == "ENOSYS"


async def test_no_new_user_namespace(env) -> None:
    """`unshare -Ur` (a way back to capabilities) fails."""
    coord, _ = env
    r = await run(coord, "unshare -Ur id 2>&1; echo rc=$?")
    assert "uid=0" not in r.out and "rc=0" not in r.out


# ---- finding 2: env applied to the host's bwrap process


async def test_env_never_reaches_the_host_side(env) -> None:
    """LD_DEBUG in `env` traces only programs inside the sandbox: the loader of the
    host-side launcher (prlimit, bwrap) never sees the variable."""
    coord, _ = env
    r = await run(coord, "true", env={"LD_DEBUG": "files", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0
    traced = r.err + r.out
    assert "file=" in traced  # the command itself was traced: the variable reached it
    assert "bwrap" not in traced and "prlimit" not in traced


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the library")
async def test_ld_preload_runs_only_inside(env, tmp_path: Path) -> None:
    """A library put in LD_PRELOAD whose constructor writes a host file runs only
    inside the sandbox (as the sandbox user): the host file is never written."""
    coord, _ = env
    marker = tmp_path / "preloaded"
    lib = tmp_path / "lib.so"
    src = tmp_path / "lib.c"
    src.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("pwned", f); fclose(f); }}\n'
        '  FILE *g = fopen("/workspace/repo/ran-inside", "w"); if (g) fclose(g);\n}\n')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    a = await coord.root.fork("a")
    await a.write("lib.so", lib.read_bytes())
    r = await a.exec(["true"], env={"LD_PRELOAD": "/workspace/repo/lib.so", "PATH": "/usr/bin"})
    out = r.outcome
    assert isinstance(out, ExecOutcome) and out.returncode == 0
    assert not marker.exists()
    assert "ran-inside" in {c.path for c in out.changes}  # it did run, inside


async def test_env_is_part_of_the_recorded_intent(env) -> None:
    """A policy sees the exec's env, and the trace records it."""
    coord, _ = env
    seen: list[dict[str, str] | None] = []

    async def look(intent, view):
        if isinstance(intent, Exec):
            seen.append(intent.env)
        return None

    coord.chain.policies.append(look)
    a = await coord.root.fork("a")
    r = await a.exec(["sh", "-c", "echo $CORRAL_X"], env={"CORRAL_X": "42", "PATH": "/bin"})
    assert seen and seen[0] == {"CORRAL_X": "42", "PATH": "/bin"}
    effect = coord.log(a)[-1]
    assert isinstance(effect.intent, Exec) and effect.intent.env == {"CORRAL_X": "42",
                                                                     "PATH": "/bin"}
    assert isinstance(r.outcome, ExecOutcome)
    assert coord.trace.blob(r.outcome.stdout) == b"42\n"


# ---- finding 3: the state directory, keys, trace and other scopes


async def test_state_directory_is_invisible(env) -> None:
    """Neither the state directory nor anything in it (server.key, trace.git, the
    journal, layers) exists for a command, though it sits inside the repository."""
    coord, state = env
    await coord.checkpoint()
    assert (state / "trace.git").is_dir()
    r = await run(coord, f"ls -a {state} 2>&1; cat {state}/server.key 2>&1; "
                  f"ls {state}/trace.git 2>&1; ls -a /workspace/repo")
    assert SECRET not in r.out
    assert ".corral" not in r.out.split("\n")[-2:]  # not in the workspace listing
    assert "HEAD" not in r.out and "objects" not in r.out


async def test_no_secret_anywhere_in_the_visible_tree(env) -> None:
    """A search of every file a command can read finds neither the server key nor
    another scope's unmerged file."""
    coord, _ = env
    b = await coord.root.fork("b")
    await b.write("b-private.txt", b"bob-only-9d2e\n")
    r = await run(coord, "grep -rlsI -e corral-host-secret -e bob-only-9d2e "
                  "--exclude-dir=proc --exclude-dir=sys / ; echo done", timeout=120)
    assert r.out.strip().endswith("done")
    assert r.out.strip() == "done", r.out


async def test_other_scopes_layers_are_not_mounted(env) -> None:
    """No mount inside the sandbox comes from the state directory but the
    command's own tree."""
    coord, state = env
    b = await coord.root.fork("b")
    await b.write("b.txt", b"b\n")
    r = await run(coord, "cat /proc/self/mountinfo")
    assert str(state) not in r.out
    upper = getattr(b.workspace, "upper", None)
    assert upper is not None and str(upper) not in r.out


# ---- finding 4: host Unix sockets without network


async def test_host_unix_socket_unreachable_without_network(env, tmp_path: Path) -> None:
    """A Unix socket served on the host in a directory the command sees (a declared
    toolchain directory) cannot be connected to with network off."""
    coord, _ = env
    shown = Path(tempfile.mkdtemp(prefix="corral-sock-", dir="/tmp"))
    shown.chmod(0o755)
    path = shown / "host.sock"
    accepted: list[bytes] = []
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen()
    server.settimeout(0.2)
    stop, received = threading.Event(), threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                accepted.append(conn.recv(100))
                received.set()

    thread = threading.Thread(target=serve)
    thread.start()
    coord.runtime.with_settings(toolchain=(shown,))
    try:
        code = ("import socket\ns = socket.socket(socket.AF_UNIX)\n"
                f"s.connect('{path}'); s.sendall(b'hello'); print('connected')\n")
        r = await run(coord, f"test -S {path} && echo visible; python3 -c \"{code}\" 2>&1")
        assert "visible" in r.out  # the socket file is there to try
        assert "connected" not in r.out
        assert accepted == []
        # the same program from the host reaches the server: the test can fail
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        assert await asyncio.to_thread(received.wait, 5), "the host's server got nothing in 5 s"
        assert accepted == [b"hello"]
    finally:
        stop.set()
        thread.join()
        server.close()
        shutil.rmtree(shown)


async def test_pipes_between_own_processes_still_work(env) -> None:
    """Without network, socketpair (what multiprocessing pipes use) still works."""
    coord, _ = env
    code = ("import multiprocessing as m\n"
            "a, b = m.Pipe()\na.send(41)\nprint(b.recv() + 1)\n")
    r = await run(coord, f"python3 -c '{code}'")
    assert (r.returncode, r.out) == (0, "42\n"), r.err


# ---- finding 5: host secrets


async def test_shadow_and_root_home_are_hidden(env) -> None:
    """/etc/shadow reads empty (or not at all), /root, /home and /run are absent."""
    coord, _ = env
    shadow = Path("/etc/shadow").read_text() if Path("/etc/shadow").exists() else ""
    r = await run(coord, "cat /etc/shadow /etc/gshadow 2>&1; ls -a /root /home /run /var 2>&1;"
                  " ls /etc/ssh 2>&1; echo end")
    root_line = next((line for line in shadow.splitlines() if line.startswith("root:")), None)
    if root_line:
        assert root_line not in r.out
    for gone in ("/root", "/home", "/run", "/var"):
        assert f"ls: cannot access '{gone}': No such file or directory" in r.out
    assert not any(name.startswith("ssh_host_") for name in r.out.split())


async def test_coordinator_venv_does_not_leak(env) -> None:
    """The coordinator's own virtualenv is neither visible nor on PATH: its packages
    (pytest here) cannot be imported by the system python."""
    coord, _ = env
    r = await run(coord, f"echo $PATH; test -e {sys.prefix} || echo no-venv; "
                  "python3 -c 'import pytest' 2>&1 | tail -1")
    assert sys.prefix not in r.out.splitlines()[0]
    assert "no-venv" in r.out
    assert "ModuleNotFoundError" in r.out


# ---- finding 6: limits


async def test_output_flood_is_capped_and_recorded(env) -> None:
    """512 MiB on stdout: 1 MiB kept, the outcome says truncated, the command ends
    normally, and the coordinator's memory does not grow with the flood."""
    coord, _ = env
    coord.runtime.with_settings(exec_limits=dataclasses.replace(Limits(), output=1 * _MiB))
    rss_before = _rss()
    r = await run(coord, "head -c 512M /dev/zero; echo tail >&2", timeout=120)
    assert r.returncode == 0
    assert len(r.out) == 1 * _MiB
    assert r.outcome.truncated
    assert r.err == "tail\n"
    assert _rss() - rss_before < 100 * _MiB


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def test_big_file_is_capped(env) -> None:
    """`truncate -s 1G` and a 64 MiB write both fail past the file size limit."""
    coord, _ = env
    coord.runtime.with_settings(exec_limits=dataclasses.replace(Limits(), file_size=8 * _MiB))
    code = ("import errno, os\n"
            "for name, act in (('big', lambda: os.truncate('big', 1 << 30)),\n"
            "                  ('big2', lambda: open('big2', 'wb').write(bytes(64 << 20)))):\n"
            "    open(name, 'ab').close()\n"
            "    try:\n        act(); print(name, 'ok')\n"
            "    except OSError as e:\n        print(name, errno.errorcode[e.errno])\n"
            "print(os.path.getsize('big'), os.path.getsize('big2'))\n")
    r = await run(coord, f"python3 -c \"{code}\"; truncate -s 1G big3; echo rc=$?")
    assert "big EFBIG" in r.out and "big2 EFBIG" in r.out, r.out + r.err
    assert f"0 {8 * _MiB}" in r.out
    assert "rc=0" not in r.out
    big2 = coord.trace.read(coord.scopes["a"].head, "big2")
    assert len(big2) == 8 * _MiB


async def test_layer_size_is_capped(env) -> None:
    """Files that together pass the layer limit fail with ENOSPC; /tmp has its own cap."""
    coord, _ = env
    coord.runtime.with_settings(
        exec_limits=dataclasses.replace(Limits(), layer=16 * _MiB, tmp=8 * _MiB))
    r = await run(coord, "for i in 1 2 3 4; do head -c 6M /dev/zero > f$i || echo full; done;"
                  " head -c 12M /dev/zero > /tmp/t 2>/dev/null || echo tmpfull")
    assert "full" in r.out and "tmpfull" in r.out


async def test_fork_bomb_is_bounded(env) -> None:
    """A process limit of 64 stops a command from starting 300 processes, and
    nothing of it is left on the host afterwards."""
    coord, _ = env
    coord.runtime.with_settings(exec_limits=dataclasses.replace(Limits(), processes=64))
    code = ("import os, time\nn = 0\nfor i in range(300):\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(20.71828)\n"
            "        os._exit(0)\n    n += 1\nprint(n)\n")
    r = await run(coord, f"python3 -c '{code}'", timeout=30)
    assert int(r.out.split()[-1]) < 64, r.out
    assert _host_pids("20.71828") == []  # gone with the sandbox


async def test_shell_fork_bomb_ends_at_its_timeout(env) -> None:
    """The classic shell fork bomb is held by the process limit, killed at its
    timeout, and leaves no process on the host."""
    coord, _ = env
    coord.runtime.with_settings(exec_limits=dataclasses.replace(Limits(), processes=64))
    start = time.monotonic()
    r = await run(coord, "b() { b | b & }; b; sleep 99.123", timeout=3)
    assert time.monotonic() - start < 15
    assert r.outcome.timed_out or r.returncode != 0
    await asyncio.sleep(0.2)
    assert _host_pids("sh -c b()") == [] and _host_pids("sleep 99.123") == []


async def test_memory_hog_is_bounded(env) -> None:
    """Allocating past the memory limit fails inside the command."""
    coord, _ = env
    coord.runtime.with_settings(exec_limits=dataclasses.replace(Limits(), memory=256 * _MiB))
    r = await run(coord, "python3 -c 'b = bytearray(512 << 20); print(len(b))' 2>&1")
    assert r.returncode != 0
    assert "MemoryError" in r.out


_HOG = ("import time; b = bytearray(400 << 20); "
        "[b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; time.sleep(1); print('ok')")


async def test_many_processes_share_one_memory_limit(env) -> None:
    """Six processes of 400 MB each (each under the per-process limit) cannot take
    more than `memory` together: the command's cgroup kills what passes the total,
    and the host keeps its memory. With the limit raised, all six live (the control)."""
    from sandboxes._cgroup import CommandGroup, _parents

    probe = CommandGroup.open(1 << 30, 8)
    if probe is None:
        pytest.skip("no writable memory+pids cgroup here: memory is bounded per process only")
    probe.close()
    coord, _ = env
    hogs = " & ".join([f'python3 -c "{_HOG}"'] * 6) + "; wait"
    coord.runtime.with_settings(exec_limits=dataclasses.replace(Limits(), memory=1 << 30))
    bounded = await run(coord, hogs)
    coord.runtime.with_settings(exec_limits=dataclasses.replace(Limits(), memory=8 << 30))
    control = await run(coord, hogs)
    assert control.out.count("ok") == 6
    assert bounded.out.count("ok") <= 2
    # A live scope keeps its warm sandbox's group; discarded, nothing is left.
    # This process's groups only: another process on the machine may be running commands.
    await coord.scopes["a"].discard()
    left = [g for parent in _parents() or () for g in parent.glob(f"corral-exec-{os.getpid()}-*")]
    assert not left, f"a command's cgroup was left: {left}"


async def test_timeout_past_the_maximum_is_refused(env) -> None:
    """A timeout past Limits.timeout_max is a clear error and nothing runs."""
    coord, _ = env
    a = await coord.root.fork("a")
    head = a.head
    with pytest.raises(ExecError, match="timeout_max"):
        await a.exec(["touch", "x"], timeout=3600)
    assert a.head == head


async def test_timeout_kills_the_command(env) -> None:
    """A command past its timeout is killed and reported as timed out."""
    coord, _ = env
    start = time.monotonic()
    r = await run(coord, "sleep 60", timeout=1)
    assert r.outcome.timed_out and time.monotonic() - start < 10


# ---- processes: /proc, ptrace, killing the server, daemons


async def test_host_processes_are_invisible(env) -> None:
    """/proc shows only the sandbox's own processes; /proc/1/root is the sandbox's root."""
    coord, _ = env
    r = await run(coord, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done; "
                  "echo ---; ls /proc/1/root 2>&1")
    procs, _, root = r.out.partition("---")
    # the warm sandbox's launcher is the sandbox's own process, not the host's
    procs = "\n".join(line for line in procs.splitlines() if "corral-launcher" not in line)
    assert "pytest" not in procs and "python" not in procs.replace("python3 -c", "")
    assert len([line for line in procs.splitlines() if line.strip()]) < 6
    assert "home" not in root.split() and "root" not in root.split()


async def test_ptrace_is_denied(env) -> None:
    """Attaching to another process, even the command's own child, fails."""
    coord, _ = env
    code = ("import ctypes, os, errno, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "pid = os.fork()\nif pid == 0:\n    time.sleep(5); os._exit(0)\n"
            "rc = libc.ptrace(16, pid, 0, 0)\n"
            "print('attached' if rc == 0 else errno.errorcode[ctypes.get_errno()])\n"
            "os.kill(pid, 9)\n")
    r = await run(coord, f"python3 -c '{code}'")
    assert r.out.strip() == "EPERM", r.out + r.err


async def test_kill_everything_spares_the_host(env) -> None:
    """`kill -9 -1` and a kill of the coordinator's host pid reach nothing outside,
    not even a host process of the sandbox's own uid."""
    coord, _ = env
    bystander = subprocess.Popen(["sleep", "61.2345"], user=SANDBOX_UID, group=SANDBOX_UID,
                                 extra_groups=[])
    try:
        r = await run(coord, f"kill -9 {os.getpid()} {bystander.pid} 2>&1; kill -9 -1; "
                      "echo after")
        assert bystander.poll() is None
        assert r.returncode != 0 or "after" in r.out
        # the coordinator still works
        assert (await run(coord, "echo alive", scope="b")).out == "alive\n"
    finally:
        bystander.kill()
        bystander.wait()


async def test_background_daemon_dies_with_the_command(env) -> None:
    """A `setsid` daemon started by a command is gone when exec returns."""
    coord, _ = env
    r = await run(coord, "setsid sleep 300.5 >/dev/null 2>&1 < /dev/null & "
                  "nohup sleep 301.5 >/dev/null 2>&1 & echo started")
    assert r.out == "started\n"
    await asyncio.sleep(0.3)
    assert _host_pids("sleep 300.5") == [] and _host_pids("sleep 301.5") == []


# ---- paths: traversal, symlinks, hard links


async def test_symlink_out_of_the_workspace_writes_nothing_on_the_host(env) -> None:
    """Symlinks to host paths, then writes through them, change no host file; the
    link itself is recorded as a link."""
    coord, state = env
    r = await run(coord, f"ln -s /usr/share up; echo x > up/corral-pwned 2>&1; "
                  f"ln -s {state} st; cat st/server.key 2>&1; "
                  "ln -s ../../../../../../etc/passwd pw; cat ../../../../etc/shadow 2>&1; "
                  "echo end")
    assert not Path("/usr/share/corral-pwned").exists()
    assert SECRET not in r.out
    links = {c.path: c.mode for c in r.outcome.changes}
    assert links.get("up") == sandboxes.MODE_LINK and links.get("st") == sandboxes.MODE_LINK


async def test_hard_links_reach_nothing_outside(env) -> None:
    """A hard link to a host file fails (other mount); one to a workspace file, once
    accepted, is a separate file: an API write to it leaves the original alone."""
    coord, _ = env
    r = await run(coord, "ln /etc/passwd pw 2>&1; echo rc=$?; ln README.md hl; echo ok")
    assert "rc=0" not in r.out
    a = coord.scopes["a"]
    before = await a.read("README.md")
    await a.write("hl", b"changed\n")
    assert await a.read("README.md") == before


async def test_workspace_is_writable_and_changes_land(env) -> None:
    """For all the above, the command can still change every workspace file, and
    the changes land in the scope owned by root on disk."""
    coord, _ = env
    r = await run(coord, "echo new >> README.md && mkdir -p d/e && echo f > d/e/f && "
                  "rm src/util.py && echo ok")
    assert (r.returncode, r.out) == (0, "ok\n"), r.err
    a = coord.scopes["a"]
    assert (await a.read("d/e/f")) == b"f\n"
    assert os.stat(a.path / "d/e/f").st_uid == 0
    assert not (a.path / "src/util.py").exists()


def test_run_isolated_refuses_a_toolchain_overlapping_the_state(tmp_path: Path) -> None:
    """A toolchain directory that contains (or is inside) the state is refused."""
    state = tmp_path / "state"
    state.mkdir()
    with pytest.raises(ValueError, match="state directory"):
        run_isolated(tmp_path, ["true"], timeout=5, hide=[state], toolchain=[tmp_path])


def test_runs_leave_no_mount_behind(tmp_path: Path) -> None:
    """After runs (one of them timed out) and close, nothing a run mounted remains,
    neither under the state nor under the runs' scratch base."""
    from sandboxes._mount import mounts_under
    from sandboxes._scratch import exec_base

    for cls in (sandboxes.OverlayBackend, sandboxes.CopyBackend):
        backend = cls(tmp_path / cls.name)
        try:
            ws = backend.base("k", lambda root: (root / "f").write_text("f"))
            ws.run(["sh", "-c", "echo x > g"], timeout=10)
            ws.run(["sleep", "30"], timeout=0.5)
            base = exec_base(backend.root)
            # while open: the base tmpfs and the workspace's warm sandbox slot, nothing of a run
            assert [p for p in mounts_under(base) if not _is_slot(p, base)] == [base]
        finally:
            backend.close()
        assert mounts_under(backend.root) == []
        assert mounts_under(base) == []


async def test_over_http_with_a_scope_token(sample_repo: Path) -> None:
    """The same attacks through `corral serve`'s API with a scope token: env stays
    inside, the state (its token store included) is invisible, the output limit set
    with --limit holds and is reported, a timeout past the maximum is a 400."""

    from coordinator.client import CorralClient
    from sandboxes import parse_limits
    from tests.coordinator.server_fixtures import serve

    state = sample_repo / ".corral"
    limits = parse_limits(["output=64K", "timeout_max=60"])
    async with serve(state, sample_repo, guard=False, exec_limits=limits) as srv:
        child = await srv.client.fork("root", "m")
        # the token store (digests of every live token) is the state's secret now
        store = (state / "tokens").read_bytes()
        async with CorralClient(srv.url, child.token) as agent:
            e = await agent.exec("m", ["sh", "-c", f"cat {state}/tokens; ls {state}; "
                                       "head -c 1M /dev/zero | tr '\\0' x; true"],
                                 env={"LD_DEBUG": "files", "PATH": "/usr/bin:/bin"},
                                 timeout=30)
            out, err = e.stdout_b64 or b"", e.stderr_b64 or b""
            assert store and not any(line in out for line in store.splitlines() if line)
            assert child.token.encode() not in out and b"trace.git" not in out
            assert len(out) == 64 * 1024 and e.truncated
            assert b"bwrap" not in err and b"prlimit" not in err and b"file=" in err
            with pytest.raises(ExecError, match="timeout_max"):
                await agent.exec("m", ["true"], timeout=120)


async def test_a_toolchain_showing_the_state_is_refused(env) -> None:
    """A toolchain directory inside (or holding) the state directory makes exec fail
    with ExecError before anything runs: the trace would become visible."""
    coord, state = env
    a = await coord.root.fork("a")
    head = a.head
    for shown in (state / "trace.git", state.parent):
        coord.runtime.with_settings(toolchain=(shown,))
        with pytest.raises(ExecError, match="state directory"):
            await a.exec(["true"])
    assert a.head == head


def test_a_state_inside_a_system_directory_is_refused() -> None:
    """A state directory under /usr or /etc (which commands see) is refused."""
    from sandboxes import check_hidden

    for bad in (Path("/usr/share/corral-state"), Path("/etc/corral")):
        with pytest.raises(ValueError, match="every command sees"):
            check_hidden(bad)
    check_hidden(Path("/srv/corral-state"))


async def test_declared_toolchain_is_the_commands_environment(env, tmp_path: Path) -> None:
    """A virtualenv-like directory declared as toolchain is shown whole (its
    packages too) with its bin/ first on the default PATH; Scope.exec_env says so."""
    coord, _ = env
    venv = Path(tempfile.mkdtemp(prefix="corral-venv-", dir="/tmp"))
    try:
        (venv / "bin").mkdir()
        (venv / "lib").mkdir()
        (venv / "lib" / "corral_probe.py").write_text("X = 7\n")
        tool = venv / "bin" / "probe"
        tool.write_text(f"#!/bin/sh\nexec python3 -c 'import sys; sys.path.insert(0, "
                        f"\"{venv}/lib\"); import corral_probe; print(corral_probe.X)'\n")
        tool.chmod(0o755)
        venv.chmod(0o755)
        coord.runtime.with_settings(toolchain=(venv,))
        a = await coord.root.fork("a")
        assert a.exec_env()["PATH"].split(":")[0] == str(venv / "bin")
        r = await run(coord, "probe")
        assert (r.returncode, r.out) == (0, "7\n"), r.err
        r = await run(coord, "probe", env={**a.exec_env(), "X": "1"})
        assert (r.returncode, r.out) == (0, "7\n"), r.err
    finally:
        shutil.rmtree(venv)


_DEEP_TREE = ("import os\nfor _ in range({n}):\n    os.mkdir('d')\n    os.chdir('d')\n"
              "{end}\nprint('made', flush=True)\n")


@pytest.mark.parametrize("backend", ["overlay", "copy"])
@pytest.mark.parametrize(("depth", "end"), [
    (1500, "open('f', 'w').write('x')"), (1500, "pass"), (3000, "pass"),
], ids=["1500-file", "1500-dirs", "3000-dirs"])
async def test_very_deep_tree_is_refused_and_leaves_nothing(
    sample_repo: Path, tmp_path: Path, backend: str, depth: int, end: str
) -> None:
    """A command making a 1,500-level directory chain (with or without a file at
    the bottom) gets a PathError, not a crash of the scan (3,000 levels passed
    PATH_MAX: ENAMETOOLONG, a 500) or of the layer's removal (shutil.rmtree
    recursed once per level): the scope is unchanged and still runs commands,
    and no mount or scratch directory of the run is left."""
    from coordinator import PathError
    from sandboxes._mount import mounts_under
    from sandboxes._scratch import exec_base

    async with Coordinator.open(tmp_path / "s", sample_repo, backend=backend) as coord:
        a = await coord.root.fork("a")
        files, readme = await a.listdir(), await a.read("README.md")
        base = exec_base(coord.backend.root)
        with pytest.raises(PathError, match=r"too deep|cannot be recorded"):
            await a.exec(["python3", "-c", _DEEP_TREE.format(n=depth, end=end)], timeout=60)
        # recorded as a failed effect; nothing of the command's applied
        assert await a.listdir() == files
        assert await a.read("README.md") == readme
        assert not (a.path / "d").exists()
        # while open: the base tmpfs and a's warm sandbox slot, nothing of the run
        assert [p for p in mounts_under(base) if not _is_slot(p, base)] == [base]
        assert [n for n in os.listdir(base) if not _is_slot(base / n, base)] == [".root"]
        r = await a.exec(["sh", "-c", "echo ok > ok.txt"], timeout=30)
        assert isinstance(r.outcome, ExecOutcome) and r.outcome.returncode == 0
        assert await a.read("ok.txt") == b"ok\n"


def test_remove_tree_takes_any_depth(tmp_path: Path) -> None:
    """remove_tree deletes a 3,000-level chain (past Python's recursion limit for
    shutil.rmtree and past PATH_MAX) and leaves a sibling alone."""
    from sandboxes._files import remove_tree

    top = tmp_path / "top"
    top.mkdir()
    (tmp_path / "keep").write_text("k")
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(fd)
    remove_tree(top)
    assert not top.exists()
    assert (tmp_path / "keep").read_text() == "k"
    remove_tree(top)  # absent: nothing
