"""Token budgets for query contexts, counted in the embedder's tokens (graphwright.text.tokens)."""

from __future__ import annotations

from graphwright.text.tokens import count_tokens


def take_within(items: list, texts: list[str], budget: int, *, at_least: int = 0) -> tuple[list, int]:
    """The longest prefix of `items` whose `texts` fit in `budget` tokens (but at least
    `at_least` items), and the tokens it uses."""
    out, used = [], 0
    for item, n in zip(items, count_tokens(texts)):
        if used + n > budget and len(out) >= at_least:
            break
        out.append(item)
        used += n
    return out, used
