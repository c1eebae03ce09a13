"""The trace's write-ahead journal: new objects and ref moves, kept in memory
and made durable by appending to a log; a checkpoint moves them into the git
repository as one pack.

Why not let libgit2 write them: it stores each object as its own file (a temp
file, a link, an unlink, often a fan-out mkdir, and a rescan of the pack
directory) and moves a ref through a lock file renamed into place. That is
about a hundred system calls per write effect, most of its time on a 2-core
machine. Here an effect costs one write(2): its new objects and its ref move,
appended to the journal together, so an effect is durable exactly when its ref
move is.

Durability is what it was with loose objects: nothing is fsynced, so an
acknowledged effect survives the process being killed (SIGKILL, a crash) but
not the machine losing power.

Layout, under `<trace.git>/corral-journal/`: one file per generation,
`<n>.log`. A record is `kind (1 byte) | length (4) | crc32 (4) | payload`:
`O` an object (`type (1) | oid (20) | data`), `R` a ref (`oid (20, zero =
deleted) | name`). Replay stops at the first torn or corrupt record: only the
write that was cut short by a kill can be torn, and it was never acknowledged.

Readers see one store: libgit2 asks the in-memory objects first (a Python odb
backend), then the packs and loose objects on disk. Refs not yet checkpointed
are an overlay the Trace consults before the refs on disk. Another process that
opens the trace replays the journal read-only, so it sees every acknowledged
effect too; plain `git` sees the trace as of the last checkpoint (at most
`CHECKPOINT_S` old while effects flow, exact once the coordinator closes).
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pygit2
from pygit2.enums import ObjectType

from ._errors import StateError

__all__ = ["CHECKPOINT_BYTES", "CHECKPOINT_S", "Journal"]

log = logging.getLogger("corral.journal")

CHECKPOINT_S = 2.0
"""Seconds between checkpoints while there is something to checkpoint."""
CHECKPOINT_BYTES = 32 << 20
"""Checkpoint early once this much object data waits in memory."""
MAX_PACKS = 16
"""Past this many packs, a checkpoint rolls the small ones up (git repack --geometric)."""

_HEADER = struct.Struct("<cII")  # kind, payload length, crc32 of payload
_ZERO = bytes(20)
_TYPE_NAMES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}


def object_id(type_: int, data: bytes) -> str:
    """The git object id of `data` stored as `type_` (pygit2's ObjectType)."""
    h = hashlib.sha1(b"%s %d\0" % (_TYPE_NAMES[type_], len(data)))
    h.update(data)
    return h.hexdigest()


class _MemoryBackend(pygit2.OdbBackend):
    """The journal's objects as a libgit2 odb backend (one per repository handle:
    libgit2 lets a backend belong to one odb). Writes land here, not on disk."""

    def __init__(self, journal: Journal) -> None:
        super().__init__()
        self._journal = journal
        self._objects = journal.objects

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        return self._objects[str(oid)]

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        type_, data = self._objects[str(oid)]
        return type_, len(data)

    def read_prefix_cb(self, prefix: str) -> tuple[int, bytes, pygit2.Oid]:
        full = self._journal.expand(prefix)
        type_, data = self._objects[full]
        return type_, data, pygit2.Oid(hex=full)

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        return str(oid) in self._objects

    def exists_prefix_cb(self, prefix: str) -> pygit2.Oid:
        return pygit2.Oid(hex=self._journal.expand(prefix))

    def write_cb(self, oid: pygit2.Oid, data: bytes, type_: int) -> None:
        self._journal.add_object(str(oid), type_, data)

    def refresh_cb(self) -> None:
        pass

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter([pygit2.Oid(hex=h) for h in list(self._objects)])


class Journal:
    """Objects and ref moves not yet checkpointed into the repository at `git_dir`.

    A writable journal (the coordinator's) appends and checkpoints; a read-only
    one (another process looking at the trace) only replays what is there.
    """

    def __init__(self, git_dir: Path, *, writable: bool) -> None:
        self.git_dir = git_dir
        self.dir = git_dir / "corral-journal"
        self.writable = writable
        self.objects: dict[str, tuple[int, bytes]] = {}
        """Object id (hex) -> (type, data), for objects not yet in a pack."""
        self.refs: dict[str, str | None] = {}
        """Ref name -> commit id, or None for deleted: moves not yet on disk."""
        self._unlogged: list[bytes] = []
        self._pending_bytes = 0  # since the last checkpoint started
        self.held_bytes = 0
        """Bytes of object data held in memory (not yet in a pack)."""
        self.on_checkpoint: Callable[[float, int], None] | None = None
        """Called after each checkpoint with its seconds and object count."""
        self._lock = threading.Lock()  # guards the dicts' updates and the log
        self._checkpoint_lock = threading.Lock()  # one checkpoint at a time
        self._fd: int | None = None
        self._generation = 0
        self._wake = threading.Condition(self._lock)
        self._closing = False
        self._thread: threading.Thread | None = None
        replayed = self._replay()
        if writable:
            self.dir.mkdir(exist_ok=True)
            if replayed:
                self._generation = replayed[-1] + 1
            self._open_generation()
            self._salvage_invalid_refs()
            if replayed:
                # What a killed coordinator left: into the repository now.
                self.checkpoint()

    def _salvage_invalid_refs(self) -> None:
        """Move replayed refs git refuses (a scope named `a..b` or `x.`, which
        versions before names were checked accepted) to a valid archive name:
        the checkpoint can then write them, and their history stays reachable."""
        for name, target in list(self.refs.items()):
            if pygit2.reference_is_valid_name(name):
                continue
            del self.refs[name]
            if target is not None:
                self.move_ref(f"refs/corral/archive/invalid-name-{target[:12]}", target)

    # -- recording ------------------------------------------------------------

    def add_object(self, oid: str, type_: int, data: bytes) -> None:
        """Keep an object; it is logged with the next ref move (or checkpoint)."""
        if oid in self.objects:
            return
        record = _record(b"O", struct.pack("<B", type_) + bytes.fromhex(oid) + data)
        with self._lock:
            if oid in self.objects:
                return
            self.objects[oid] = (type_, data)
            self._unlogged.append(record)
            self._pending_bytes += len(data)
            self.held_bytes += len(data)
            if self._pending_bytes >= CHECKPOINT_BYTES:
                self._wake.notify()

    def write_blob(self, data: bytes) -> str:
        """Store a blob without a trip through libgit2 (no existence probes)."""
        oid = object_id(ObjectType.BLOB, data)
        self.add_object(oid, ObjectType.BLOB, data)
        return oid

    def move_ref(self, name: str, oid: str | None) -> None:
        """Point `name` at `oid` (None deletes it). Durable when this returns,
        together with every object kept before it."""
        record = _record(b"R", (bytes.fromhex(oid) if oid else _ZERO) + name.encode())
        with self._lock:
            self._append([*self._unlogged, record])
            self._unlogged.clear()
            self.refs[name] = oid

    def _append(self, records: list[bytes]) -> None:
        if not self.writable or self._fd is None:
            raise StateError("the trace is open read-only here")
        buf = memoryview(b"".join(records))
        while buf:
            n = os.write(self._fd, buf)
            buf = buf[n:]

    # -- lookups --------------------------------------------------------------

    def expand(self, prefix: str) -> str:
        """The one kept object id starting with `prefix`; KeyError when none,
        ValueError when several (libgit2's not-found and ambiguous)."""
        prefix = prefix.lower()
        if len(prefix) == 40:
            if prefix in self.objects:
                return prefix
            raise KeyError(prefix)
        found = [o for o in list(self.objects) if o.startswith(prefix)]
        if not found:
            raise KeyError(prefix)
        if len(found) > 1:
            raise ValueError(f"ambiguous object id prefix {prefix}")
        return found[0]

    def backend(self) -> _MemoryBackend:
        return _MemoryBackend(self)

    # -- checkpoints ----------------------------------------------------------

    def start(self) -> None:
        """Checkpoint in the background every CHECKPOINT_S (sooner past
        CHECKPOINT_BYTES) while there is something to checkpoint."""
        if self.writable and self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="corral-checkpoint", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._wake.wait_for(
                    lambda: self._closing or self._pending_bytes >= CHECKPOINT_BYTES,
                    timeout=CHECKPOINT_S,
                )
                if self._closing:
                    return
            try:
                self.checkpoint()
            except Exception:  # the journal still holds it all: retry, and again at close
                log.exception("trace checkpoint failed; retrying in %.0f s", CHECKPOINT_S)
                time.sleep(CHECKPOINT_S)

    def checkpoint(self) -> bool:
        """Move everything kept so far into the repository: one pack, then the
        refs, then drop the journal generations that held them. Effects keep
        flowing meanwhile (into the next generation). Returns False when there
        was nothing to do."""
        if not self.writable:
            return False
        with self._checkpoint_lock:
            start = time.perf_counter()
            with self._lock:
                if self._unlogged:
                    self._append(self._unlogged)
                    self._unlogged.clear()
                if not self.objects and not self.refs:
                    return False
                objects = dict(self.objects)
                refs = dict(self.refs)
                done = self._generation
                self._pending_bytes = 0
                self._generation += 1
                self._open_generation()
            if objects:
                self._write_pack(objects)
            repo = pygit2.Repository(str(self.git_dir))  # no journal: refs go to disk
            for name, oid in refs.items():
                if oid is None:
                    ref = repo.references.get(name)
                    if ref is not None:
                        ref.delete()
                else:
                    repo.references.create(name, pygit2.Oid(hex=oid), force=True)
            with self._lock:
                for oid in objects:
                    # in a pack now: libgit2 rescans the pack directory on a miss
                    if self.objects.pop(oid, None) is not None:
                        self.held_bytes -= len(objects[oid][1])
                for name, target in refs.items():
                    if self.refs.get(name, "") == target:
                        del self.refs[name]
            for gen in self._generations():
                if gen <= done:
                    (self.dir / f"{gen}.log").unlink(missing_ok=True)
            self._roll_up_packs()
            if self.on_checkpoint is not None:
                self.on_checkpoint(time.perf_counter() - start, len(objects))
            return True

    def _write_pack(self, objects: dict[str, tuple[int, bytes]]) -> None:
        # A pack of whole (undeltified) objects; git's index-pack checks every
        # object id, writes the index and names the pack.
        parts = [b"PACK", struct.pack(">II", 2, len(objects))]
        for type_, data in objects.values():
            parts.append(_pack_header(type_, len(data)))
            parts.append(zlib.compress(data, 1))
        body = b"".join(parts)
        body += hashlib.sha1(body).digest()
        proc = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), "index-pack", "--stdin"],
            input=body, capture_output=True,
        )
        if proc.returncode != 0:
            raise StateError(f"checkpoint: git index-pack failed: {proc.stderr.decode().strip()}")

    def _roll_up_packs(self) -> None:
        packs = list((self.git_dir / "objects" / "pack").glob("pack-*.pack"))
        if len(packs) <= MAX_PACKS:
            return
        # Geometric repack merges the small packs only, keeping unreachable
        # objects (record payloads) as they are: nothing is pruned.
        proc = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), "repack", "-d", "-q", "--geometric=2"],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:  # harmless (more packs to search), but say so
            log.warning("rolling up %d packs failed: %s", len(packs), proc.stderr.strip())

    def close(self) -> None:
        """Stop the background checkpoints and checkpoint what is left (raising
        if that fails: the journal keeps it for the next open)."""
        with self._lock:
            self._closing = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            self.checkpoint()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        if self.writable and not self.objects and not self.refs:
            (self.dir / f"{self._generation}.log").unlink(missing_ok=True)  # empty

    # -- files ----------------------------------------------------------------

    def _open_generation(self) -> None:
        old = self._fd
        self._fd = os.open(
            self.dir / f"{self._generation}.log",
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644,
        )
        if old is not None:
            os.close(old)

    def _generations(self) -> list[int]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())

    def _replay(self) -> list[int]:
        """Load every generation on disk, oldest first; returns their numbers."""
        gens = self._generations()
        for gen in gens:
            try:
                data = (self.dir / f"{gen}.log").read_bytes()
            except FileNotFoundError:
                continue  # checkpointed meanwhile by the writer: it is on disk now
            for kind, payload in _records(data):
                if kind == b"O":
                    oid = payload[1:21].hex()
                    if oid not in self.objects:
                        self.objects[oid] = (payload[0], payload[21:])
                        self.held_bytes += len(payload) - 21
                else:
                    target = payload[:20]
                    self.refs[payload[20:].decode()] = None if target == _ZERO else target.hex()
        return gens


def _record(kind: bytes, payload: bytes) -> bytes:
    return _HEADER.pack(kind, len(payload), zlib.crc32(payload)) + payload


def _records(data: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    pos = 0
    while pos + _HEADER.size <= len(data):
        kind, length, crc = _HEADER.unpack_from(data, pos)
        payload = data[pos + _HEADER.size : pos + _HEADER.size + length]
        if kind not in (b"O", b"R") or len(payload) != length or zlib.crc32(payload) != crc:
            break  # a torn tail: the write a kill cut short, never acknowledged
        out.append((kind, payload))
        pos += _HEADER.size + length
    return out


def _pack_header(type_: int, size: int) -> bytes:
    """A pack entry's type-and-size header (git's variable-length encoding)."""
    out = bytearray()
    byte = (type_ << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)
