"""The seccomp filter every command runs under: classic BPF, built here with struct.

In the spirit of Flatpak's and Claude Code's Linux sandboxes: the command may
use any system call but those that reach past its namespaces or into the
kernel's shared state. Denied calls fail with an errno (EPERM, or ENOSYS where
libc then falls back to an older call); a call from a foreign ABI (i386 via
`int 0x80`, x32) kills the process, since its numbers mean other calls.

Denied, always:

- mounts: mount, umount2, pivot_root and the new mount API (open_tree,
  move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr);
- new namespaces: unshare, setns, clone with any CLONE_NEW* flag; clone3
  answers ENOSYS (its flags sit in memory a filter cannot read; glibc then
  uses clone);
- the kernel's shared state: keyctl, add_key, request_key, bpf,
  perf_event_open, userfaultfd, kexec_load, kexec_file_load, init_module,
  finit_module, delete_module, reboot, swapon, swapoff, syslog, acct,
  quotactl, vhangup, open_by_handle_at;
- other processes: ptrace, process_vm_readv, process_vm_writev;
- io_uring (its operations bypass this filter);
- ioctl TIOCSTI and TIOCLINUX (pushing keystrokes into a terminal).

Denied without network (the command has its own network namespace, holding
only its loopback):

- socket() of any family but AF_INET, AF_INET6 and AF_NETLINK: no AF_UNIX
  (a host Unix socket in a directory the command sees, e.g. a declared
  toolchain directory, could be connected to: a read-only bind does not stop
  a connect), no AF_VSOCK (the hypervisor's host), no AF_PACKET, AF_ALG...;
- AF_NETLINK for every protocol but NETLINK_ROUTE (0): glibc's getaddrinfo and
  getifaddrs use it, and in the private namespace it sees only the sandbox's
  own interfaces; the others (audit, uevents, netfilter...) reach the host
  kernel's shared state;
- socketpair() but AF_UNIX SOCK_STREAM and SOCK_SEQPACKET (SOCK_NONBLOCK and
  SOCK_CLOEXEC allowed): a datagram socketpair is unconnected enough to
  `sendto` any path. Stream and seqpacket pairs are connected at birth, and
  stay so after shutdown() or the peer's close, so Linux refuses a connect
  (EISCONN) and an address on send (EISCONN/EOPNOTSUPP; seqpacket ignores it
  and sends to the peer): Python's multiprocessing and asyncio and node's
  pipes, which use them, keep working.
"""

from __future__ import annotations

import errno
import platform
import struct

__all__ = ["seccomp_filter"]

# struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6]
_NR, _ARCH, _ARG0, _ARG1, _ARG2 = 0, 4, 16, 24, 32

_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

_KILL_PROCESS = 0x80000000
_ALLOW = 0x7FFF0000


def _errno(e: int) -> int:
    return 0x00050000 | e


_CLONE_NEW = 0x7E020000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK = 1, 2, 10, 16
_NETLINK_ROUTE = 0
_SOCK_STREAM, _SOCK_SEQPACKET = 1, 5
_SOCK_FLAGS = 0x800 | 0x80000  # SOCK_NONBLOCK | SOCK_CLOEXEC (same on x86_64 and aarch64)

# (audit arch, x32 bit or 0, syscall numbers by name)
_ARCHES: dict[str, tuple[int, int, dict[str, int]]] = {
    "x86_64": (0xC000003E, 0x40000000, {
        "mount": 165, "umount2": 166, "pivot_root": 155, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "unshare": 272, "setns": 308, "clone": 56, "clone3": 435,
        "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "reboot": 169, "swapon": 167,
        "swapoff": 168, "syslog": 103, "acct": 163, "quotactl": 179, "vhangup": 153,
        "open_by_handle_at": 304, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "ioctl": 16, "socket": 41, "socketpair": 53,
    }),
    "aarch64": (0xC00000B7, 0, {
        "mount": 40, "umount2": 39, "pivot_root": 41, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "unshare": 97, "setns": 268, "clone": 220, "clone3": 435,
        "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "reboot": 142, "swapon": 224,
        "swapoff": 225, "syslog": 116, "acct": 89, "quotactl": 60, "vhangup": 58,
        "open_by_handle_at": 265, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "ioctl": 29, "socket": 198, "socketpair": 199,
    }),
}
_ENOSYS_CALLS = ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register")
_SPECIAL = ("clone", "ioctl", "socket", "socketpair")

_Insn = tuple[int, int, int, int]


def _stmt(code: int, k: int) -> _Insn:
    return (code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> _Insn:
    return (code, jt, jf, k)


def _arg_block(nr: int, offset: int, tests: list[tuple[int, int]], deny: int) -> list[_Insn]:
    """If the call is `nr`: load the low word of an argument; deny when any
    (jump code, value) test matches, else allow. Falls through for other calls."""
    body: list[_Insn] = [_stmt(_LD_ABS, offset)]
    for i, (code, value) in enumerate(tests):
        # on a match jump to the deny at the end; else try the next test
        body.append(_jump(code, value, len(tests) - i, 0))
    body.append(_stmt(_RET, _ALLOW))
    body.append(_stmt(_RET, _errno(deny)))
    return [_jump(_JEQ, nr, 0, len(body)), *body, _stmt(_LD_ABS, _NR)]


_Asm = list[_Insn | tuple[int, int | str, int | str, int] | str]
"""Instructions whose jump targets may be labels, and labels (a bare str)."""


def _assemble(asm: _Asm) -> list[_Insn]:
    """Resolve the labels of `asm` into relative jumps."""
    at: dict[str, int] = {}
    insns: list[tuple[int, int | str, int | str, int]] = []
    for item in asm:
        if isinstance(item, str):
            at[item] = len(insns)
        else:
            insns.append(item)
    out: list[_Insn] = []
    for i, (code, jt, jf, k) in enumerate(insns):
        t = at[jt] - i - 1 if isinstance(jt, str) else jt
        f = at[jf] - i - 1 if isinstance(jf, str) else jf
        assert 0 <= t < 256 and 0 <= f < 256, (t, f)
        out.append((code, t, f, k))
    return out


def _socket_block(nr: int) -> list[_Insn]:
    """socket() without network: AF_INET, AF_INET6 and NETLINK_ROUTE only."""
    return _assemble([
        (_JEQ, 0, "next", nr),
        _stmt(_LD_ABS, _ARG0),
        (_JEQ, "allow", 0, _AF_INET),
        (_JEQ, "allow", 0, _AF_INET6),
        (_JEQ, 0, "deny", _AF_NETLINK),
        _stmt(_LD_ABS, _ARG2),
        (_JEQ, "allow", "deny_protocol", _NETLINK_ROUTE),
        "allow", _stmt(_RET, _ALLOW),
        "deny", _stmt(_RET, _errno(errno.EAFNOSUPPORT)),
        "deny_protocol", _stmt(_RET, _errno(errno.EPROTONOSUPPORT)),
        "next", _stmt(_LD_ABS, _NR),
    ])


def _socketpair_block(nr: int) -> list[_Insn]:
    """socketpair() without network: AF_UNIX SOCK_STREAM or SOCK_SEQPACKET only
    (with SOCK_NONBLOCK or SOCK_CLOEXEC)."""
    return _assemble([
        (_JEQ, 0, "next", nr),
        _stmt(_LD_ABS, _ARG0),
        (_JEQ, 0, "deny", _AF_UNIX),
        _stmt(_LD_ABS, _ARG1),
        _stmt(_AND, ~_SOCK_FLAGS & 0xFFFFFFFF),
        (_JEQ, "allow", 0, _SOCK_STREAM),
        (_JEQ, "allow", "deny", _SOCK_SEQPACKET),
        "allow", _stmt(_RET, _ALLOW),
        "deny", _stmt(_RET, _errno(errno.EPERM)),
        "next", _stmt(_LD_ABS, _NR),
    ])


def seccomp_filter(*, network: bool, machine: str | None = None) -> bytes:
    """The filter program (an array of struct sock_filter) for bwrap's --seccomp.

    Raises OSError (ENOSYS) on an architecture it has no table for.
    """
    arch = machine or platform.machine()
    if arch not in _ARCHES:
        raise OSError(errno.ENOSYS, f"no seccomp table for architecture {arch!r}")
    audit_arch, x32_bit, nrs = _ARCHES[arch]
    prog: list[_Insn] = [
        _stmt(_LD_ABS, _ARCH),
        _jump(_JEQ, audit_arch, 1, 0),
        _stmt(_RET, _KILL_PROCESS),
        _stmt(_LD_ABS, _NR),
    ]
    if x32_bit:
        prog += [_jump(_JGE, x32_bit, 0, 1), _stmt(_RET, _KILL_PROCESS)]
    for name, nr in nrs.items():
        if name in _SPECIAL:
            continue
        e = errno.ENOSYS if name in _ENOSYS_CALLS else errno.EPERM
        prog += [_jump(_JEQ, nr, 0, 1), _stmt(_RET, _errno(e))]
    prog += _arg_block(nrs["clone"], _ARG0, [(_JSET, _CLONE_NEW)], errno.EPERM)
    prog += _arg_block(nrs["ioctl"], _ARG1, [(_JEQ, _TIOCSTI), (_JEQ, _TIOCLINUX)], errno.EPERM)
    if not network:
        prog += _socket_block(nrs["socket"])
        prog += _socketpair_block(nrs["socketpair"])
    prog.append(_stmt(_RET, _ALLOW))
    return b"".join(struct.pack("=HBBI", *insn) for insn in prog)
