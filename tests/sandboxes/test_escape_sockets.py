"""Sockets off means off (issue 22): with network off, a command reaches no host
socket through any family or any socketpair, and its own pipes still work.

The attacks run as commands through the public API (`Scope.exec`, overlay
backend), against host listeners bound in a directory the command sees (a
declared toolchain directory: a read-only bind does not stop a connect or a
sendto). Each listener must receive nothing. Needs root, bubblewrap and user
namespaces; skips with the reason otherwise. The filter program itself is also
run through a small classic-BPF interpreter here, which needs nothing.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import struct
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from coordinator import Coordinator, ExecOutcome
from sandboxes._seccomp import _ARCHES, seccomp_filter

from .test_escape import _why_skip  # one skip rule for every escape suite

_MARKS = (pytest.mark.skipif(_why_skip() is not None, reason=str(_why_skip())),
          pytest.mark.root, pytest.mark.slow)


def sandboxed(fn):  # type: ignore[no-untyped-def]
    """The marks of a test that runs commands: root, bwrap, user namespaces."""
    for mark in _MARKS:
        fn = mark(fn)
    return fn


# ---- the filter program, interpreted (no sandbox needed)

_ALLOW = 0x7FFF0000


def _run_filter(prog: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """What the classic BPF `prog` returns for one system call (the subset of
    instructions the filter uses: LD W ABS, JEQ/JGE/JSET K, AND K, RET K)."""
    insns = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    full = (*args, *(0,) * (6 - len(args)))
    data = struct.pack("=iIQ6Q", nr, arch, 0, *full)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x54:
            acc &= k
        elif code in (0x15, 0x35, 0x45):
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if hit else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"instruction {code:#x} not understood")


def _errno_of(ret: int) -> int | None:
    return ret & 0xFFFF if ret & 0xFFFF0000 == 0x00050000 else None


@pytest.mark.parametrize("machine", sorted(_ARCHES))
def test_filter_program_refuses_foreign_sockets(machine: str) -> None:
    """Without network, on both architectures' tables: socket() of AF_UNIX, AF_VSOCK
    and non-route AF_NETLINK is refused, AF_INET/AF_INET6/NETLINK_ROUTE allowed;
    socketpair(AF_UNIX) allows only SOCK_STREAM and SOCK_SEQPACKET (with
    SOCK_NONBLOCK/SOCK_CLOEXEC), refusing SOCK_DGRAM in every flag combination."""
    arch, _, nrs = _ARCHES[machine]
    off = seccomp_filter(network=False, machine=machine)
    on = seccomp_filter(network=True, machine=machine)

    def sock(prog: bytes, *args: int) -> int | None:
        ret = _run_filter(prog, arch, nrs["socket"], args)
        return None if ret == _ALLOW else _errno_of(ret)

    def pair(prog: bytes, *args: int) -> int | None:
        ret = _run_filter(prog, arch, nrs["socketpair"], args)
        return None if ret == _ALLOW else _errno_of(ret)

    assert sock(off, socket.AF_UNIX, socket.SOCK_STREAM, 0) == errno.EAFNOSUPPORT
    assert sock(off, 40, socket.SOCK_STREAM, 0) == errno.EAFNOSUPPORT  # AF_VSOCK
    assert sock(off, 16, socket.SOCK_RAW, 9) == errno.EPROTONOSUPPORT  # NETLINK_AUDIT
    assert sock(off, 16, socket.SOCK_DGRAM, 15) == errno.EPROTONOSUPPORT  # uevents
    assert sock(off, 16, socket.SOCK_RAW, 0) is None  # NETLINK_ROUTE
    assert sock(off, socket.AF_INET, socket.SOCK_STREAM, 0) is None
    assert sock(off, socket.AF_INET6, socket.SOCK_DGRAM, 0) is None
    assert sock(off, 17, socket.SOCK_RAW, 0) == errno.EAFNOSUPPORT  # AF_PACKET
    flags = (0, 0x800, 0x80000, 0x80800)
    for f in flags:
        assert pair(off, socket.AF_UNIX, socket.SOCK_DGRAM | f, 0) == errno.EPERM
        assert pair(off, socket.AF_UNIX, socket.SOCK_STREAM | f, 0) is None
        assert pair(off, socket.AF_UNIX, socket.SOCK_SEQPACKET | f, 0) is None
    assert pair(off, socket.AF_UNIX, socket.SOCK_STREAM | 0x40000000, 0) == errno.EPERM
    assert pair(off, 40, socket.SOCK_STREAM, 0) == errno.EPERM
    # with network, the same calls are allowed (the command has the host's network)
    assert sock(on, socket.AF_UNIX, socket.SOCK_STREAM, 0) is None
    assert pair(on, socket.AF_UNIX, socket.SOCK_DGRAM, 0) is None
    # other calls pass through the socket blocks untouched
    assert _run_filter(off, arch, 0, ()) == _ALLOW


# ---- real commands against real host listeners


@pytest.fixture
async def coord(sample_repo: Path) -> AsyncIterator[Coordinator]:
    async with Coordinator.open(sample_repo / ".corral", sample_repo, backend="overlay") as c:
        yield c


class Listeners:
    """A DGRAM, a STREAM and a SEQPACKET Unix socket served on the host in one
    directory; what any of them received (a datagram, a connection)."""

    def __init__(self, where: Path) -> None:
        self.dir = where
        self.got: list[str] = []
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        for kind, name in ((socket.SOCK_DGRAM, "dgram"), (socket.SOCK_STREAM, "stream"),
                           (socket.SOCK_SEQPACKET, "seqpacket")):
            s = socket.socket(socket.AF_UNIX, kind)
            path = where / f"{name}.sock"
            s.bind(str(path))
            os.chmod(path, 0o777)
            if kind != socket.SOCK_DGRAM:
                s.listen()
            s.settimeout(0.1)
            self._socks.append(s)
            t = threading.Thread(target=self._serve, args=(s, name, kind), daemon=True)
            t.start()
            self._threads.append(t)

    def path(self, name: str) -> str:
        return str(self.dir / f"{name}.sock")

    def _serve(self, s: socket.socket, name: str, kind: int) -> None:
        while not self._stop.is_set():
            try:
                if kind == socket.SOCK_DGRAM:
                    data = s.recv(1000)
                    self.got.append(f"{name}: datagram {data!r}")
                else:
                    conn, _ = s.accept()
                    with conn:
                        self.got.append(f"{name}: connection")
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        for s in self._socks:
            s.close()


@pytest.fixture
def listeners(coord: Coordinator) -> Iterator[Listeners]:
    shown = Path(tempfile.mkdtemp(prefix="corral-sock-", dir="/tmp"))
    shown.chmod(0o755)
    served = Listeners(shown)
    coord.runtime.with_settings(toolchain=(shown,))
    try:
        yield served
    finally:
        served.close()
        shutil.rmtree(shown)


async def _python(coord: Coordinator, code: str, **kw: object) -> tuple[int, str, str]:
    scope = coord.scopes.get("a") or await coord.root.fork("a")
    await scope.write("probe.py", code.encode())
    r = await scope.exec(["python3", "probe.py"], **kw)  # type: ignore[arg-type]
    out = r.outcome
    assert isinstance(out, ExecOutcome), r.effect
    return (out.returncode, coord.trace.blob(out.stdout).decode(errors="replace"),
            coord.trace.blob(out.stderr).decode(errors="replace"))


_ATTACK = r"""
import errno, socket
DGRAM, STREAM, SEQ = %r, %r, %r
def attempt(name, fn):
    try:
        fn()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
U = socket.AF_UNIX
for flags in (0, socket.SOCK_CLOEXEC, socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC):
    def dgram_pair():
        a, b = socket.socketpair(U, socket.SOCK_DGRAM | flags)
        a.sendto(b"pwned", DGRAM)
    attempt(f"dgram-pair-{flags}", dgram_pair)
for kind, label in ((socket.SOCK_STREAM, "stream"), (socket.SOCK_SEQPACKET, "seqpacket")):
    for stage in ("fresh", "shutdown", "peer-closed"):
        a, b = socket.socketpair(U, kind)
        if stage == "shutdown":
            a.shutdown(socket.SHUT_RDWR)
        elif stage == "peer-closed":
            b.close()
        for target in (DGRAM, STREAM, SEQ):
            tag = f"{label}-{stage}-{target.rsplit('/', 1)[-1]}"
            attempt(tag + "-connect", lambda: a.connect(target))
            attempt(tag + "-sendto", lambda: a.sendto(b"pwned", target))
            attempt(tag + "-sendmsg", lambda: a.sendmsg([b"pwned"], [], 0, target))
        a.close()
        if stage != "peer-closed":
            b.close()
attempt("unix-socket", lambda: socket.socket(U, socket.SOCK_DGRAM).sendto(b"pwned", DGRAM))
attempt("vsock", lambda: socket.socket(40, socket.SOCK_STREAM))
attempt("netlink-audit", lambda: socket.socket(16, socket.SOCK_RAW, 9))
attempt("netlink-uevent", lambda: socket.socket(16, socket.SOCK_DGRAM, 15))
attempt("netlink-route", lambda: socket.socket(16, socket.SOCK_RAW, 0))
print("done")
"""


@sandboxed
async def test_no_socketpair_or_family_reaches_a_host_socket(coord, listeners) -> None:
    """With network off: a datagram socketpair is refused (every flag combination);
    a stream or seqpacket socketpair, fresh, after shutdown() or after its peer
    closed, cannot connect, sendto or sendmsg to a host socket path; AF_VSOCK and
    non-route AF_NETLINK sockets are refused, NETLINK_ROUTE allowed. The host's
    DGRAM, STREAM and SEQPACKET listeners receive nothing."""
    paths = (listeners.path("dgram"), listeners.path("stream"), listeners.path("seqpacket"))
    rc, out, err = await _python(coord, _ATTACK % paths)
    assert rc == 0 and out.strip().endswith("done"), out + err
    results = dict(line.rsplit(" ", 1) for line in out.splitlines() if line != "done")
    assert listeners.got == [], (listeners.got, out)
    for flags in ("0", str(socket.SOCK_CLOEXEC),
                  str(socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)):
        assert results[f"dgram-pair-{flags}"] == "EPERM"
    for name, how in results.items():
        if name.startswith(("stream-", "seqpacket-")) and how == "ok":
            # only a seqpacket send, whose address Linux ignores (it goes to the peer)
            assert name.startswith("seqpacket-") and name.endswith(("-sendto", "-sendmsg")), name
    assert results["unix-socket"] == "EAFNOSUPPORT"
    assert results["vsock"] == "EAFNOSUPPORT"
    assert results["netlink-audit"] == "EPROTONOSUPPORT"
    assert results["netlink-uevent"] == "EPROTONOSUPPORT"
    assert results["netlink-route"] == "ok"


@sandboxed
async def test_the_listeners_can_be_reached_from_the_host(listeners) -> None:
    """The control: the same datagram from the host reaches the DGRAM listener and
    a connect the STREAM one, so the suite above can fail."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.sendto(b"hello", listeners.path("dgram"))
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(listeners.path("stream"))
    s.close()
    c.close()
    for _ in range(100):
        if len(listeners.got) >= 2:
            break
        threading.Event().wait(0.05)
    assert sorted(listeners.got) == ["dgram: datagram b'hello'", "stream: connection"]


_PIPES = r"""
import asyncio, multiprocessing as mp, socket

def child(conn):
    conn.send(conn.recv() * 2)

if __name__ == "__main__":
    a, b = mp.Pipe()
    a.send(20)
    print("pipe", b.recv() + 1)
    ctx = mp.get_context("fork")
    parent, kid = ctx.Pipe()
    p = ctx.Process(target=child, args=(kid,))
    p.start()
    parent.send(21)
    print("process", parent.recv())
    p.join()
    q = ctx.Queue()
    q.put("queued")
    print("queue", q.get(timeout=10))

    async def main():
        x, y = socket.socketpair()
        r1, w1 = await asyncio.open_unix_connection(sock=x)
        r2, w2 = await asyncio.open_unix_connection(sock=y)
        w1.write(b"ping\n")
        await w1.drain()
        line = await r2.readline()
        proc = await asyncio.create_subprocess_exec("echo", "sub", stdout=asyncio.subprocess.PIPE)
        sub, _ = await proc.communicate()
        got = await asyncio.get_running_loop().run_in_executor(None, lambda: "thread")
        w1.close(); w2.close()
        return line.decode().strip(), sub.decode().strip(), got

    print("asyncio", *asyncio.run(main()))
"""


@sandboxed
async def test_pipes_and_asyncio_work_without_network(coord) -> None:
    """With network off, multiprocessing's Pipe, a Process talking over one, a
    Queue, and an asyncio loop (its self-pipe, streams over a socketpair, a
    subprocess, an executor) all work: stream socketpairs stay allowed."""
    rc, out, err = await _python(coord, _PIPES)
    assert rc == 0, err
    assert out.splitlines() == ["pipe 21", "process 42", "queue queued",
                                "asyncio ping sub thread"], out + err


@sandboxed
@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_node_child_process_works_without_network(coord) -> None:
    """With network off, node runs a child process and reads its output (libuv's
    stream socketpairs)."""
    scope = coord.scopes.get("a") or await coord.root.fork("a")
    code = ("const {execFileSync, spawn} = require('child_process');"
            "const c = spawn('echo', ['kid']);"
            "c.stdout.on('data', d => process.stdout.write('spawn ' + d));"
            "c.on('close', () => console.log('sync ' + execFileSync('echo', ['x']).toString()"
            ".trim()));")
    r = await scope.exec([shutil.which("node") or "node", "-e", code])
    out = r.outcome
    assert isinstance(out, ExecOutcome)
    text = coord.trace.blob(out.stdout).decode()
    assert out.returncode == 0, coord.trace.blob(out.stderr).decode()
    assert text.splitlines() == ["spawn kid", "sync x"]

