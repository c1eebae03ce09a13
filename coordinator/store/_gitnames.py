"""Names handed to pygit2's lookups, interned so that its leak stays bounded.

pygit2 (1.18 to 1.21, the current release) keeps one reference to the name
given to `Tree[...]`, `Tree / name`, `name in tree`, `TreeBuilder.get` and
`.remove`, and `Repository.lookup_reference` (so `references.get` and
`.delete`): every call's string lives for good. A coordinator looks up the
`.gitignore` and `.gitattributes` files along every path it writes and rebuilds
the trees on the way, so that leak was ~200 bytes per effect, 4 MB at 20k
effects, which no checkpoint gives back. Interned, a name is one object however
often it is looked up: the leak then costs the set of distinct names (paths the
repository has, refs of live scopes), not the length of the history.
`tests/coordinator/test_memory_held.py` shows both the leak and its bound.
"""

from __future__ import annotations

import sys

import pygit2

__all__ = ["entry", "name"]


def name(text: str) -> str:
    """`text` as the one shared string of its value, safe to hand to a leaking lookup."""
    return sys.intern(text)


def entry(tree: pygit2.Tree, path: str) -> pygit2.Object | None:
    """The object at `path` (slash-separated) in `tree`; None where there is none.
    A path with a NUL byte names nothing (git has none; pygit2 would cut it there
    and find "a" for "a\\0b")."""
    if "\0" in path:
        return None
    try:
        return tree[sys.intern(path)]
    except KeyError:
        return None
