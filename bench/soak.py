"""The soak: many scopes working for minutes, and what the coordinator holds
meanwhile — RSS, open file descriptors (and those to deleted files), frozen
layers per workspace, mounts, the journal, packs, registered scopes.

    corral bench soak --scopes 64 --minutes 10 [--json FILE]

Each scope's agent loops: write a file (most steps), run a command that
changes two files (1 in 20), rewind 1-3 steps (1 in 25), fork a child and
discard it (1 in 30: a fork freezes the scope's dirty layer), and now and
then (1 in 200) discard itself and start again from a fresh fork of root.
Every `--every` seconds a sample is taken; at the end the coordinator is
killed (SIGKILL) and the state directory reopened, timed. The whole run is
one child process, so its RSS is the coordinator's alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from coordinator import Coordinator, CorralError, Scope
from sandboxes import exec_base

from ._child import run_child
from ._synth import checkout, parse_size, source_paths

__all__ = ["render", "run"]


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _fds() -> tuple[int, int]:
    """Open file descriptors, and how many point at deleted files."""
    total = deleted = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        total += 1
        deleted += target.endswith("(deleted)")
    return total, deleted


def _mounts(state: Path) -> int:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return sum(1 for line in f if str(state) in line)


def _descendants() -> list[int]:
    """Pids of every process below this one (its warm sandboxes' bwrap, launchers
    and commands)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _sandboxes() -> tuple[int, float]:
    """Warm sandboxes running (bubblewrap processes in this pid namespace) and the
    resident memory of every process below this one, in MB (PSS)."""
    host = os.readlink("/proc/self/ns/pid")
    boxes, pss = 0, 0
    for pid in _descendants():
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == host and \
                    open(f"/proc/{pid}/comm", encoding="utf-8").read().strip() == "bwrap":
                boxes += 1
            with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
                pss += sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except OSError:
            continue
    return boxes, round(pss / 1024, 1)


def _cgroups(pid: int) -> int:
    """The command cgroups of the process `pid` that exist now."""
    return sum(1 for _ in Path("/sys/fs/cgroup").rglob(f"corral-exec-{pid}-*"))


def _layers(coord: Coordinator) -> tuple[int, int]:
    """The most frozen layers under one workspace, and the layer dirs on disk."""
    deepest = max((len(getattr(s.workspace, "lowers", ())) for s in coord.scopes.values()),
                  default=0)
    state = getattr(coord.backend, "_state", None)
    frozen = state / "L" if isinstance(state, Path) else None
    on_disk = sum(1 for _ in frozen.iterdir()) if frozen is not None and frozen.is_dir() else 0
    return deepest, on_disk


def _sample(coord: Coordinator, start: float, effects: int) -> dict[str, Any]:
    fds, deleted = _fds()
    deepest, layer_dirs = _layers(coord)
    boxes, below_mb = _sandboxes()
    packs = len(list((coord.trace.path / "objects" / "pack").glob("*.pack")))
    journal = coord.trace.journal
    return {
        "t_s": round(time.perf_counter() - start, 1),
        "effects": effects,
        "rss_mb": _rss_mb(),
        "fds": fds,
        "fds_deleted": deleted,
        "layers_max": deepest,
        "layer_dirs": layer_dirs,
        "mounts": _mounts(coord.state),
        "sandboxes": boxes,
        "sandbox_pss_mb": below_mb,
        "cgroups": _cgroups(os.getpid()),
        "journal_mb": round(journal.held_bytes / 2**20, 2),
        "packs": packs,
        "registered_scopes": len(coord.scopes),
    }


async def _agent(coord: Coordinator, name: str, files: list[str], stop: float,
                 counter: list[int], rng: random.Random) -> None:
    scope: Scope = await coord.root.fork(name)
    incarnation = 0
    step = 0
    while time.perf_counter() < stop:
        step += 1
        roll = rng.random()
        try:
            if roll < 0.005:
                await scope.discard()
                incarnation += 1
                scope = await coord.root.fork(f"{name}r{incarnation}")
            elif roll < 0.04:
                child = await scope.fork(f"{scope.name}c{step}")
                await child.write(rng.choice(files), b"child\n")
                await child.discard()
            elif roll < 0.08:
                if step > 4:
                    await scope.rewind(steps=rng.randint(1, 3))
            elif roll < 0.13:
                a, b = rng.sample(files, 2)
                await scope.exec(["sh", "-c", f"echo {step} > '{a}'; echo {step} >> '{b}'"])
            else:
                await scope.write(rng.choice(files), f"{name} step {step}\n".encode())
            counter[0] += 1
        except CorralError as e:  # a rewind past the fork point and the like
            if "rewind" not in str(e).lower():
                raise
        await asyncio.sleep(0)


async def _soak(scopes: int, seconds: float, every: float, state: Path,
                cache: Path | None) -> dict[str, Any]:
    spec = parse_size("10MB")
    repo = checkout(spec, cache, progress=False)
    files = source_paths(spec)[:400]
    samples: list[dict[str, Any]] = []
    counter = [0]
    async with Coordinator.open(state, repo=repo) as coord:
        start = time.perf_counter()
        stop = start + seconds
        samples.append(_sample(coord, start, 0))
        rng = random.Random(7)
        agents = [asyncio.create_task(
            _agent(coord, f"a{i}", files, stop, counter, random.Random(rng.random())))
            for i in range(scopes)]
        while time.perf_counter() < stop:
            await asyncio.sleep(min(every, max(0.0, stop - time.perf_counter())))
            samples.append(_sample(coord, start, counter[0]))
        await asyncio.gather(*agents)
        samples.append(_sample(coord, start, counter[0]))
        await coord.checkpoint()
        after = _sample(coord, start, counter[0])
        reg = coord.metrics.registry
        out = {
            "scopes": scopes, "seconds": seconds, "effects": counter[0],
            "samples": samples, "after_checkpoint": after,
            "backpressure_waits": reg.get_sample_value(
                "corral_trace_backpressure_seconds_count"),
        }
        for k in range(10):  # something for the journal to replay
            await coord.root.write(files[k], f"after {k}\n".encode())
        # killed mid-command: what its sandboxes leave is counted after the reopen
        busy = await coord.root.fork("killed-mid-command")
        running = asyncio.create_task(busy.exec(["sleep", "600"], timeout=900))
        await asyncio.sleep(1.0)
        out["killed_pid"] = os.getpid()
        root = getattr(coord.backend, "root", None)  # every backend here has one
        out["exec_base"] = str(exec_base(root)) if root is not None and os.geteuid() == 0 else ""
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        await running
    raise AssertionError("unreachable")


async def _reopen(state: Path, killed: int, base: str) -> dict[str, Any]:
    t = time.perf_counter()
    async with Coordinator.open(state) as coord:
        reopened: dict[str, Any] = {"reopen_s": round(time.perf_counter() - t, 3),
                    "rss_after_reopen_mb": _rss_mb(), "scopes_after_reopen": len(coord.scopes)}
        # what the killed coordinator left: its sandboxes' processes (given 5 s to
        # finish dying: bubblewrap's die-with-parent is a signal), cgroups, mounts
        def left() -> int:
            return sum(1 for p in os.listdir("/proc") if p.isdigit() and base
                       and int(p) != os.getpid()  # this process is given `base` itself
                       and _cmdline_has(int(p), base))

        deadline = time.monotonic() + 5
        while left() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        reopened["left_after_kill"] = {
            "processes": left(),
            "cgroups": _cgroups(killed),
            "mounts": sum(1 for m in _mount_points() if base and m.startswith(base + "/")),
        }
        return reopened


def _cmdline_has(pid: int, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return [line.split()[4] for line in f]


def _child(args: Sequence[str], timeout: float) -> dict[str, Any]:
    return run_child("bench.soak", args, timeout)


def run(scopes: int = 64, minutes: float = 10.0, every: float = 30.0,
        cache: Path | None = None) -> dict[str, Any]:
    """Soak `scopes` agents for `minutes`; returns the samples and the reopen."""
    state = Path(tempfile.mkdtemp(prefix="corral-bench-soak-"))
    try:
        seconds = minutes * 60
        report = _child(["soak", str(scopes), str(seconds), str(every), str(state),
                         str(cache or "")], timeout=seconds + 1800)
        report.update(_child(["reopen", str(state), str(report["killed_pid"]),
                              report["exec_base"]], timeout=900))
        return report
    finally:
        subprocess.run(["umount", "-R", "-l", str(state / "ws")], capture_output=True)
        shutil.rmtree(state, ignore_errors=True)


def render(report: dict[str, Any]) -> Table:
    """The samples as a table, with the reopen after the kill below it."""
    t = Table(title=f"Soak: {report['scopes']} scopes for {report['seconds'] / 60:g} min, "
                    f"{report['effects']:,} effects; reopen after SIGKILL "
                    f"{report['reopen_s']:.2f} s, RSS after reopen "
                    f"{report['rss_after_reopen_mb']:g} MB")
    cols = ("t_s", "effects", "rss_mb", "fds", "fds_deleted", "layers_max", "layer_dirs",
            "mounts", "sandboxes", "sandbox_pss_mb", "cgroups", "journal_mb", "packs",
            "registered_scopes")
    for col in cols:
        t.add_column(col, justify="right")
    for s in [*report["samples"], {**report["after_checkpoint"], "t_s": "checkpoint"}]:
        t.add_row(*(str(s[c]) for c in cols))
    left = report.get("left_after_kill")
    if left is not None:
        t.caption = (f"left by the SIGKILLed coordinator after the reopen: {left['processes']} "
                     f"processes, {left['cgroups']} cgroups, {left['mounts']} mounts")
    return t


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    what, *rest = args
    if what == "reopen":
        reopened = asyncio.run(_reopen(Path(rest[0]), int(rest[1]), rest[2] if len(rest) > 2
                                       else ""))
        sys.stdout.write(json.dumps(reopened) + "\n")
        return 0
    scopes, seconds, every = int(rest[0]), float(rest[1]), float(rest[2])
    asyncio.run(_soak(scopes, seconds, every, Path(rest[3]), Path(rest[4]) if rest[4] else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
