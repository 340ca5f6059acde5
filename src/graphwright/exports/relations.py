"""The relationship fields the other engines expect and our extractors may leave empty.

LightRAG keys relation-level retrieval on a relationship's `keywords` and drops any extracted
relationship whose description is empty; GraphRAG shows the description as the relationship's
context. The `nlp` extractor names no kind of relation, and relates the most frequent names of a
chunk even when no sentence names both (an empty description), so an export fills them in:

- keywords: up to five content words of the sentences that relate the two entities (most
  frequent first, then in reading order): the words written in lowercase, which leaves out
  names, stop words and the entities' own names. With
  no such sentence, the two entity types ('geo, person'), or 'co-occurrence' when untyped.
- description: the relationship's own when it has one; otherwise what is known, that the two
  are named in the same passage(s).

Both are derived from the published rows, so an export stays a function of its version.
"""

from __future__ import annotations

import re
from collections import Counter

from graphwright.exports.names import LIGHTRAG_UNTYPED, UNTYPED
from graphwright.stages.extract.nlp import _NOT_NAMES

MAX_KEYWORDS = 5
_WORD = re.compile(r"[^\W\d_][\w'’\-]*[^\W_]|[^\W\d_]")


def keywords(descriptions: list[str], names: tuple[str, str], types: tuple[str, str]) -> str:
    """Comma-separated keywords for the relationship between `names` (see the module doc)."""
    own = {w.casefold() for name in names for w in _WORD.findall(name)}
    counts: Counter = Counter()
    first: dict[str, int] = {}
    for text in descriptions:
        for word in _WORD.findall(text):
            key = word.casefold().strip("'’-")
            if not word[0].islower() or len(key) < 3 or key in own or key in _NOT_NAMES or key.endswith(("'s", "’s")):
                continue
            counts[key] += 1
            first.setdefault(key, len(first))
    chosen = sorted(counts, key=lambda k: (-counts[k], first[k]))[:MAX_KEYWORDS]
    if chosen:
        return ", ".join(chosen)
    typed = [t.lower() for t in types if t and t.upper() != UNTYPED and t.lower() != LIGHTRAG_UNTYPED]
    return ", ".join(sorted(set(typed))) if typed else "co-occurrence"


def description(own: str, names: tuple[str, str], n_passages: int) -> str:
    """The relationship's description, or a statement of what relates them when it has none."""
    if own.strip():
        return own
    a, b = names
    if n_passages > 1:
        return f"{a} and {b} are named together in {n_passages} passages."
    return f"{a} and {b} are named in the same passage."
