"""Sentence spans of plain text: the boundary rule shared by chunking, the `nlp` extractor and
extractive reports (abbreviations and initials do not end a sentence)."""

from __future__ import annotations

import re

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "rev", "capt", "gen", "col", "sgt", "gov",
    "sen", "no", "vs", "etc", "inc", "ltd", "co", "corp", "mt", "ft", "e.g", "i.e", "u.s", "u.k",
}
_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]*[A-Z0-9])|\n\s*\n")


def split_sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of sentences; abbreviations and initials do not end one."""
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
