"""Neighbours of count vectors (hashed n-gram counts) by exact cosine: a row's neighbours are the
same whether it is searched alone or with every other row.

faiss finds the candidates by float32 inner product of the normalized vectors (flat, or the IVF
of neighbours.py, whose centroids are the rows hashing lowest: the caller passes them). Unlike
neighbours.py's own IVF (used for embeddings), which faiss fills and probes by float32 order,
here the list each row is put in, the lists a query probes and the order of the hits are decided
by exact dot products, ties by row: dot products of integer counts are integers, which float32 holds
exactly below 2^24 whatever order BLAS sums them in, and a few more hits than k are asked of
faiss and ranked again. So a row's neighbours depend only on its counts, the centroids and the
members of the lists it probes: not on the batch it was searched in (faiss takes BLAS for 20
queries or more and SIMD loops below), nor on the order a heap kept equal scores in. That is
what lets an update search again only the rows a change can reach (stages.resolve.ngram_hits).
"""

from __future__ import annotations

import numpy as np

from graphwright.engines.vectors.neighbours import IVF_PROBES

MARGIN = 4  # hits asked of faiss beyond k and the row itself, ranked again exactly
# how far faiss's float32 inner product of two normalized 128-dimension vectors can be from their
# exact cosine, twice ((d + 2) * 2^-24 each): a hit faiss did not return can score up to the last
# one it did plus this, so a row whose k-th hit is within it of that last one is asked for more
FLOAT32_SLACK = 2 * 130 * 2.0 ** -24
BLOCK = 4096  # rows per block of exact cosines (a block against 512 centroids: 16 MB)


class CountSpace:
    """Count vectors with their norms, normalized vectors and exact cosines."""

    def __init__(self, counts: np.ndarray):
        squares = np.einsum("ij,ij->i", counts.astype(np.float64), counts.astype(np.float64))
        self.norms = np.sqrt(squares)
        # a dot product is at most the largest squared norm: float32 holds it exactly below 2^24
        self._counts = counts.astype(np.float32 if not len(squares) or squares.max() < 2 ** 24 else np.float64)
        self.vectors = (counts / np.maximum(self.norms, 1e-12)[:, None]).astype(np.float32)
        self._inverse = (1 / np.maximum(self.norms, 1e-12)).astype(np.float32)

    def __len__(self) -> int:
        return len(self.norms)

    def cosines(self, a: np.ndarray | None, b: np.ndarray) -> np.ndarray:
        """[len(a), len(b)] exact cosines between rows a (every row if None) and rows b."""
        dots = ((self._counts if a is None else self._counts[a]) @ self._counts[b].T).astype(np.float64)
        return dots / np.maximum(np.outer(self.norms if a is None else self.norms[a], self.norms[b]), 1e-300)

    def centroid_ranks(self, rows: np.ndarray, centroids: np.ndarray, other: CountSpace | None = None) -> np.ndarray:
        """[len(rows), len(centroids)] what a row's list and probes are chosen by: its dot product
        with each centroid (exact) times the centroid's inverse norm, in float32, the same value
        wherever it is computed (`other`: the space the centroid rows are of; this one by
        default). Cheaper than the cosines, and only their order per row matters."""
        of = other or self
        return (self._counts[rows] @ of._counts[centroids].T).astype(np.float32) * of._inverse[centroids]

    def paired(self, rows: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """[len(rows), w] exact cosine of each row with the rows `idx` lists for it (-inf at -1)."""
        out = np.empty(idx.shape, np.float64)
        for s in range(0, len(rows), BLOCK):
            r, i = rows[s:s + BLOCK], idx[s:s + BLOCK]
            dots = np.einsum("rd,rwd->rw", self._counts[r], self._counts[np.maximum(i, 0)]).astype(np.float64)
            out[s:s + BLOCK] = dots / np.maximum(self.norms[r][:, None] * self.norms[np.maximum(i, 0)], 1e-300)
        return np.where(idx >= 0, out, -np.inf)


def count_neighbours(space: CountSpace, k: int, centroids: np.ndarray | None,
                     rows: np.ndarray | None = None, lists: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores [r, k], indices [r, k]) of each of `rows` (all by default): its k most similar
    other rows by exact cosine, best first, ties by row; -inf and -1 where there are fewer.
    `centroids`: the IVF's centroid rows (neighbours.ivf_centroids), None for a flat search;
    `lists`: each row's list (list_of), if the caller made them already."""
    import faiss

    n, every = len(space), rows is None
    rows = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
    k = min(k, n - 1)
    if k < 1 or not len(rows):
        return np.full((len(rows), max(k, 0)), -np.inf), np.full((len(rows), max(k, 0)), -1, np.int64)
    want, dim = min(k + 1 + MARGIN, n), space.vectors.shape[1]
    if centroids is None:
        index = faiss.IndexFlatIP(dim)
        index.add(space.vectors)

        def search(at: np.ndarray, w: int) -> np.ndarray:
            return index.search(space.vectors[rows[at]], w)[1]
    else:
        index, probes = _ivf(space, centroids, None if every else rows, lists)

        def search(at: np.ndarray, w: int) -> np.ndarray:  # IVF-Flat scans do not read the probes' distances
            return index.search_preassigned(space.vectors[rows[at]], w, probes[at], np.zeros(probes[at].shape, np.float32))[1]
    scores, idx = np.full((len(rows), k), -np.inf), np.full((len(rows), k), -1, np.int64)
    todo = np.arange(len(rows))
    while len(todo):  # a row whose k-th hit ties with the last faiss gave is asked for twice as many
        top_s, top_i, tied = _ranked(space, rows[todo], np.asarray(search(todo, want), np.int64), k)
        done = ~tied | (want >= n)
        scores[todo[done]], idx[todo[done]] = top_s[done], top_i[done]
        todo, want = todo[~done], min(2 * want, n)
    return scores, idx


def _ranked(space: CountSpace, rows: np.ndarray, found: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best k of the hits faiss `found` for `rows` by exact cosine, ties by row, and whether
    each row's k-th ties with (or is within float32 of) the last hit found: hits faiss did not
    return may tie with it too."""
    filled = (found >= 0).all(axis=1)
    found = np.where(found == rows[:, None], -1, found)  # the row itself
    scores = space.paired(rows, found)
    order = np.lexsort((np.where(found >= 0, found, len(space)), -scores), axis=1)[:, :k]
    top_s, top_i = np.take_along_axis(scores, order, 1), np.take_along_axis(found, order, 1)
    lowest = np.where(found >= 0, scores, np.inf).min(axis=1)
    tied = filled & np.isfinite(top_s[:, -1]) & (lowest >= top_s[:, -1] - FLOAT32_SLACK)
    return top_s, np.where(np.isfinite(top_s), top_i, -1), tied


def list_of(ranks: np.ndarray) -> np.ndarray:
    """Each row's IVF list: the centroid it ranks first (centroid_ranks), the first on ties."""
    return np.argmax(ranks, axis=1)


def _ivf(space: CountSpace, centroids: np.ndarray, rows: np.ndarray | None, lists: np.ndarray | None = None):
    """An IVF-Flat index of every row, each in its list (`lists`, else list_of), and the lists
    each of `rows` (every row if None) probes (centroid_ranks)."""
    import faiss

    n, dim = space.vectors.shape
    quantizer = faiss.IndexFlatIP(dim)
    quantizer.add(np.ascontiguousarray(space.vectors[centroids]))  # holding the lists' centroids, it counts as trained
    index = faiss.IndexIVFFlat(quantizer, dim, len(centroids), faiss.METRIC_INNER_PRODUCT)
    index.nprobe = p = min(IVF_PROBES, len(centroids))
    index.parallel_mode = 3  # search_preassigned splits the queries over the threads itself
    every = rows is None  # every row is a query: one pass of ranks serves both
    assign, probes = np.empty(n, np.int64) if lists is None else np.ascontiguousarray(lists, np.int64), []
    if lists is None or every:
        for s in range(0, n, BLOCK):
            rank = space.centroid_ranks(np.arange(s, min(s + BLOCK, n)), centroids)
            if lists is None:
                assign[s:s + len(rank)] = list_of(rank)
            if every:
                probes.append(top_columns(rank, p))
    if not every:
        probes = [top_columns(space.centroid_ranks(rows[s:s + BLOCK], centroids), p) for s in range(0, len(rows), BLOCK)]
    index.add_core(n, faiss.swig_ptr(space.vectors), None, faiss.swig_ptr(assign))
    return index, np.concatenate(probes).astype(np.int64)


def top_columns(values: np.ndarray, p: int) -> np.ndarray:
    """[rows, p] the columns of each row's p highest values, highest first, ties by column."""
    if p >= values.shape[1]:
        return np.lexsort((np.broadcast_to(np.arange(values.shape[1]), values.shape), -values), axis=1)
    pth = -np.partition(-values, p - 1, axis=1)[:, p - 1:p]
    tied = values == pth
    chosen = (values > pth) | (tied & (np.cumsum(tied, axis=1) <= p - (values > pth).sum(axis=1, keepdims=True)))
    cols = np.nonzero(chosen)[1].reshape(len(values), p)
    return np.take_along_axis(cols, np.lexsort((cols, -np.take_along_axis(values, cols, 1)), axis=1), 1)
