"""The refs of the trace: scope branches, archives, forks, ignored files; loose refs
in the journal, packed ones on disk. Part of `Trace`."""


from __future__ import annotations

import bisect

from ._gitnames import name as gitname
from ._objects import _PACKED_NAME, FORK_PREFIX, IGNORED_PREFIX, SCOPE_PREFIX, SNAPSHOT_REF
from ._trees import TraceTrees


class TraceRefs(TraceTrees):
    """Reading and moving refs."""

    def snapshot(self) -> str | None:
        return self.ref(SNAPSHOT_REF)

    def ref(self, name: str) -> str | None:
        """The commit `name` points at (None when it does not exist)."""
        held, target = self.journal.ref(name)
        if held:
            return target
        ref = self.repo.references.get(gitname(name))
        return str(ref.target) if ref is not None else None

    def head(self, scope: str) -> str | None:
        return self.ref(SCOPE_PREFIX + scope)

    def set_ref(self, name: str, commit: str) -> None:
        self.journal.move_ref(name, commit)

    def delete_ref(self, name: str) -> None:
        """Delete a ref; a scope's ref takes its fork and ignored-files refs with it."""
        moves: dict[str, str | None] = {}
        if self.ref(name) is not None:
            moves[name] = None
        if name.startswith(SCOPE_PREFIX):
            for prefix in (FORK_PREFIX, IGNORED_PREFIX):
                side = prefix + name[len(SCOPE_PREFIX):]
                if self.ref(side) is not None:
                    moves[side] = None
        if moves:
            self.journal.move_refs(moves)

    def ref_name_free(self, name: str) -> bool:
        """Whether a ref `name` can be created: none by that name, none that is
        a directory of it (`a/b` when `a/b/c` exists) or that it is a directory
        of (`a/b/c` when `a/b` exists). Scope names may hold '-' and digits, so
        scope `x`'s third discard `archive/x-3` and scope `x-3`'s rewinds
        `archive/x-3/rewound-<n>` can meet; git refuses the second."""
        if self.ref(name) is not None:
            return False
        parts = name.split("/")
        for i in range(2, len(parts)):
            if self.ref("/".join(parts[:i])) is not None:
                return False
        below = name + "/"
        if (self.path / below).is_dir() and any((self.path / below).iterdir()):
            return False
        if any(r.startswith(below) and t is not None
               for r, t in self.journal.ref_moves().items()):
            return False
        packed = self._packed_refs()
        at = bisect.bisect_left(packed, below)
        return not (at < len(packed) and packed[at].startswith(below))

    def _packed_refs(self) -> list[str]:
        """The names in packed-refs, sorted. Parsed again only when the file was
        replaced (git and the checkpoint write it to a new file renamed into place):
        it holds every archived scope, so a run's discards would read it whole."""
        path = self.path / "packed-refs"
        try:
            st = path.stat()
        except FileNotFoundError:
            return []
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._packed_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            text = path.read_text()
        except FileNotFoundError:
            return []
        names = _PACKED_NAME.findall(text)
        if not text.startswith("# pack-refs with:") or " sorted" not in text.partition("\n")[0]:
            names.sort()  # git's order is bytes', which UTF-8 keeps: str order
        self._packed_cache = (key, names)
        return names

    def fork_point(self, scope: str) -> str | None:
        """The fork commit of live scope `scope` (None for root, and for scopes
        forked before fork refs were kept)."""
        return self.ref(FORK_PREFIX + scope)

    def scope_names(self) -> list[str]:
        return [r[len(SCOPE_PREFIX) :] for r in self.refs(SCOPE_PREFIX)]

    def refs(self, prefix: str) -> list[str]:
        names = {r for r in self.repo.references if r.startswith(prefix)}
        for name, target in self.journal.ref_moves().items():
            if not name.startswith(prefix):
                continue
            if target is None:
                names.discard(name)
            else:
                names.add(name)
        return sorted(names)
