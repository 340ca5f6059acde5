"""Candidate pairs for entity resolution, without comparing every key with every other.

Exact blocking on the normalized key happens before (one key = one group of mentions). Here:
- token blocking: a key is paired with the keys that contain all its tokens, looked up in the
  block of its rarest token ('scrooge' -> 'ebenezer scrooge'; initials match the words they
  start). Blocks larger than `max_block` (a common first name) are skipped: O(keys * max_block).
- character n-gram neighbours: hashed 3-gram counts, top-k by cosine (faiss on CPU through
  ngram_hits, which an update keeps; cuVS on GPU through graphwright.engines.vectors.neighbours),
  for typos and spelling variants.
- embedding neighbours (optional): the same search over name + description embeddings.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from graphwright.engines.vectors.neighbours import neighbours, ngram_vectors
from graphwright.stages.resolve.ngram_hits import NgramHits, ngram_hits
from graphwright.stages.resolve.scoring import contained
from graphwright.util.numeric import unique


def token_pairs(keys: list[str], max_block: int) -> np.ndarray:
    """Sorted codes i * len(keys) + j, i < j, of the pairs token blocking finds."""
    blocks: dict[str, list[int]] = defaultdict(list)
    tokens = [k.split() for k in keys]
    for i, toks in enumerate(tokens):
        for t in set(toks):
            blocks[t].append(i)
    n, pairs = len(keys), set()
    for i, toks in enumerate(tokens):
        long_tokens = [t for t in toks if len(t) >= 3]
        if not long_tokens or len(toks) > 4:
            continue
        rarest = min(long_tokens, key=lambda t: (len(blocks[t]), t))
        block = blocks[rarest]
        if len(block) > max_block:
            continue
        for j in block:
            if j != i and len(tokens[j]) > len(toks) and contained(tuple(toks), tuple(tokens[j])):
                pairs.add(min(i, j) * n + max(i, j))
    return np.array(sorted(pairs), dtype=np.int64)


def vector_pairs(vectors: np.ndarray, k: int, min_cosine: float, engine: str) -> np.ndarray:
    return pairs_above(*neighbours(vectors, k, engine), min_cosine)


def pairs_above(scores: np.ndarray, idx: np.ndarray, min_cosine: float) -> np.ndarray:
    """Sorted codes i * n + j, i < j, of a neighbour search's rows and hits scoring at least
    `min_cosine` (n rows searched)."""
    rows, cols = np.nonzero((scores >= min_cosine) & (idx >= 0))
    js = idx[rows, cols].astype(np.int64)
    return unique(np.minimum(rows, js) * len(scores) + np.maximum(rows, js))


def candidate_pairs(keys: list[str], config, embeddings: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """{generator: sorted codes i * len(keys) + j, i < j} over indices into `keys` (sorted, so the
    same keys give the same pairs whatever order the mentions came in). Codes, not tuples: a
    145k-chunk index has hundreds of thousands of candidates, merged and filtered in numpy."""
    return searched_candidates(keys, config, embeddings)[0]


def searched_candidates(keys: list[str], config, embeddings: np.ndarray | None = None, before: NgramHits | None = None,
                        old_keys: list[str] | None = None) -> tuple[dict[str, np.ndarray], NgramHits | None]:
    """candidate_pairs, and the n-gram hits they came from (with faiss; None with cuVS), made
    from `before` (the hits of `old_keys`) where it can (ngram_hits)."""
    out = {"tokens": token_pairs(keys, config.max_block)}
    hits = None
    if config.ann_engine == "faiss":
        hits = ngram_hits(keys, config, before, old_keys)
        out["ngrams"] = hits.pairs(len(keys))
    else:
        out["ngrams"] = vector_pairs(ngram_vectors(keys, config.ngram_dim), config.neighbours_k, config.min_ngram_cosine, config.ann_engine)
    if embeddings is not None:
        out["embedding"] = vector_pairs(embeddings, config.neighbours_k, config.min_embedding_cosine, config.ann_engine)
    return out, hits
