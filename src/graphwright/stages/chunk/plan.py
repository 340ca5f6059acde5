"""Chunk planning (plain functions): token ranges of chunks with content-defined boundaries.

A document is read a window of tokens at a time (text.tokens.token_windows) and its sentences
one at a time (text.sentences.iter_sentences), and only the tokens from the previous chunk's
start on are kept: a 50 MB document, tokenized whole, had held 7.2 GB. The boundaries are the
ones a whole-document pass gives (tests/test_chunking.py holds the two to each other).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from graphwright.text.sentences import iter_sentences
from graphwright.text.tokens import WINDOW_CHARS, token_windows

ANCHOR_EVERY = 2  # after min_tokens, about one sentence in two ends a chunk


def split_spans(spans: list[tuple[int, int]], size: int, overlap: int) -> list[tuple[int, int, int]]:
    """Fixed windows of `size` tokens overlapping by `overlap`: (first token, end token, n_tokens).
    Kept for callers that want plain windows; documents are chunked by `plan_chunks`."""
    if overlap >= size:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than chunk size ({size})")
    n = len(spans)
    windows, start, step = [], 0, size - overlap
    while start < n:
        end = min(start + size, n)
        windows.append((start, end, end - start))
        if end == n:
            break
        start += step
    return windows


class TokenBuffer:
    """The tokens of a text by global index, tokenized a window at a time as they are asked for;
    `release(i)` forgets those before token i."""

    def __init__(self, text: str, window_chars: int = WINDOW_CHARS, spans: list[tuple[int, int]] | None = None):
        """`spans`: the text's token_spans when the caller has them (text.tokens.whole_spans)."""
        self._windows = iter([spans]) if spans is not None else token_windows(text, window_chars)
        self.base = 0  # global index of starts[0]
        self.starts: list[int] = []
        self.ends: list[int] = []
        self._exhausted = False

    def has(self, i: int) -> bool:
        """Whether the text has a token i (tokenizing on to it if needed)."""
        while i >= self.base + len(self.starts) and not self._exhausted:
            window = next(self._windows, None)
            if window is None:
                self._exhausted = True
            elif window:
                starts, ends = zip(*window)
                self.starts.extend(starts)
                self.ends.extend(ends)
        return i < self.base + len(self.starts)

    def start(self, i: int) -> int:
        return self.starts[i - self.base]

    def end(self, i: int) -> int:
        return self.ends[i - self.base]

    def word_start(self, i: int) -> bool:
        """Token i starts a word when whitespace precedes it ('##ling' and ',' do not)."""
        return i == 0 or self.starts[i - self.base] > self.ends[i - 1 - self.base]

    def release(self, i: int) -> None:
        drop = i - 1 - self.base  # token i - 1 stays: word_start(i) compares with it
        if drop > 4096 and drop * 2 > len(self.starts):  # amortized: forget in large steps
            del self.starts[:drop], self.ends[:drop]
            self.base += drop


def _sentence_runs(text: str, tokens: TokenBuffer) -> Iterator[tuple[int, int]]:
    """(first, end) token ranges of the tokens sharing a sentence (the number of sentence starts
    at or before a token's start tells which)."""
    sentences = iter_sentences(text)
    upcoming = next(sentences, None)
    first, current, i = 0, 0, 0
    while tokens.has(i):
        loaded = tokens.base + len(tokens.starts)
        starts, base = tokens.starts, tokens.base
        for j in range(i, loaded):
            at, seen = starts[j - base], current
            while upcoming is not None and upcoming[0] <= at:
                seen += 1
                upcoming = next(sentences, None)
            if j and seen != current:
                yield first, j
                first = j
                starts, base = tokens.starts, tokens.base  # the consumer may have released tokens
            current = seen
        i = loaded
    if i:
        yield first, i


def _pieces(text: str, tokens: TokenBuffer, max_tokens: int) -> Iterator[tuple[int, int]]:
    """Token ranges of sentences; a sentence longer than `max_tokens` is cut at word starts."""
    for a, b in _sentence_runs(text, tokens):
        while b - a > max_tokens:
            cut = a + max_tokens
            while cut > a + 1 and not tokens.word_start(cut):
                cut -= 1
            cut = cut if cut > a + 1 else a + max_tokens  # one 'word' longer than a chunk
            yield a, cut
            a = cut
        yield a, b


def _cores(text: str, tokens: TokenBuffer, size: int, overlap: int, min_tokens: int) -> Iterator[tuple[int, int]]:
    """Chunk token ranges before the overlap: see plan_chunks."""
    budget = size - overlap  # room left for the overlap every chunk but the first starts with
    start, used, emitted, last_end = None, 0, 0, 0
    for a, b in _pieces(text, tokens, budget):
        room = size if not emitted else budget
        if start is not None and used + (b - a) > room:
            yield start, a
            emitted, start, used = emitted + 1, None, 0
        if start is None:
            start = a
        used += b - a
        last_end = b
        fits = not tokens.has(start + room)  # the rest of the document fits: one chunk, no cut
        if used >= min_tokens and not fits and zlib.crc32(text[tokens.start(a):tokens.end(b - 1)].encode("utf-8", "surrogatepass")) % ANCHOR_EVERY == 0:
            yield start, b
            emitted, start, used = emitted + 1, None, 0
    if start is not None:
        yield start, last_end


def plan_chunks(text: str, size: int, overlap: int, min_tokens: int, window_chars: int = WINDOW_CHARS,
                spans: list[tuple[int, int]] | None = None) -> Iterator[tuple[int, int, int, int]]:
    """Chunks with content-defined boundaries: (first token, end token, start char, end char).

    Chunks end at sentence ends: once a chunk holds `min_tokens`, it ends after the first sentence
    whose text hashes to an anchor, or before a sentence that would overflow it. The decision
    depends only on nearby text, so inserting a paragraph changes the chunks around it and
    leaves the ids of the others unchanged (fixed windows would shift every later chunk).
    Each chunk but the first then starts up to `overlap` tokens early, at a word start.
    `spans`: the text's token spans if already known.
    """
    if overlap >= size:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than chunk size ({size})")
    tokens = TokenBuffer(text, window_chars, spans)
    previous = None
    for a, b in _cores(text, tokens, size, overlap, min_tokens):
        if previous is not None and overlap:
            early = max(previous, a - overlap)
            while early < a and not tokens.word_start(early):
                early += 1
            first = early
        else:
            first = a
        yield first, b, tokens.start(first), tokens.end(b - 1)
        tokens.release(a)  # the next chunk's overlap reaches back no further than this one's core
        previous = a
