"""Token budgets for query contexts, counted with the chunker's tokenizer (chunking.tokenizer)."""

from __future__ import annotations

from graphwright.chunking import tokenizer


def count_tokens(texts: list[str]) -> list[int]:
    if not texts:
        return []
    return [len(e.ids) for e in tokenizer().encode_batch(list(texts), add_special_tokens=False)]


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
