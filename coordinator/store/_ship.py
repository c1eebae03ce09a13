"""Shipping a trace between processes: every object as one git pack, plus its refs.

A rollout worker on another machine (`agents.rollouts` on Ray) starts from a copy of the
driver's trace and sends back what it added. A git bundle would not do: it carries what
the refs reach, and the trace keeps blobs that only effect records name (model requests,
blocked writes), unreachable by design. So the pack here holds every object of the
repository (`git cat-file --batch-all-objects`), or every object but a given set (what
the receiver already has), after a checkpoint has moved the journal's objects into it.
The receiver indexes the pack into its own objects (`git index-pack`) and moves the refs
through its journal, so the trace it holds open sees them at once.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..records._errors import StateError
from ._trace import Trace

__all__ = ["export_pack", "import_pack", "object_ids", "ref_targets"]


def _git(trace: Trace, *argv: str, stdin: bytes | None = None) -> bytes:
    ran = subprocess.run(["git", "--git-dir", str(trace.path), *argv], input=stdin,
                         capture_output=True)
    if ran.returncode != 0:
        raise StateError(f"git {argv[0]} failed in {trace.path}: "
                         f"{ran.stderr.decode(errors='replace').strip()}")
    return ran.stdout


def object_ids(trace: Trace) -> set[str]:
    """Every object id the repository holds, after a checkpoint (blocking)."""
    trace.checkpoint()
    out = _git(trace, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    return set(out.decode().split())


def ref_targets(trace: Trace, prefix: str = "refs/") -> dict[str, str]:
    """Every ref under `prefix` and the commit it names, the journal's moves included."""
    found = {}
    for name in trace.refs(prefix):
        target = trace.ref(name)
        if target is not None:
            found[name] = target
    return found


def export_pack(trace: Trace, without: Iterable[str] = ()) -> tuple[bytes, set[str]]:
    """A pack of every object of the trace but those in `without`, and the ids it holds
    (blocking). Objects are whole or deltas against others in the pack: never thin."""
    have = object_ids(trace)
    wanted = sorted(have - set(without))
    if not wanted:
        return b"", set()
    pack = _git(trace, "pack-objects", "--stdout", "-q", stdin="\n".join(wanted).encode()
                + b"\n")
    return pack, set(wanted)


def import_pack(trace: Trace, pack: bytes, refs: Mapping[str, str] | None = None) -> None:
    """Add the objects of `pack` (from `export_pack`) to the trace and move `refs`
    (name -> object) there, as one journal move (blocking). Raises StateError for a
    broken pack or a ref to an object the trace then lacks."""
    if pack:
        target = trace.path / "objects" / "pack"
        target.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha1(pack).hexdigest()
        fd, tmp = tempfile.mkstemp(prefix="tmp-ship-", suffix=".pack", dir=target)
        with os.fdopen(fd, "wb") as f:
            f.write(pack)
        final = target / f"pack-ship-{name}.pack"
        try:
            _git(trace, "index-pack", "-o", str(final.with_suffix(".idx")), tmp)
            os.rename(tmp, final)
        finally:
            Path(tmp).unlink(missing_ok=True)
    if refs:
        for name, commit in refs.items():
            if trace.repo.get(commit) is None:
                raise StateError(f"ref {name} names {commit[:12]}, which the pack lacks")
        moves: dict[str, str | None] = dict(refs)
        trace.journal.move_refs(moves)
