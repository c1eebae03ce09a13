"""Merges handed to git whole: the shapes the in-process merge does not model.

The in-process merge (`_merge.three_way`) follows file renames, not git's
directory renames (ort, `merge.directoryRenames=conflict`: a side that moves
a whole directory takes the other side's new files with it, each a "file
location" conflict) nor two different files renamed onto one name (git's
rename/rename(2to1), where each rename first merges with the other side's
edits of its old file). Implementing ort's rules (majority of each
directory's renames, ties, a directory the renaming side still holds, nested
and transitive renames, the collisions they make) would be a second ort to
keep equal to the first; the shapes are rare and cheap to recognize. So
`handed_to_git` spots them from the two diffs the merge already has (a side
left a base directory with no file while the other added a file under it;
both sides added one path while both deleted files; an exact rename with
more than one candidate, whose pairing follows ort's walk order), and
`git_merge` runs `git merge` itself on those, in a scratch work tree, with
the strategy's `-X` or union attribute: exact by construction. A merge
without such a shape pays a few dictionary looks.

The scratch repository holds reduced trees, not the whole ones: every path
either side changed (in all three versions), the `.gitattributes` on their
way, and one untouched file in each directory on their way, so each
directory exists on a side exactly when it does in the real trees. Untouched
paths are never rename sources or targets, so git's merge of the reduced
trees changes the same paths, the same way, as its merge of the whole ones.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pygit2
from pygit2.enums import ObjectType

from ..records._effects import MergeStrategy
from ..records._merges import ConflictKind, Hunk
from ._favor import Side, marker_size, merge_driver, parse_hunks, settle
from ._gitdir import GitDir, tree_bytes
from ._gitnames import entry
from ._trace import Trace

__all__ = ["EMPTY_BLOB", "GitConflict", "GitMerge", "git_merge", "handed_to_git"]

Diff = Mapping[str, Side | None]
_TREE = 0o040000


def handed_to_git(base: pygit2.Tree, ours: pygit2.Tree, theirs: pygit2.Tree,
                  d_ours: Diff, d_theirs: Diff) -> bool:
    """Whether the merge has a shape only git's own merge gets right: a
    directory of the base one side left without a file, under which the other
    side added one (a directory rename git may follow); a file one side
    deleted and the other changed whose content that side deleted or added
    elsewhere more than once (which exact rename git pairs depends on the
    order ort walks the trees in, not the sorted order of `git diff-tree`);
    or one path both sides added while both deleted files (two renames onto
    one name)."""
    if _emptied_dir_gets_file(base, ours, d_ours, d_theirs) or \
            _emptied_dir_gets_file(base, theirs, d_theirs, d_ours):
        return True
    if _ambiguous_exact_rename(base, d_ours, d_theirs) or \
            _ambiguous_exact_rename(base, d_theirs, d_ours):
        return True
    if not (_deletes(d_ours) and _deletes(d_theirs)):
        return False
    return any(v is not None and d_theirs.get(p) is not None and _file(base, p) is None
               for p, v in d_ours.items())


def _ambiguous_exact_rename(base: pygit2.Tree, d_side: Diff, d_other: Diff) -> bool:
    candidates = {w[0] for p, v in d_side.items() if v is None and p in d_other
                  and (w := _file(base, p)) is not None and w[0] != EMPTY_BLOB}
    if not candidates:
        return False
    seen = Counter(v[0] for v in d_side.values() if v is not None and v[0] in candidates)
    seen.update(w[0] for p, v in d_side.items() if v is None
                and (w := _file(base, p)) is not None and w[0] in candidates)
    return any(n > 2 for n in seen.values())


EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
"""The empty blob's id (git never renames an empty file)."""


def _deletes(diff: Diff) -> bool:
    return any(v is None for v in diff.values())


def _emptied_dir_gets_file(base: pygit2.Tree, mover: pygit2.Tree, d_mover: Diff,
                           d_other: Diff) -> bool:
    if not _deletes(d_mover):
        return False
    for path, v in d_other.items():
        if v is None or _file(base, path) is not None:
            continue
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            folder = "/".join(parts[:i])
            was = entry(base, folder)
            if was is None or was.filemode != _TREE:
                break
            now = entry(mover, folder)
            if now is None or now.filemode != _TREE:
                return True
    return False


def _file(tree: pygit2.Tree, path: str) -> Side | None:
    e = entry(tree, path)
    return None if e is None or e.filemode == _TREE else (str(e.id), e.filemode)


@dataclass(frozen=True, slots=True)
class GitConflict:
    """A path git left conflicted: its stages (blob id, mode) and what clash."""

    path: str
    kind: ConflictKind
    ancestor: Side | None
    ours: Side | None
    theirs: Side | None
    hunks: tuple[Hunk, ...] = ()
    came_from: str | None = None
    """Where the side that wrote a "file location" file had it (git moved it)."""


@dataclass(frozen=True, slots=True)
class GitMerge:
    """What git's merge did, relative to our tree: the paths it merged
    (`changes`, blobs already in the trace) and the paths it left conflicted."""

    changes: dict[str, Side | None]
    conflicts: tuple[GitConflict, ...]


def _reduced(trees: tuple[pygit2.Tree, ...], changed: Iterable[str]) -> list[dict[str, Side]]:
    """The files of the three reduced trees (see the module doc)."""
    keep = set(changed)
    folders = {"/".join(p.split("/")[:i]) for p in keep for i in range(p.count("/") + 1)}
    for folder in folders:
        at = f"{folder}/.gitattributes" if folder else ".gitattributes"
        if any(_file(t, at) for t in trees):
            keep.add(at)
        kept = _untouched_file(trees, folder, keep, folders)
        if kept is not None:
            keep.add(kept)
    return [{p: s for p in keep if (s := _file(t, p)) is not None} for t in trees]


def _untouched_file(trees: tuple[pygit2.Tree, ...], folder: str, keep: set[str],
                    folders: set[str]) -> str | None:
    """A file under `folder` the same in all three trees, off the kept paths
    (None: there is none directly or in an untouched subdirectory)."""
    base = entry(trees[0], folder) if folder else trees[0]
    if not isinstance(base, pygit2.Tree):
        return None
    for child in base:
        path = f"{folder}/{child.name}" if folder else str(child.name)
        if path in keep or path in folders:
            continue
        if any((e := entry(t, path)) is None or e.id != child.id or e.filemode != child.filemode
               for t in trees[1:]):
            continue
        while child.filemode == _TREE:  # an untouched directory: any file in it
            assert isinstance(child, pygit2.Tree)
            first = next(iter(child), None)
            if first is None:
                return None
            path, child = f"{path}/{first.name}", first
        return path
    return None


_IDENTITY = ("-c", "user.name=corral", "-c", "user.email=corral@localhost")


def git_merge(trace: Trace, trees: tuple[pygit2.Tree, pygit2.Tree, pygit2.Tree],
              ours_commit: str, changed: Iterable[str], strategy: MergeStrategy) -> GitMerge:
    """`git merge` of theirs into ours (`trees`: base, ours, theirs) on the
    reduced trees, with `-X ours|theirs` or a `* merge=union` attribute as
    `strategy` says. Raises OSError when git fails."""
    files = _reduced(trees, changed)
    with GitDir() as git:
        work = git.path / "work"
        work.mkdir()
        env = {"GIT_WORK_TREE": str(work), "GIT_INDEX_FILE": str(git.path / "index")}
        if strategy == "union":
            (git.path / "info").mkdir()
            (git.path / "info" / "attributes").write_text("* merge=union\n")
        base = git.commit(_write_tree(git, trace, files[0]))
        ours = git.commit(_write_tree(git, trace, files[1]), [base])
        theirs = git.commit(_write_tree(git, trace, files[2]), [base])
        _run(git, env, "checkout", "-q", "-f", "--detach", ours)
        favor = ["-X", strategy] if strategy in ("ours", "theirs") else []
        done = git.run(*_IDENTITY, "merge", "--no-commit", "--no-ff", *favor, theirs,
                       env=env, cwd=work)
        stages = _stages(_run(git, env, "ls-files", "-s", "-z").stdout)
        merged = {p: v for (p, s), v in stages.items() if s == 0}
        messages = done.stdout.decode(errors="replace").splitlines()
        if done.returncode != 0 and not any(s for _, s in stages):
            left = _left_in_place(messages, merged, files[0])
            if not left:
                raise OSError(f"git merge failed: {(done.stdout + done.stderr).decode()}")
        conflicted = sorted({p for p, s in stages if s})
        for (_, stage), (oid, mode) in stages.items():  # a rename's merge is a new blob
            if stage and mode != 0o160000:
                trace.write_blob(git.read(oid)[1])
        for path, (oid, mode) in merged.items():
            if mode != 0o160000 and files[1].get(path, ("",))[0] != oid:
                trace.write_blob(git.read(oid)[1])
        changes: dict[str, Side | None] = {
            p: v for p, v in merged.items() if files[1].get(p) != v}
        changes.update({p: None for p in files[1]
                        if p not in merged and p not in conflicted})
        conflicts = tuple(_conflict(git, env, trace, trees[1], ours_commit, path, stages,
                                    messages, strategy) for path in conflicted)
        if done.returncode != 0 and not conflicts:
            conflicts = tuple(GitConflict(p, "file location", None, files[1].get(p),
                                          None if p in files[1] else merged[p]) for p in left)
    return GitMerge(changes, conflicts)


def _left_in_place(messages: list[str], merged: Mapping[str, Side],
                   base: Mapping[str, Side]) -> list[str]:
    """The files a directory rename git reports as a conflict but leaves no
    stage for (it leaves them where they were): those an "implicit dir rename"
    could not move onto a path in the way, and those added under a directory
    whose files went to several with no majority ("directory rename split")."""
    left: list[str] = []
    for m in messages:
        if m.startswith("CONFLICT (implicit dir rename)") and "there: " in m:
            left += [p.strip() for p in m.split("there: ", 1)[1].rstrip(".").split(", ")]
        elif m.startswith("CONFLICT (directory rename split)") and "where to rename " in m:
            folder = m.split("where to rename ", 1)[1].split(" to;", 1)[0] + "/"
            left += [p for p in merged if p.startswith(folder) and p not in base]
    return sorted({p for p in left if p in merged})


def _run(git: GitDir, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    done = git.run(*args, env=env, cwd=git.path / "work")
    if done.returncode != 0:
        raise OSError(f"git {args[0]} failed: {done.stderr.decode(errors='replace')}")
    return done


def _stages(raw: bytes) -> dict[tuple[str, int], Side]:
    """`git ls-files -s -z`: (path, stage) -> (object id, mode)."""
    out = {}
    for line in raw.split(b"\0"):
        if line:
            meta, _, path = line.partition(b"\t")
            mode, oid, stage = meta.split()
            out[path.decode(), int(stage)] = (oid.decode(), int(mode, 8))
    return out


def _write_tree(git: GitDir, trace: Trace, files: Mapping[str, Side]) -> str:
    """The nested tree of `files` (path -> (id, mode)), written into `git`
    with the blobs it needs (a submodule's commit is not needed)."""
    entries: dict[str, Side] = {}
    subtrees: dict[str, dict[str, Side]] = {}
    for path, (oid, mode) in files.items():
        head, _, rest = path.partition("/")
        if rest:
            subtrees.setdefault(head, {})[rest] = (oid, mode)
        else:
            if mode != 0o160000:
                git.blob(trace.blob(oid))
            entries[head] = (oid, mode)
    for name, sub in subtrees.items():
        entries[name] = (_write_tree(git, trace, sub), _TREE)
    return git.write(ObjectType.TREE, tree_bytes(entries))


def _conflict(git: GitDir, env: dict[str, str], trace: Trace, ours_tree: pygit2.Tree,
              ours_commit: str, path: str, stages: Mapping[tuple[str, int], Side],
              messages: list[str], strategy: MergeStrategy) -> GitConflict:
    """A conflicted path as Corral records it: its kind from the stages git
    left (and git's message, for a path with one stage), and for a line
    conflict under "fail" its hunks, from the file re-marked in diff3 style."""
    anc, o, t = (stages.get((path, k)) for k in (1, 2, 3))
    kind: ConflictKind
    if o is not None and t is not None:
        driver = merge_driver(trace.repo, ours_commit, ours_tree, path)
        settled = settle(anc, o, t, "fail", driver, trace.blob)
        kind = settled if isinstance(settled, str) else ("content" if anc else "add/add")
    elif anc is not None and (o is not None or t is not None):
        kind = "modify/delete"
    elif any("(rename/rename)" in m and path in _words(m) for m in messages):
        kind = "rename/rename"
    else:
        kind = "modify/delete" if anc is not None else "file location"
    hunks: tuple[Hunk, ...] = ()
    if kind in ("content", "add/add") and strategy == "fail":
        hunks = _hunks(git, env, trace, path, (anc, o, t))
    came_from = _came_from(messages, path) if kind == "file location" else None
    return GitConflict(path, kind, anc, o, t, hunks, came_from)


def _came_from(messages: list[str], path: str) -> str | None:
    """Where git's "file location" message says the file at `path` was
    ("X added in ..." or "X renamed to Y in ..."), written by its side."""
    for m in messages:
        if m.startswith("CONFLICT (file location): ") and m.rstrip(".").endswith(" " + path):
            words = m.split(": ", 1)[1].split()
            if words[1:3] == ["renamed", "to"]:
                return words[3].rstrip(",")
            return words[0]
    return None


def _words(message: str) -> set[str]:
    return {w.rstrip(".,;:") for w in message.split()}


def _hunks(git: GitDir, env: dict[str, str], trace: Trace, path: str,
           sides: tuple[Side | None, ...]) -> tuple[Hunk, ...]:
    """The conflict regions of `path`, diff3-marked."""
    texts = tuple(trace.blob(s[0]) if s else None for s in sides)
    marker = marker_size([(texts[0], texts[1] or b"", texts[2] or b"")])
    (git.path / "info").mkdir(exist_ok=True)
    with open(git.path / "info" / "attributes", "a") as f:
        f.write(f"* conflict-marker-size={marker}\n")
    _run(git, env, "checkout", "--conflict=diff3", "--", path)
    return parse_hunks((git.path / "work" / path).read_bytes(), marker)
