"""Random three-way merge cases for the laws against `git merge` (hypothesis strategies).

A case is (base, ours, theirs): the files of the merge base, and what each side
changes (a path to new content, or None for deleted). Files are small texts of a
few distinct lines each, so that the diffs have many equally good alignments (where
Myers and histogram choose differently): LF or CRLF line ends, sometimes no final
newline, sometimes binary (a NUL); executable bits; edits that insert, delete and
replace lines; deletions; renames (in the same directory, with or without an edit,
on one side or both, onto a name the other side adds or not); new files on one side
or on both at one path (add/add).

Each file draws its lines from its own set (`a3`, `}3`, ...), so two different files
are never alike to git's or libgit2's rename detection, which score similarity
differently; a renamed file keeps most of its lines, so both find the rename. Left
out, as known gaps of Corral's merge (docs/scopes.md): two different files renamed
onto one name (git's rename/rename 2to1), directory renames, and similarity near
git's 50 % threshold.
"""

from __future__ import annotations

from hypothesis import strategies as st

Entry = bytes | tuple[str, bytes] | None
"""A file's content (mode 100644), ("exec", content), or None for no file."""
Files = dict[str, Entry]

DIRS = ("", "d/")
NAMES = ("f.txt", "g.txt")
RENAMED = ("r.txt", "s.txt")
ADDED = ("n.txt",)


def _tokens(k: int) -> list[str]:
    return [f"a{k}", f"b{k}", f"}}{k}", "", f"x{k}", f"    return {k}", f"same{k}"]


def _new_tokens(k: int) -> list[str]:
    return [f"A{k}", f"B{k}", f"same{k}", f"}}{k}", ""]


@st.composite
def body(draw: st.DrawFn, k: int, *, min_lines: int = 0) -> bytes:
    """A file of file-set `k`: a few distinct lines, LF or CRLF, maybe without its
    final newline, maybe binary."""
    eol = draw(st.sampled_from(["\n", "\n", "\n", "\r\n"]))
    lines = draw(st.lists(st.sampled_from(_tokens(k)), min_size=min_lines, max_size=12))
    text = "".join(line + eol for line in lines).encode()
    if text and draw(st.integers(0, 5)) == 0:
        text = text[:-1]  # no final newline (a CRLF file keeps a lone CR)
    if draw(st.integers(0, 9)) == 0:
        text = b"\0" + text  # binary to git (a NUL in the first 8000 bytes)
    return text


@st.composite
def edited(draw: st.DrawFn, data: bytes, k: int, *, most: int = 4) -> bytes:
    """`data` with 1 to `most` line edits (a binary file: new content)."""
    if b"\0" in data:
        return data + draw(st.sampled_from([b"x", b"\0y", b""])) + f"{k}\n".encode()
    eol = "\r\n" if b"\r\n" in data else "\n"
    lines = data.decode().splitlines(keepends=True)
    for _ in range(draw(st.integers(1, most))):
        at = draw(st.integers(0, len(lines)))
        new = [t + eol for t in draw(st.lists(st.sampled_from(_new_tokens(k)), min_size=1,
                                              max_size=3))]
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        if kind == "insert" or at == len(lines):
            lines[at:at] = new
        elif kind == "delete":
            del lines[at]
        else:
            lines[at:at + 1] = new
    out = "".join(lines).encode()
    if out.endswith(b"\n") and draw(st.integers(0, 5)) == 0:
        out = out[:-1]
    return out


def _content(entry: Entry) -> bytes:
    assert entry is not None
    return entry if isinstance(entry, bytes) else entry[1]


@st.composite
def side(draw: st.DrawFn, base: Files, sets: dict[str, int], first_new: int,
         other: Files | None = None) -> Files:
    """One side's changes to `base` (`other`: the other side's, whose rename
    targets this side renames no other file onto)."""
    out: Files = {}
    theirs_moves = _moves(base, other or {})
    for path, entry in base.items():
        k = sets[path]
        data = _content(entry)
        action = draw(st.sampled_from(["keep", "keep", "edit", "edit", "edit", "delete",
                                       "rename", "rename+edit", "exec"]))
        if action == "edit":
            new = draw(edited(data, k))
            out[path] = new if isinstance(entry, bytes) else (entry[0], new)
        elif action == "delete":
            out[path] = None
        elif action == "exec":
            out[path] = ("exec", data) if isinstance(entry, bytes) else data
        elif action.startswith("rename") and len(data.splitlines()) >= 8:
            folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
            to = folder + draw(st.sampled_from(RENAMED))
            if to in base or to in out or theirs_moves.get(to, path) != path:
                continue  # two files renamed onto one name: a known gap
            new = draw(edited(data, k, most=1)) if action == "rename+edit" else data
            out[path], out[to] = None, new if isinstance(entry, bytes) else (entry[0], new)
    if draw(st.integers(0, 3)) == 0:
        to = draw(st.sampled_from(DIRS)) + draw(st.sampled_from(ADDED + RENAMED))
        if to not in base and to not in out:
            out[to] = draw(body(first_new))
    return out


def _moves(base: Files, changes: Files) -> dict[str, str]:
    """target -> source of the renames `changes` make (content kept or edited:
    a target whose source is the deleted file of the same file set)."""
    gone = [p for p, v in changes.items() if v is None and p in base]
    added = [p for p, v in changes.items() if v is not None and p not in base]
    return {to: src for to in added for src in gone
            if src.rsplit("/", 1)[0] == to.rsplit("/", 1)[0] or "/" not in src + to}


@st.composite
def cases(draw: st.DrawFn) -> tuple[Files, Files, Files]:
    """(base, ours' changes, theirs' changes)."""
    paths = [d + n for d in DIRS for n in NAMES]
    chosen = draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3, unique=True))
    sets = {p: i for i, p in enumerate(chosen)}
    base: Files = {}
    for p in chosen:
        data = draw(body(sets[p], min_lines=draw(st.sampled_from([0, 8]))))
        base[p] = ("exec", data) if draw(st.integers(0, 7)) == 0 else data
    ours = draw(side(base, sets, 10))
    theirs = draw(side(base, sets, 20, ours))
    if draw(st.integers(0, 4)) == 0:  # both add one path (add/add)
        to = draw(st.sampled_from(DIRS)) + "both.txt"
        ours[to] = draw(body(30))
        theirs[to] = draw(st.sampled_from([ours[to], draw(edited(_content(ours[to]), 30))]))
    return base, ours, theirs
