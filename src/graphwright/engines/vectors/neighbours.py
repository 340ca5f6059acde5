"""Approximate nearest neighbours for entity resolution, one interface over two engines.

`neighbours(vectors, k, engine)` returns, for every row of an L2-normalized float32 matrix, its k
most similar other rows by inner product (cosine): `(scores [n, k], indices [n, k])`, -1 where
there are fewer than k others.

- faiss (CPU, default): exact flat search up to `exact_up_to` rows (quadratic), else IVF-Flat
  whose list centroids are rows picked by a hash of their content (the rows hashing lowest),
  nothing trained. A row's list, and so its neighbours, then depend on the rows near it, not on
  the whole set: when an update adds or removes a few keys, the other keys keep their neighbours
  and linking scores only the pairs that changed. On the 41k name keys of the 145k-chunk
  benchmark, removing 10 keys and adding 6 left 167 new pairs among 294,304 (62 of them with an
  added key), where a k-means IVF (trained on rows picked by position) made 13,568 of 290,145
  new, which linking then scored (0.6 s of the update) and kept in its cache for good. 512 lists
  probed 24 at a time find 94.5% of the exact search's pairs there (the k-means IVF 94.3%) in
  about the same time (bench/ngram_neighbours.py). Resolve searches that IVF through
  count_neighbours.py, which ranks by exact cosine so that an update can search only some keys
  (96.5% of the exact search's pairs there).
- cuvs (GPU, optional [gpu] extra): brute force up to `exact_up_to` rows, else CAGRA. Imported
  lazily, never needed on the CPU path.
"""

from __future__ import annotations

import zlib

import numpy as np

from graphwright.util.numeric import spans, unique_inverse


def ngram_vectors(texts: list[str], dim: int = 128, n: int = 3) -> np.ndarray:
    """ngram_counts, L2-normalized, so that inner product approximates n-gram cosine similarity."""
    out = ngram_counts(texts, dim, n)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norms, 1e-12)


def ngram_counts(texts: list[str], dim: int = 128, n: int = 3) -> np.ndarray:
    """Hashed character n-gram counts ('#scrooge#' -> '#sc', 'scr', ...) as float32. crc32
    hashing is the same in every process (Python's hash() is salted per process). A text shorter
    than n is one gram.

    The grams are found in numpy over the texts' code points and each distinct gram is hashed
    once: on the 41k name keys of the 145k-chunk index, 0.14 s where hashing every gram
    occurrence in Python took 0.49 s, which every update whose key set changed paid."""
    if not 1 <= n <= 3:  # a gram's code points are packed into one int64, 21 bits each
        raise ValueError(f"n-grams of 1 to 3 characters are supported, not {n}")
    out = np.zeros((len(texts), dim), dtype=np.float32)
    if not len(texts):
        return out
    padded = [f"#{text}#" for text in texts]
    lengths = np.fromiter(map(len, padded), np.int64, len(padded))
    points = np.frombuffer("".join(padded).encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int64)
    starts, ends = np.cumsum(lengths) - lengths, np.cumsum(lengths)
    grams = np.maximum(lengths - n + 1, 1)
    row = np.repeat(np.arange(len(texts)), grams)
    at = spans(starts, grams)
    end = np.repeat(ends, grams)
    code = np.zeros(len(row), dtype=np.int64)
    for d in range(n):  # a position past the text's end holds NO_POINT
        point = np.where(at + d < end, points[np.minimum(at + d, len(points) - 1)], _NO_POINT)
        code = (code << 21) | point
    distinct, inverse = unique_inverse(code)
    bucket = np.array([zlib.crc32(_gram(c, n).encode("utf-8", "surrogatepass")) % dim for c in distinct.tolist()], dtype=np.int64)
    counts = np.bincount(row * dim + bucket[inverse], minlength=len(texts) * dim)
    out[:] = counts.reshape(len(texts), dim)
    return out


_NO_POINT = (1 << 21) - 1  # above every Unicode code point (0x10FFFF)


def _gram(code: int, n: int) -> str:
    points = [(code >> (21 * (n - 1 - d))) & _NO_POINT for d in range(n)]
    return "".join(chr(p) for p in points if p != _NO_POINT)


def ivf_lists(n: int) -> int:
    """The IVF's number of lists for n rows: the power of two nearest 2 sqrt(n). It changes only
    where n crosses 2^(2k-1) (8,192, 32,768, 131,072 rows...): an update that crosses one moves
    every row's list once, as a k-means IVF did on every update."""
    return 1 << max(0, round(np.log2(2 * np.sqrt(max(n, 1)))))


IVF_PROBES = 24
EXACT_UP_TO = 20_000  # rows searched exactly (flat); above, the IVF


def row_hashes(vectors: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes (multiply-xorshift over its 32-bit words), the same in
    every process and whatever the other rows."""
    words = np.ascontiguousarray(vectors).view(np.uint32)
    out = np.zeros(len(words), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in range(words.shape[1]):
            out = (out ^ words[:, c].astype(np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
            out ^= out >> np.uint64(31)
    return out


def ivf_centroids(vectors: np.ndarray, exact_up_to: int) -> np.ndarray | None:
    """The rows that are the IVF's list centroids (those hashing lowest), sorted; None where the
    search is exact (up to `exact_up_to` rows)."""
    return None if len(vectors) <= exact_up_to else hashed_centroids(row_hashes(vectors), exact_up_to)


def hashed_centroids(hashes: np.ndarray, exact_up_to: int) -> np.ndarray | None:
    """ivf_centroids of the rows whose row_hashes are `hashes`."""
    n = len(hashes)
    if n <= exact_up_to:
        return None
    return np.sort(np.argsort(hashes, kind="stable")[:min(ivf_lists(n), n)])


def _faiss_search(vectors: np.ndarray, k: int, exact_up_to: int) -> tuple[np.ndarray, np.ndarray]:
    import faiss

    n, dim = vectors.shape
    if n <= exact_up_to:
        index = faiss.IndexFlatIP(dim)
    else:
        centroids = ivf_centroids(vectors, exact_up_to)
        nlist = len(centroids)
        quantizer = faiss.IndexFlatIP(dim)
        quantizer.add(np.ascontiguousarray(vectors[centroids]))  # holding nlist rows, the IVF counts as trained
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.nprobe = min(IVF_PROBES, nlist)
    index.add(vectors)
    return index.search(vectors, k + 1)


def _to_device(vectors: np.ndarray):
    try:
        import cupy as cp

        return cp.asarray(vectors)
    except ImportError:
        from pylibraft.common import device_ndarray

        return device_ndarray(vectors)


def _to_host(array) -> np.ndarray:
    return np.asarray(array.copy_to_host() if hasattr(array, "copy_to_host") else array.get())


def _cuvs_search(vectors: np.ndarray, k: int, exact_up_to: int) -> tuple[np.ndarray, np.ndarray]:
    from cuvs.neighbors import brute_force, cagra

    data = _to_device(vectors)
    if vectors.shape[0] <= exact_up_to:
        index = brute_force.build(data, metric="inner_product")
        _, indices = brute_force.search(index, data, k + 1)
    else:
        index = cagra.build(cagra.IndexParams(metric="inner_product"), data)
        _, indices = cagra.search(cagra.SearchParams(), index, data, k + 1)
    idx = _to_host(indices).astype(np.int64)
    # scores recomputed on the host: one convention (cosine, best first) whatever the engine returns
    valid = (idx >= 0) & (idx < vectors.shape[0])
    scores = np.where(valid, np.einsum("nd,nkd->nk", vectors, vectors[np.where(valid, idx, 0)]), -np.inf)
    order = np.argsort(-scores, axis=1, kind="stable")
    return np.take_along_axis(scores, order, 1).astype(np.float32), np.take_along_axis(np.where(valid, idx, -1), order, 1)


ENGINES = {"faiss": _faiss_search, "cuvs": _cuvs_search}


def neighbours(vectors: np.ndarray, k: int, engine: str = "faiss", exact_up_to: int = EXACT_UP_TO) -> tuple[np.ndarray, np.ndarray]:
    """Top-k neighbours of each row among the other rows (self excluded), best first."""
    n = vectors.shape[0]
    if n < 2 or k < 1:
        return np.zeros((n, 0), np.float32), np.zeros((n, 0), np.int64)
    k = min(k, n - 1)
    scores, idx = ENGINES[engine](np.ascontiguousarray(vectors, dtype=np.float32), k, exact_up_to)
    scores, idx = np.asarray(scores, np.float32), np.asarray(idx, np.int64)
    # drop the row itself (not always first: exact duplicates tie with it); invalid hits are -1
    keep = (idx != np.arange(n)[:, None]) & (idx >= 0)
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
    scores, idx, keep = (np.take_along_axis(a, order, axis=1) for a in (scores, idx, keep))
    return np.where(keep, scores, -np.inf).astype(np.float32), np.where(keep, idx, -1)
