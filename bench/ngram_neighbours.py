"""Resolve's n-gram candidate search (engines.vectors.neighbours, faiss IVF-Flat whose centroids
are rows picked by a hash of their content) side by side with the k-means IVF it replaced
(sqrt(n) lists trained on rows picked by position, 8 probed) on one key set: seconds, the share
of an exact search's candidate pairs each finds, and how many pairs of the keys an edit leaves
alone change when it removes `--gone` keys and adds `--added` (each an existing key with one
letter changed), which an update's linking then scores.

    python bench/ngram_neighbours.py --index DIR/index-120000     # the name keys of a built index
    python bench/ngram_neighbours.py --names 40000                # generated names
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np


def index_keys(path: str) -> list[str]:
    from graphwright.storage.delta import IndexStore
    from graphwright.text.names import resolution_key

    aliases = IndexStore(path).read("entity_aliases", columns=["alias"]).column("alias").to_pylist()
    return sorted({resolution_key(a) for a in aliases})


def generated_keys(n: int) -> list[str]:
    rng = random.Random(7)
    syllables = ["ka", "lo", "mi", "ren", "dor", "vel", "sa", "tu", "bri", "gan", "hol", "mer", "ost", "pa", "qui", "zen"]
    word = lambda: "".join(rng.choice(syllables) for _ in range(rng.randint(2, 3)))  # noqa: E731
    return sorted({" ".join(word() for _ in range(rng.randint(1, 3))) for _ in range(n)})


def kmeans_search(vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The search before: k-means over 64 rows per list picked by position, sqrt(n) lists, 8 probed."""
    import faiss

    n, dim = vectors.shape
    nlist = max(1, int(np.sqrt(n)))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors[np.linspace(0, n - 1, min(n, 64 * nlist)).astype(np.int64)])
    index.nprobe = 8
    index.add(vectors)
    scores, idx = index.search(vectors, k + 1)
    keep = (idx != np.arange(n)[:, None]) & (idx >= 0)
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
    scores, idx, keep = (np.take_along_axis(x, order, axis=1) for x in (scores, idx, keep))
    return np.where(keep, scores, -np.inf), np.where(keep, idx, -1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index")
    p.add_argument("--names", type=int, default=40_000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--min-cosine", type=float, default=0.3)
    p.add_argument("--gone", type=int, default=10)
    p.add_argument("--added", type=int, default=6)
    a = p.parse_args()
    from graphwright.engines.vectors import neighbours as nb
    from graphwright.stages.resolve.candidates import pairs_above

    keys = index_keys(a.index) if a.index else generated_keys(a.names)
    rng = random.Random(1)
    gone = set(rng.sample(keys, a.gone))
    added = {k[:-1] + ("x" if k[-1] != "x" else "y") for k in rng.sample(keys, a.added)} - set(keys)
    edited = sorted((set(keys) - gone) | added)
    started = time.perf_counter()
    exact = pairs_above(*nb.neighbours(nb.ngram_vectors(keys, 128), a.k, exact_up_to=10**12), a.min_cosine)
    print(f"{len(keys):,} keys; exact search {time.perf_counter() - started:.1f} s, {len(exact):,} pairs; "
          f"the edit removes {len(gone)} keys and adds {len(added)}")
    searches = {"k-means IVF (before)": lambda v: kmeans_search(v, a.k),
                f"hashed-row IVF ({nb.ivf_lists(len(keys))} lists, {nb.IVF_PROBES} probed)": lambda v: nb.neighbours(v, a.k, exact_up_to=0)}
    for label, search in searches.items():
        found, seconds = {}, 0.0
        for name, ks in (("keys", keys), ("edited", edited)):
            started = time.perf_counter()
            codes = pairs_above(*search(nb.ngram_vectors(ks, 128)), a.min_cosine)
            seconds = seconds or time.perf_counter() - started
            found[name] = {(ks[c // len(ks)], ks[c % len(ks)]) for c in codes.tolist()}
            if name == "keys":
                recall = len(np.intersect1d(codes, exact)) / max(len(exact), 1)
        moved = {pair for pair in found["keys"] ^ found["edited"] if not set(pair) & (gone | added)}
        print(f"{label:<38} {seconds:6.2f} s  {len(found['keys']):,} pairs, {recall:.1%} of the exact ones; "
              f"after the edit {len(moved):,} pairs of untouched keys changed "
              f"({len(found['edited'] - found['keys']):,} new pairs in all)")


if __name__ == "__main__":
    main()
