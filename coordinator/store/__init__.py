"""The git store: objects, refs, the journal, packs, merges and patches."""

from .._ignore import IgnoreRules
from .._malloc import one_arena
from .._merge import merge_texts

__all__ = ["IgnoreRules", "merge_texts", "one_arena"]
