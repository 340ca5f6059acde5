"""Resolve's n-gram candidate search (engines.vectors.neighbours, faiss IVF-Flat) with sqrt(n)
lists (what it uses) and 4 sqrt(n) (what it used), side by side on one key set: k-means and
search seconds, and the share of an exact search's candidate pairs each finds. Then an IVF whose
lists are the n-gram dimensions (a fixed quantizer, nothing trained: the partition an update
could keep), probing 4, 8 and 16 lists.

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


def fixed_lists(vectors: np.ndarray, k: int, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k neighbours (self dropped) in an IVF whose lists are the vectors' dimensions."""
    import faiss

    n, dim = vectors.shape
    quantizer = faiss.IndexFlatIP(dim)
    quantizer.add(np.eye(dim, dtype=np.float32))
    index = faiss.IndexIVFFlat(quantizer, dim, dim, faiss.METRIC_INNER_PRODUCT)
    index.is_trained = True
    index.nprobe = nprobe
    index.add(vectors)
    scores, idx = index.search(vectors, k + 1)
    keep = (idx != np.arange(n)[:, None]) & (idx >= 0)
    return np.where(keep, scores, -1.0), np.where(keep, idx, -1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index")
    p.add_argument("--names", type=int, default=40_000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--min-cosine", type=float, default=0.3)
    a = p.parse_args()
    from graphwright.engines.vectors import neighbours as nb
    from graphwright.stages.resolve.candidates import pairs_above as pairs

    keys = index_keys(a.index) if a.index else generated_keys(a.names)
    vectors = nb.ngram_vectors(keys, 128)
    started = time.perf_counter()
    exact = pairs(*nb.neighbours(vectors, a.k, exact_up_to=10**12), a.min_cosine)
    print(f"{len(keys):,} keys; exact search {time.perf_counter() - started:.1f} s, {len(exact):,} pairs")
    rules = {"4 sqrt(n) lists": lambda n: int(4 * np.sqrt(n)), "sqrt(n) lists": nb.ivf_lists}
    current = nb.ivf_lists
    try:
        for label, rule in rules.items():
            nb.ivf_lists = rule
            started = time.perf_counter()
            found = pairs(*nb.neighbours(vectors, a.k, exact_up_to=0), a.min_cosine)
            print(f"{label:<16} {rule(len(keys)):>6} lists  {time.perf_counter() - started:6.2f} s  "
                  f"{len(found):,} pairs, {len(np.intersect1d(found, exact)) / max(len(exact), 1):.1%} of the exact ones")
    finally:
        nb.ivf_lists = current
    for nprobe in (4, 8, 16):
        started = time.perf_counter()
        found = pairs(*fixed_lists(vectors, a.k, nprobe), a.min_cosine)
        print(f"dimension lists  {nprobe:>3} probed  {time.perf_counter() - started:6.2f} s  "
              f"{len(found):,} pairs, {len(np.intersect1d(found, exact)) / max(len(exact), 1):.1%} of the exact ones")


if __name__ == "__main__":
    main()
