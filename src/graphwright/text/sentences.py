"""Sentence spans of plain text: the boundary rule shared by chunking, the `nlp` extractor and
extractive reports (abbreviations and initials do not end a sentence)."""

from __future__ import annotations

import re
from collections.abc import Iterator

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "rev", "capt", "gen", "col", "sgt", "gov",
    "sen", "no", "vs", "etc", "inc", "ltd", "co", "corp", "mt", "ft", "e.g", "i.e", "u.s", "u.k",
}
_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]*[A-Z0-9])|\n\s*\n")


def split_sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of sentences; abbreviations and initials do not end one."""
    return list(iter_sentences(text))


def iter_sentences(text: str) -> Iterator[tuple[int, int]]:
    """split_sentences one span at a time (the regex scans lazily: a 50 MB document need not
    hold millions of spans at once)."""
    start = 0
    for match in _BOUNDARY.finditer(text):
        last_word = _last_word(text, start, match.start())
        if match.group(0).strip() == "" and "\n" not in match.group(0):
            if last_word in _ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha()):
                continue
        if not _blank(text, start, match.start()):
            yield start, match.start()
        start = match.end()
    if not _blank(text, start, len(text)):
        yield start, len(text)


def _last_word(text: str, start: int, end: int) -> str:
    """The last word of text[start:end] without its closing quotes and punctuation, read from
    the tail only where the tail holds the whole word: with abbreviations skipped, `start`
    stays put, and copying from it at every boundary made "A. B. C. ..." quadratic."""
    tail_start = max(start, end - 64)
    while True:
        before = text[tail_start:end].rstrip("\"'”’)]").rstrip(".!?")
        words = before.split()
        if tail_start == start or len(words) > 1 or (words and before[0].isspace()):
            return words[-1].casefold() if words else ""
        tail_start = max(start, end - 8 * (end - tail_start))


_NOT_SPACE = re.compile(r"\S")


def _blank(text: str, a: int, b: int) -> bool:
    return _NOT_SPACE.search(text, a, b) is None
