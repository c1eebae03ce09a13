"""Long histories, many scopes and a writer that never pauses: the rows of
`corral bench substrate --history ... --scopes ... --saturate N`.

- history axis: one scope with N write effects (1k, 10k, 50k): write latency
  at the end, rewind 10 steps, the first page of its log and a page from the
  middle, the whole log (as a list, and streamed: its first record, and all
  of it read and dropped), a checkpoint after one write, RSS at the start, its
  peak, after the writes and after a checkpoint (each split into anonymous
  memory, the heap and libgit2's caches, and file-backed, mapped packs and
  libraries), and reopening after a SIGKILL (time and RSS);
- scope-count axis: N live scopes (1 to 256): a checkpoint after one write in
  each, fork + discard, one write, and a discard while such a checkpoint runs
  on a thread of its own (as the background one does: they share the GIL);
- saturating writer: one scope writing N effects back to back: writes/s,
  the journal's peak (bytes and objects), the longest checkpoint, the effects
  that waited for room in the journal and for how long (backpressure), RSS
  before, at peak and after, and reopening after a kill. Run twice: with the
  default journal bound and with a tight one (`saturate_bound` objects per
  generation), where the writer outruns the checkpoints on any machine, so
  the row shows it slowed down rather than the journal growing.

Each history length and the saturating writer run in their own process (a
fresh interpreter: RSS is theirs alone, and the kill is real). The snapshot is
the 10 MB synthetic checkout (2,000 source files); writes go to its files.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from coordinator import Coordinator, JournalBounds, Scope

from ._child import run_child
from ._synth import checkout, parse_size, source_paths

__all__ = ["render", "run", "run_history", "run_saturate", "run_scopes"]

CHECKOUT = "10MB"
REWIND_STEPS = 10
PAGE = 50
SATURATE_BOUND = 256
"""Objects per journal generation in the tight-bound saturating row (the
default bound is 16,384): ~50 writes, less than a checkpoint's fixed cost."""


def _status(field: str) -> float:
    """A /proc/self/status memory figure in MB (VmRSS, VmHWM, RssAnon, RssFile)."""
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _rss(out: dict[str, Any], label: str) -> None:
    """Record RSS now as `rss_<label>_mb`, split into `..._anon_mb` (heap,
    libgit2's caches) and `..._file_mb` (mapped pack data and libraries)."""
    out[f"rss_{label}_mb"] = _status("VmRSS")
    out[f"rss_{label}_anon_mb"] = _status("RssAnon")
    out[f"rss_{label}_file_mb"] = _status("RssFile")


def _ms(samples: Sequence[float]) -> float:
    return round(statistics.median(samples) * 1e3, 3)


def _files(cache: Path | None) -> tuple[Path, list[str]]:
    spec = parse_size(CHECKOUT)
    return checkout(spec, cache, progress=False), source_paths(spec)


async def _timed(op: Any) -> float:
    t = time.perf_counter()
    await op
    return time.perf_counter() - t


def _journal_figures(coord: Coordinator) -> dict[str, Any]:
    reg = coord.metrics.registry
    waits = reg.get_sample_value("corral_trace_backpressure_seconds_count")
    seconds = reg.get_sample_value("corral_trace_backpressure_seconds_sum")
    return {
        "backpressure_waits": None if waits is None else int(waits),
        "backpressure_s": None if seconds is None else round(seconds, 3),
    }


# -- child processes --------------------------------------------------------------


async def _history(n: int, state: Path, cache: Path | None) -> dict[str, Any]:
    repo, files = _files(cache)
    out: dict[str, Any] = {"effects": n}
    async with Coordinator.open(state, repo=repo) as coord:
        a = await coord.root.fork("a")
        await coord.checkpoint()
        _rss(out, "start")
        tail: list[float] = []
        middle = ""
        for i in range(n):
            t = time.perf_counter()
            r = await a.write(files[i % len(files)], f"effect {i}\n".encode())
            if i >= n - 200:
                tail.append(time.perf_counter() - t)
            if i == n // 2:
                middle = r.commit or ""
        out["write_ms"] = _ms(tail)
        out["rss_peak_mb"] = _status("VmHWM")
        _rss(out, "after_writes")
        await coord.checkpoint()
        _rss(out, "after_checkpoint")
        out["rewind_ms"] = _ms([await _timed(a.rewind(steps=REWIND_STEPS)) for _ in range(5)])
        trace = coord.trace
        if hasattr(trace, "log_page"):
            out["log_page_ms"] = _ms([await _timed(coord.io(trace.log_page, a.head, limit=PAGE))
                                      for _ in range(10)])
            out["log_page_middle_ms"] = _ms([
                await _timed(coord.io(trace.log_page, a.head, limit=PAGE, before=middle))
                for _ in range(5)])
        out["log_all_ms"] = _ms([await _timed(coord.io(trace.log, a.head))])
        out["log_all_us_per_record"] = round(out["log_all_ms"] * 1e3 / (n + 1), 1)
        if hasattr(trace, "stream"):
            def first() -> None:
                next(trace.stream(a.head))

            def drain() -> None:
                for _ in trace.stream(a.head):
                    pass

            out["log_first_ms"] = _ms([await _timed(coord.io(first)) for _ in range(3)])
            out["log_stream_ms"] = _ms([await _timed(coord.io(drain))])
            out["log_stream_us_per_record"] = round(out["log_stream_ms"] * 1e3 / (n + 1), 1)
        cps = []
        for k in range(5):
            await a.write(files[k], f"one more {k}\n".encode())
            cps.append(await _timed(coord.checkpoint()))
        out["checkpoint_one_write_ms"] = _ms(cps)
        _rss(out, "end")
        for k in range(20):  # something for the journal to replay
            await a.write(files[k], f"after the checkpoint {k}\n".encode())
        _emit(out)
        os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


async def _saturate(n: int, state: Path, cache: Path | None, bound: int) -> dict[str, Any]:
    repo, files = _files(cache)
    bounds = JournalBounds(checkpoint_objects=bound) if bound else JournalBounds()
    out: dict[str, Any] = {"effects": n, "bound_objects": bounds.checkpoint_objects,
                           "bound_mib": round(bounds.checkpoint_bytes / 2**20, 1)}
    async with Coordinator.open(state, repo=repo, journal=bounds) as coord:
        journal = coord.trace.journal
        checkpoints: list[tuple[float, int]] = []
        metrics_hook = journal.on_checkpoint

        def seen(seconds: float, objects: int) -> None:
            checkpoints.append((seconds, objects))
            if metrics_hook is not None:
                metrics_hook(seconds, objects)

        journal.on_checkpoint = seen
        a = await coord.root.fork("a")
        await coord.checkpoint()
        checkpoints.clear()
        journal.peak_bytes = journal.peak_objects = 0
        _rss(out, "start")
        t = time.perf_counter()
        for i in range(n):
            await a.write(f"d{i % 16}/{files[i % len(files)]}", f"effect {i}\n".encode())
        elapsed = time.perf_counter() - t
        out["writes_per_s"] = round(n / elapsed)
        out["rss_peak_mb"] = _status("VmHWM")
        _rss(out, "after_writes")
        out["journal_peak_mb"] = round(journal.peak_bytes / 2**20, 2)
        out["journal_peak_objects"] = journal.peak_objects
        during = list(checkpoints)
        await coord.checkpoint()
        _rss(out, "after_checkpoint")
        out["checkpoints_during"] = len(during)
        out["checkpoint_max_s"] = round(max((s for s, _ in checkpoints), default=0.0), 2)
        out["checkpoint_max_objects"] = max((o for _, o in checkpoints), default=0)
        out.update(_journal_figures(coord))
        for k in range(20):
            await a.write(files[k], f"after the checkpoint {k}\n".encode())
        _emit(out)
        os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


async def _reopen(state: Path) -> dict[str, Any]:
    t = time.perf_counter()
    async with Coordinator.open(state) as coord:
        opened = time.perf_counter() - t
        out = {"reopen_s": round(opened, 3), "scopes": len(coord.scopes)}
        _rss(out, "after_reopen")
        return out


def _emit(out: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def _child(args: Sequence[str], timeout: float) -> dict[str, Any]:
    return run_child("bench.scaling", args, timeout)


def run_history(lengths: Sequence[int], cache: Path | None = None) -> list[dict[str, Any]]:
    """The history-length axis: one row per length (see the module doc)."""
    rows = []
    for n in lengths:
        state = Path(tempfile.mkdtemp(prefix=f"corral-bench-history-{n}-"))
        try:
            row = _child(["history", str(n), str(state), str(cache or "")], timeout=7200)
            row.update(_child(["reopen", str(state)], timeout=600))
            rows.append(row)
        finally:
            shutil.rmtree(state, ignore_errors=True)
    return rows


def run_saturate(n: int, cache: Path | None = None,
                 bound: int = SATURATE_BOUND) -> list[dict[str, Any]]:
    """The saturating writer (see the module doc): a row with the default
    journal bound, and one with `bound` objects per generation (0: none)."""
    rows = []
    for objects in (0, bound) if bound else (0,):
        state = Path(tempfile.mkdtemp(prefix="corral-bench-saturate-"))
        try:
            row = _child(["saturate", str(n), str(state), str(cache or ""), str(objects)],
                         timeout=7200)
            row.update(_child(["reopen", str(state)], timeout=600))
            rows.append(row)
        finally:
            shutil.rmtree(state, ignore_errors=True)
    return rows


async def _scopes_async(counts: Sequence[int], cache: Path | None,
                        rounds: int) -> list[dict[str, Any]]:
    repo, files = _files(cache)
    rows = []
    for count in counts:
        state = Path(tempfile.mkdtemp(prefix=f"corral-bench-scopes-{count}-"))
        try:
            async with Coordinator.open(state, repo=repo) as coord:
                scopes: list[Scope] = [await coord.root.fork(f"s{i}") for i in range(count)]
                await coord.checkpoint()
                cps, writes = [], []
                for r in range(rounds):
                    for i, s in enumerate(scopes):
                        t = time.perf_counter()
                        await s.write(files[(i + r) % len(files)], f"round {r}\n".encode())
                        writes.append(time.perf_counter() - t)
                    cps.append(await _timed(coord.checkpoint()))
                forks, discards = [], []
                for r in range(rounds * 4):
                    t = time.perf_counter()
                    child = await coord.root.fork(f"extra{r}")
                    forks.append(time.perf_counter() - t)
                    discards.append(await _timed(child.discard()))
                during = []
                for r in range(rounds * 2):
                    for i, s in enumerate(scopes):
                        await s.write(files[(i + r) % len(files)], f"again {r}\n".encode())
                    child = await coord.root.fork(f"during{r}")
                    # As the background checkpoint does: on a thread of its own.
                    started = threading.Event()

                    def checkpoint(started: threading.Event = started) -> None:
                        started.set()
                        coord.trace.checkpoint()

                    running = asyncio.ensure_future(asyncio.to_thread(checkpoint))
                    await asyncio.to_thread(started.wait)
                    during.append(await _timed(child.discard()))
                    await running
                rows.append({
                    "scopes": count,
                    "checkpoint_ms": _ms(cps),
                    "checkpoint_max_ms": round(max(cps) * 1e3, 1),
                    "write_ms": _ms(writes),
                    "fork_ms": _ms(forks),
                    "discard_ms": _ms(discards),
                    "discard_in_checkpoint_ms": _ms(during),
                    "discard_in_checkpoint_max_ms": round(max(during) * 1e3, 1),
                    "registered": len(coord.scopes),
                })
        finally:
            shutil.rmtree(state, ignore_errors=True)
    return rows


def run_scopes(counts: Sequence[int], cache: Path | None = None,
               rounds: int = 5) -> list[dict[str, Any]]:
    """The scope-count axis: one row per count (see the module doc)."""
    return asyncio.run(_scopes_async(counts, cache, rounds))


def run(history: Sequence[int] = (), scopes: Sequence[int] = (), saturate: int = 0,
        cache: Path | None = None, saturate_bound: int = SATURATE_BOUND) -> dict[str, Any]:
    """Every axis asked for, as a JSON-ready report (`saturate`: a list of rows,
    the default journal bound first, then `saturate_bound` objects)."""
    report: dict[str, Any] = {}
    if history:
        report["history"] = run_history(history, cache)
    if scopes:
        report["scopes"] = run_scopes(scopes, cache)
    if saturate:
        report["saturate"] = run_saturate(saturate, cache, saturate_bound)
    return report


_RSS_ROWS = (
    ("start", "RSS at start, MB (anon + file)"),
    ("after_writes", "RSS after the writes, MB"),
    ("after_checkpoint", "RSS after a checkpoint, MB"),
    ("after_reopen", "RSS after reopen, MB"),
)


def _rss_cell(row: dict[str, Any], label: str) -> str:
    total = row.get(f"rss_{label}_mb")
    if total is None:
        return "—"
    anon, file = row.get(f"rss_{label}_anon_mb"), row.get(f"rss_{label}_file_mb")
    return f"{total:g}" if anon is None else f"{total:g} ({anon:g} + {file:g})"


def _cell(row: dict[str, Any], key: str, fmt: str = "{:g}") -> str:
    value = row.get(key)
    return "—" if value is None else fmt.format(value)


def render(report: dict[str, Any]) -> list[Table]:
    """The report as rich tables: history axis, scope axis, saturating writer."""
    tables = []
    rows = report.get("history")
    if rows:
        t = Table(title="Long histories: one scope with N write effects (ms unless stated)")
        t.add_column("measure")
        for row in rows:
            t.add_column(f"{row['effects']:,}", justify="right")
        for key, label in (
            ("write_ms", "write (p50 of the last 200)"),
            ("rewind_ms", f"rewind {REWIND_STEPS} steps"),
            ("log_page_ms", f"log page of {PAGE}, newest"),
            ("log_page_middle_ms", f"log page of {PAGE}, mid-branch cursor"),
            ("log_all_ms", "whole log, oldest first (Trace.log: a list)"),
            ("log_all_us_per_record", "  per record, µs"),
            ("log_first_ms", "first record of the streamed log (Trace.stream)"),
            ("log_stream_ms", "whole streamed log, nothing held"),
            ("log_stream_us_per_record", "  per record, µs"),
            ("checkpoint_one_write_ms", "checkpoint after one write"),
            ("reopen_s", "reopen after SIGKILL, s"),
            ("rss_peak_mb", "RSS peak, MB"),
        ):
            t.add_row(label, *(_cell(r, key) for r in rows))
        for key, label in _RSS_ROWS:
            t.add_row(label, *(_rss_cell(r, key) for r in rows))
        tables.append(t)
    rows = report.get("scopes")
    if rows:
        t = Table(title="Many scopes: one write in each, then a checkpoint (ms)")
        for col in ("live scopes", "checkpoint p50", "checkpoint max", "write p50", "fork p50",
                    "discard p50", "discard in a checkpoint p50 / max", "registered after"):
            t.add_column(col, justify="right")
        for r in rows:
            t.add_row(str(r["scopes"]), _cell(r, "checkpoint_ms"), _cell(r, "checkpoint_max_ms"),
                      _cell(r, "write_ms"), _cell(r, "fork_ms"), _cell(r, "discard_ms"),
                      f"{_cell(r, 'discard_in_checkpoint_ms')} / "
                      f"{_cell(r, 'discard_in_checkpoint_max_ms')}",
                      _cell(r, "registered"))
        tables.append(t)
    rows = report.get("saturate")
    if rows:
        t = Table(title=f"Saturating writer: {rows[0]['effects']:,} writes back to back")
        t.add_column("measure")
        for r in rows:
            t.add_column(f"bound {r['bound_objects']:,} objects", justify="right")
        for key, label in (
            ("writes_per_s", "writes/s"),
            ("journal_peak_mb", "journal peak, MiB"),
            ("journal_peak_objects", "journal peak, objects"),
            ("checkpoints_during", "checkpoints during the burst"),
            ("checkpoint_max_s", "longest checkpoint, s"),
            ("checkpoint_max_objects", "largest checkpoint, objects"),
            ("backpressure_waits", "effects that waited (backpressure)"),
            ("backpressure_s", "time they waited, s"),
            ("reopen_s", "reopen after SIGKILL, s"),
        ):
            t.add_row(label, *(_cell(r, key, "{:,.3g}" if key.endswith("_s") else "{:,}")
                               for r in rows))
        t.add_row("RSS peak, MB", *(_cell(r, "rss_peak_mb") for r in rows))
        for key, label in _RSS_ROWS:
            t.add_row(label, *(_rss_cell(r, key) for r in rows))
        tables.append(t)
    return tables


def _main(argv: Sequence[str]) -> None:
    what, *rest = argv
    if what == "reopen":
        _emit(asyncio.run(_reopen(Path(rest[0]))))
        return
    n, state, cache = int(rest[0]), Path(rest[1]), Path(rest[2]) if rest[2] else None
    if what == "history":
        asyncio.run(_history(n, state, cache))
    else:
        asyncio.run(_saturate(n, state, cache, int(rest[3])))


if __name__ == "__main__":
    from coordinator.store import one_arena

    one_arena()  # as `corral` itself runs (the figures are the server's)
    _main(sys.argv[1:])
