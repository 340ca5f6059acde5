"""The chunker as it was before documents were tokenized in windows (graphwright 078ffe3:
stages/chunk.py and text/sentences.py), frozen: tests/test_chunking.py holds the streaming
chunker to it on every document that fits in memory."""

from __future__ import annotations

import bisect
import re
import zlib

from graphwright.text.tokens import token_spans

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "rev", "capt", "gen", "col", "sgt", "gov",
    "sen", "no", "vs", "etc", "inc", "ltd", "co", "corp", "mt", "ft", "e.g", "i.e", "u.s", "u.k",
}
_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]*[A-Z0-9])|\n\s*\n")


def split_sentences(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for match in _BOUNDARY.finditer(text):
        before = text[start:match.start()].rstrip("\"'”’)]").rstrip(".!?")
        last_word = before.rsplit(None, 1)[-1].casefold() if before.split() else ""
        if match.group(0).strip() == "" and "\n" not in match.group(0):
            if last_word in _ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha()):
                continue
        if text[start:match.start()].strip():
            spans.append((start, match.start()))
        start = match.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


def _word_starts(spans):
    return [i == 0 or spans[i][0] > spans[i - 1][1] for i in range(len(spans))]


def _sentence_pieces(text, spans, word_start, max_tokens):
    starts = [a for a, _ in split_sentences(text)] or [0]
    pieces, first = [], 0
    for i in range(1, len(spans) + 1):
        if i < len(spans) and bisect.bisect_right(starts, spans[i][0]) == bisect.bisect_right(starts, spans[first][0]):
            continue
        a, b = first, i
        while b - a > max_tokens:
            cut = a + max_tokens
            while cut > a + 1 and not word_start[cut]:
                cut -= 1
            cut = cut if cut > a + 1 else a + max_tokens
            pieces.append((a, cut))
            a = cut
        pieces.append((a, b))
        first = i
    return pieces


def plan_chunks(text, spans, size, overlap, min_tokens):
    if not spans:
        return []
    word_start = _word_starts(spans)
    budget = size - overlap
    pieces = _sentence_pieces(text, spans, word_start, budget)
    cores, start, used = [], None, 0
    for a, b in pieces:
        room = size if not cores else budget
        if start is not None and used + (b - a) > room:
            cores.append((start, a))
            start, used = None, 0
        if start is None:
            start = a
        used += b - a
        fits = len(spans) - start <= room
        if used >= min_tokens and not fits and zlib.crc32(text[spans[a][0]:spans[b - 1][1]].encode()) % 2 == 0:
            cores.append((start, b))
            start, used = None, 0
    if start is not None:
        cores.append((start, pieces[-1][1]))
    chunks = []
    for k, (a, b) in enumerate(cores):
        if k and overlap:
            early = max(cores[k - 1][0], a - overlap)
            while early < a and not word_start[early]:
                early += 1
            a = early
        chunks.append((a, b))
    return chunks


def reference_chunks(text: str, size: int, overlap: int, min_tokens: int | None = None) -> list[tuple[int, int, int, int]]:
    """(first token, end token, start char, end char) of each chunk, as the whole-document chunker cut them."""
    spans = token_spans(text)
    min_tokens = (2 * size) // 3 if min_tokens is None else min_tokens
    return [(a, b, spans[a][0], spans[b - 1][1]) for a, b in plan_chunks(text, spans, size, overlap, min_tokens)]
