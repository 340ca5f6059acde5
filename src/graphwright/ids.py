"""Content-derived ids. Every id is a hash of what identifies the row, never random,
so reruns and incremental diffs line up row for row."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

_SEP = "\x1f"  # unit separator: cannot occur in the parts we hash by accident of concatenation


def stable_id(kind: str, *parts: object, length: int = 24) -> str:
    """A hex id derived from `kind` and `parts` (24 hex chars = 96 bits)."""
    return stable_id_of(kind, parts, length)


def stable_id_of(kind: str, parts: Iterable[object], length: int = 24) -> str:
    """stable_id over parts that come from an iterable (millions need not be in memory at once)."""
    h = hashlib.sha256(kind.encode())
    for part in parts:
        h.update(_SEP.encode())
        h.update(str(part).encode())
    return h.hexdigest()[:length]


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def doc_id(source_key: str) -> str:
    return stable_id("doc", source_key)


def chunk_id(doc_id_: str, text: str, occurrence: int = 0) -> str:
    # The chunk's position is deliberately not part of the id: a paragraph inserted above
    # an unchanged chunk must not change that chunk's id (and so its extraction cache hit).
    # `occurrence` tells apart identical chunks repeated within one document.
    return stable_id("chunk", doc_id_, content_hash(text), occurrence)


def entity_id(canonical_key: str) -> str:
    return stable_id("entity", canonical_key)


def relationship_id(source_id: str, target_id: str) -> str:
    a, b = sorted((source_id, target_id))
    return stable_id("relationship", a, b)


def community_id(level: int, member_ids: Iterable[str]) -> str:
    return stable_id("community", level, *sorted(member_ids))
