"""The git store: objects, refs, the journal, packs, merges and patches.

The only part of Corral that speaks git. Everything above it sees commits,
trees and blobs through `Trace` (and its read side, `TraceReader`); the few
places pygit2's public API falls short are in `_pygit2`, pinned by a test.
"""

from ._ignore import IgnoreRules
from ._malloc import one_arena
from ._merge import merge_texts

__all__ = ["IgnoreRules", "merge_texts", "one_arena"]
