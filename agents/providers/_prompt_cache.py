"""Emulated provider prompt caching: deterministic tokens, prefixes cached in whole blocks.

Used by the scripted model server and the scripted provider so tests can show that forks of a
conversation reuse the cache. The tokenizer is deliberately simple: every run of word
characters is one token and every other non-space character is one token. Providers cache in
fixed-size blocks (e.g. 64 or 128 tokens), so a prompt's cached tokens are the longest prefix,
in whole blocks, that an earlier prompt in the same namespace (API and model) already wrote.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["CacheUsage", "PrefixCache", "tokenize"]

_TOKEN = re.compile(r"\w+|[^\w\s]")


class CacheUsage(NamedTuple):
    """What one prompt did to the cache."""

    prompt_tokens: int
    read_tokens: int
    """Tokens served from the cache."""
    written_tokens: int
    """Tokens this request added to the cache (reported by Anthropic only)."""


def tokenize(text: str) -> list[str]:
    """Returns the emulated tokens of `text`: word runs and single punctuation characters."""
    return _TOKEN.findall(text)


class PrefixCache:
    """Remembers prompt prefixes in whole blocks of tokens, per namespace (API and model)."""

    def __init__(self, block_size: int = 64) -> None:
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        self.block_size = block_size
        self._seen: set[bytes] = set()

    def use(self, namespace: str, tokens: Sequence[str], cacheable: int) -> CacheUsage:
        """Reads and extends the cache for a prompt whose first `cacheable` tokens may be cached.

        Returns:
            The prompt's token count, the tokens read from the cache and the tokens written.
        """
        digest = hashlib.sha256(namespace.encode())
        blocks = min(cacheable, len(tokens)) // self.block_size
        read = 0
        for index in range(blocks):
            for token in tokens[index * self.block_size : (index + 1) * self.block_size]:
                digest.update(token.encode())
                digest.update(b"\x00")
            key = digest.copy().digest()
            # Prefixes are only ever stored whole, so the first miss ends the cached run.
            if key in self._seen and read == index:
                read = index + 1
            self._seen.add(key)
        size = self.block_size
        return CacheUsage(len(tokens), read * size, (blocks - read) * size)
