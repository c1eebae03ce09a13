"""Writing a git pack of whole objects, for the journal's checkpoints.

A pack entry is a type-and-size header and the object's data, zlib-deflated.
`zlib.compress` sets up a full deflate state (a 256 KiB allocation that glibc
serves with mmap, so page faults each time): ~65 µs per object here, which
made a checkpoint of 20k small objects spend 1.6 s compressing. A deflate
stream with a window no larger than the object needs (4 KiB for small ones)
costs ~5 µs and compresses as well; large objects amortize the full one.
Trees are stored uncompressed (see `_stored`), and the pack's index is written
here too (see `write_pack`).
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import zlib
from collections.abc import Mapping
from pathlib import Path

from pygit2.enums import ObjectType

__all__ = ["deflate", "pack_header", "write_pack"]

_SMALL = 4096


def deflate(data: bytes) -> bytes:
    """`data` as one zlib stream (level 1), cheap for small objects."""
    if len(data) > _SMALL:
        return zlib.compress(data, 1)
    co = zlib.compressobj(1, zlib.DEFLATED, 12, 4)
    return co.compress(data) + co.flush()


def _stored(data: bytes) -> bytes:
    """`data` as one zlib stream of stored blocks. For trees: mostly object ids,
    which deflate shrinks by ~20% at ~35 µs a tree here (8x a stored copy); a
    checkpoint's trees are half its objects."""
    co = zlib.compressobj(0, zlib.DEFLATED, 12, 1)  # no deflate state to set up
    return co.compress(data) + co.flush()


def pack_header(type_: int, size: int) -> bytes:
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


def write_pack(git_dir: Path, objects: Mapping[str, tuple[int, bytes]]) -> None:
    """Store `objects` (id -> (type, data)) in the repository at `git_dir` as one
    pack of undeltified objects with its version-2 index, as `git index-pack`
    leaves them (read-only files named after the pack's checksum, the pack
    renamed into place before its index: a reader finds a pack by its index).
    Raises OSError when a file cannot be written (the temporary ones removed).

    Written here rather than by `git index-pack --stdin`, which cost a process
    (~3 ms idle, tens under load) and inflated and hashed every object again:
    every id here was computed from its data when the journal took it in, and
    each entry's CRC32 (which git checks when it copies an entry) is taken here
    over the bytes written."""
    count = len(objects)
    parts = [b"PACK", struct.pack(">II", 2, count)]
    entries: list[tuple[bytes, int, int]] = []  # (raw id, crc32, offset)
    offset = 12
    for oid, (type_, data) in objects.items():
        packed = pack_header(type_, len(data)) + (
            _stored(data) if type_ == ObjectType.TREE else deflate(data))
        parts.append(packed)
        entries.append((bytes.fromhex(oid), zlib.crc32(packed), offset))
        offset += len(packed)
    body = b"".join(parts)
    checksum = hashlib.sha1(body).digest()
    entries.sort()
    fanout = [0] * 256
    for raw, _, _ in entries:
        fanout[raw[0]] += 1
    total = 0
    for i in range(256):
        total += fanout[i]
        fanout[i] = total
    large = [off for _, _, off in entries if off >= 1 << 31]
    small = [off if off < 1 << 31 else (1 << 31) | large.index(off) for _, _, off in entries]
    index = b"".join((
        b"\377tOc", struct.pack(">I", 2), struct.pack(">256I", *fanout),
        b"".join(raw for raw, _, _ in entries),
        struct.pack(f">{count}I", *(crc for _, crc, _ in entries)),
        struct.pack(f">{count}I", *small), struct.pack(f">{len(large)}Q", *large),
        checksum,
    ))
    index += hashlib.sha1(index).digest()
    pack_dir = git_dir / "objects" / "pack"
    pack_dir.mkdir(parents=True, exist_ok=True)
    name = pack_dir / f"pack-{checksum.hex()}"
    temps: list[Path] = []
    try:
        for data, ext in ((body + checksum, ".pack"), (index, ".idx")):
            fd, temp = tempfile.mkstemp(prefix=f"tmp_{ext[1:]}_", dir=pack_dir)
            temps.append(Path(temp))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(temp, 0o444)
        os.replace(temps[0], name.with_suffix(".pack"))
        os.replace(temps[1], name.with_suffix(".idx"))
    finally:
        for left in temps:
            left.unlink(missing_ok=True)
