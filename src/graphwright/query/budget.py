"""Token budgets for query contexts, counted in the embedder's tokens (graphwright.text.tokens)."""

from __future__ import annotations

from graphwright.text.tokens import tokenizer


def take_within(items: list, texts: list[str], budget: int, *, at_least: int = 0, counts: list | None = None) -> tuple[list, int]:
    """The longest prefix of `items` whose `texts` fit in `budget` tokens (but at least
    `at_least` items), and the tokens it uses. `counts`: the texts' token counts where known
    (None for one to count). Texts are counted one at a time, up to the first that does not
    fit: a query's few dozen short texts take longer to count as a parallel batch (the
    tokenizer's threads wait for cores) than one by one."""
    out, used = [], 0
    tok = tokenizer()
    counts = counts or [None] * len(texts)
    for item, text, known in zip(items, texts, counts):
        n = known if known is not None else len(tok.encode(text, add_special_tokens=False).ids)
        if used + n > budget and len(out) >= at_least:
            break
        out.append(item)
        used += n
    return out, used
