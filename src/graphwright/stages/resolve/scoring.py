"""Pair scoring for entity resolution: is name key `a` the same thing as name key `b`?

A key is a normalized name (graphwright.text.names) with what the corpus says about it: its types,
the chunks that mention it, the keys it is related to, and optionally an embedding of its name
and description. The score is

    0 if both keys have known, different types (PERSON vs GEO), else
    W_NAME * name + W_CONTEXT * context

where `name` is the best of spelling similarity (typos, variants) and person-style containment
('scrooge' ends 'ebenezer scrooge', 'j smith' ~ 'john smith'), and `context` is the best of the
overlap of related keys, the overlap of supporting chunks and the embedding cosine. A name alone
(no shared context) stays below the default accept threshold: two different people can share a
surname or differ by one letter. Every input is a function of the current mentions and
assertions, so a merge disappears with the evidence for it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from rapidfuzz.distance import DamerauLevenshtein

from graphwright.text.names import FEMALE_HONORIFICS

W_NAME, W_CONTEXT = 0.7, 0.3
CONTAINED = 0.9  # name score of a full token containment
UNTYPED = {"", "ENTITY", "UNKNOWN", "OTHER"}


class CodeSet:
    """A set of integer codes held as a sorted numpy array (typically a slice of one shared
    array): what `overlap` needs (len, &, in) at 4 bytes an item instead of a Python set's ~60."""

    __slots__ = ("codes",)

    def __init__(self, codes: np.ndarray):
        self.codes = codes

    def __len__(self) -> int:
        return len(self.codes)

    def __contains__(self, item) -> bool:
        i = int(np.searchsorted(self.codes, item))
        return i < len(self.codes) and self.codes[i] == item

    def __and__(self, other: CodeSet) -> np.ndarray:
        small, big = (self.codes, other.codes) if len(self.codes) <= len(other.codes) else (other.codes, self.codes)
        if not len(big):
            return big
        at = np.minimum(np.searchsorted(big, small), len(big) - 1)
        return small[big[at] == small]


@dataclass
class KeyProfile:
    key: str
    mentions: int = 0
    types: dict = field(default_factory=dict)  # type -> mentions
    chunks: set | CodeSet = field(default_factory=set)
    neighbours: set | CodeSet = field(default_factory=set)  # related keys, as their codes
    text: str = ""  # name and description, for the embedding
    code: int = -1  # this key's code among its neighbours' codes

    @property
    def tokens(self) -> tuple[str, ...]:
        return tuple(self.key.split())

    @functools.cached_property
    def known_type(self) -> str | None:
        typed = [(-n, t) for t, n in self.types.items() if t not in UNTYPED]
        return min(typed)[1] if typed else None


@dataclass(frozen=True)
class PairEvidence:
    a: str
    b: str
    score: float
    name: float
    contained: bool
    neighbours: float | None  # None: not computed (PairScorer.bounded)
    chunks: float | None
    embedding: float | None
    types: str  # "compatible", "untyped" or "A != B"

    def describe(self) -> str:
        if self.neighbours is None:  # PairScorer.bounded: the name alone kept it low
            return f"score at most {self.score:.2f}: name {self.name:.2f}, types {self.types}"
        parts = [f"name {self.name:.2f}" + (" (contained)" if self.contained else ""),
                 f"related {self.neighbours:.2f}", f"chunks {self.chunks:.2f}"]
        if self.embedding is not None:
            parts.append(f"embedding {self.embedding:.2f}")
        return f"score {self.score:.2f}: " + ", ".join(parts) + f", types {self.types}"


CONNECTORS = {"of", "the", "de", "da", "del", "della", "di", "van", "von", "der", "den", "du", "la", "le", "al", "and", "&", "for", "in", "on"}


def _token_match(short: str, long: str) -> bool:
    return short == long or (len(short) == 1 and long.startswith(short)) or (len(long) == 1 and short.startswith(long))


def contained(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Person-style containment: the shorter name is the tail of the longer ('scrooge' ->
    'ebenezer scrooge'), or they differ only by initials ('j smith' ~ 'john smith'). 'espn' in
    'espn radio' or 'stamford bridge' in 'battle of stamford bridge' is not: a name that extends
    another to the right, or through 'of', names a different thing."""
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    if not short or len(long) > 4 or CONNECTORS & set(long) or short == long:
        return False
    head, tail = long[:len(long) - len(short)], long[len(long) - len(short):]
    if FEMALE_HONORIFICS & set(head):
        return False  # 'Mrs. Bilson' is not 'Bilson' (graphwright.text.names.resolution_key)
    if not all(_token_match(s, t) for s, t in zip(short, tail)):
        return False
    return any(len(s) >= 3 and s == t for s, t in zip(short, tail)) and len(short[-1]) >= 3


def spelling_score(a: str, b: str) -> float:
    """Similarity as a spelling variant: Damerau-Levenshtein similarity (a swap of two letters is
    one edit), lifted towards 1 for long names (one edit in 'masterton' is a typo, in 'tarbox' it
    may be another name); 0 when an aligned word differs as a word rather than by a typo ('south
    africa' vs 'south america'); discounted when one name is the other plus a suffix ('armenia' /
    'armenian')."""
    ta, tb = a.split(), b.split()
    if len(ta) != len(tb):
        return 0.0
    for x, y in zip(ta, tb):
        if x != y and (min(len(x), len(y)) < 4 or DamerauLevenshtein.normalized_similarity(x, y) < 0.75):
            return 0.0
    score = DamerauLevenshtein.normalized_similarity(a, b)
    if min(len(a), len(b)) >= 8 and score >= 0.8:
        score = 0.9 + (score - 0.8) / 2
    short, long = sorted((a, b), key=len)
    if long.startswith(short) and len(long) - len(short) <= 3:
        score *= 0.85
    return score


def name_score(a: str, b: str) -> tuple[float, bool]:
    is_contained = contained(tuple(a.split()), tuple(b.split()))
    return max(spelling_score(a, b), CONTAINED if is_contained else 0.0), is_contained


def overlap(x: set, y: set, exclude: tuple = (), full_at: int = 2) -> float:
    """Overlap coefficient of x and y leaving out `exclude`, discounted below `full_at` shared
    items (one shared hub neighbour is weak evidence). No copies: popular keys have large sets."""
    shared = len(x & y) if len(x) <= len(y) else len(y & x)
    nx, ny = len(x), len(y)
    for item in exclude:
        in_x, in_y = item in x, item in y
        nx, ny, shared = nx - in_x, ny - in_y, shared - (in_x and in_y)
    if nx <= 0 or ny <= 0 or shared <= 0:
        return 0.0
    return shared / min(nx, ny) * min(1.0, shared / full_at)


class PairScorer:
    """Scores key pairs, memoized (clustering asks for the same pairs again)."""

    def __init__(self, profiles: dict[str, KeyProfile], vectors: dict[str, np.ndarray] | None = None,
                 names: dict[tuple[str, str], tuple[float, bool]] | None = None):
        self.profiles = profiles
        self.vectors = vectors
        self.names = names or {}  # (a, b) -> name_score(a, b), known from an earlier run
        self._memo: dict[tuple[str, str], PairEvidence] = {}

    def __call__(self, a: str, b: str) -> PairEvidence:
        a, b = min(a, b), max(a, b)
        got = self._memo.get((a, b))
        if got is None:
            got = self._memo[(a, b)] = self._score(a, b)
        return got

    def bounded(self, a: str, b: str, below: float) -> PairEvidence:
        """The pair's evidence, or, when its name (and embedding) keep it under `below` whatever
        its context, evidence that says so without the context's overlaps: `score` is then an
        upper bound, `neighbours` and `chunks` are None, and nothing is memoized (a caller asking
        for the pair's score gets it whole). Most candidate pairs are such: 94% of the n-gram
        candidates of the 145k-chunk index have a name score under 0.43."""
        a, b = min(a, b), max(a, b)
        got = self._memo.get((a, b))
        if got is not None:
            return got
        name, is_contained = self.names.get((a, b)) or name_score(a, b)
        emb = None if self.vectors is None else float(np.dot(self.vectors[a], self.vectors[b]))
        # context is at most 1 (overlap coefficients; an embedding cosine may pass it by rounding)
        upper = W_NAME * name + W_CONTEXT * max(1.0, emb or 0.0)
        if upper + 1e-6 >= below:  # +1e-6: the score is rounded to 6 places
            got = self._memo[(a, b)] = self._score(a, b, (name, is_contained))
            return got
        return PairEvidence(a, b, round(upper, 6), name, is_contained, None, None, emb, self._types(a, b))

    def _types(self, a: str, b: str) -> str:
        pa_, pb = self.profiles[a], self.profiles[b]
        ta, tb = pa_.known_type, pb.known_type
        if ta and tb and ta != tb and pa_.types.get(tb, 0) * 3 < pa_.mentions and pb.types.get(ta, 0) * 3 < pb.mentions:
            return f"{ta} != {tb}"
        return "compatible" if ta and tb else "untyped"

    def _score(self, a: str, b: str, named: tuple[float, bool] | None = None) -> PairEvidence:
        """`named`: the pair's name_score if already known."""
        pa_, pb = self.profiles[a], self.profiles[b]
        types = self._types(a, b)
        name, is_contained = named or self.names.get((a, b)) or name_score(a, b)
        neigh = overlap(pa_.neighbours, pb.neighbours, (pa_.code, pb.code))
        chunks = overlap(pa_.chunks, pb.chunks)
        emb = None
        if self.vectors is not None:
            emb = float(np.dot(self.vectors[a], self.vectors[b]))
        context = max(neigh, chunks, emb or 0.0)
        score = 0.0 if "!=" in types else W_NAME * name + W_CONTEXT * context
        return PairEvidence(a, b, round(score, 6), name, is_contained, neigh, chunks, emb, types)
