"""Linking's memory between runs: each key's profile fingerprint, the evidence of every pair
scored, and the candidate pairs of the key set. A pair whose two profiles kept their fingerprints
scores as it did (a score is a function of the two profiles), so an update scores only the pairs
with a changed key; candidates (without embeddings a function of the keys alone) are generated
again only when the key set changed."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.stages.resolve.codes import text_hashes
from graphwright.stages.resolve.scoring import W_CONTEXT, W_NAME, PairEvidence
from graphwright.storage.diff import key_column
from graphwright.util.numeric import to_numpy, unique

_MASK = (1 << 63) - 1


def stable_hashes(values: list[str]) -> np.ndarray:
    """A 63-bit hash per string that is the same in every process (Python's `hash` is not)."""
    return text_hashes(values) & np.int64(_MASK)


def mix(*columns: np.ndarray) -> np.ndarray:
    """Combine int64 columns into one hash per row (wrapping arithmetic, order-sensitive)."""
    out = np.zeros(len(columns[0]), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in columns:
            out = (out * np.uint64(0x9E3779B97F4A7C15)) ^ c.astype(np.uint64)
            out ^= out >> np.uint64(29)
    return (out & np.uint64(_MASK)).astype(np.int64)


def set_hashes(owner: np.ndarray, item_hash: np.ndarray, n: int) -> np.ndarray:
    """Per owner 0..n-1, an order-free hash of the set of items it holds (distinct pairs given)."""
    with np.errstate(over="ignore"):
        mixed = mix(item_hash).astype(np.uint64)
        out = np.zeros(n, dtype=np.uint64)
        np.add.at(out, owner, mixed)
    return out.astype(np.int64)


EVIDENCE = ("score", "name", "contained", "neighbours", "chunks", "embedding", "types")


def split_rows(table: pa.Table | None, fingerprint: dict[str, int],
               hopeless_below: float | None = None) -> tuple[pa.Table | None, pa.Table | None]:
    """(the cached rows whose two keys still have the fingerprints they were scored with, the
    other cached rows whose two keys are both still there: pairs to score again, whose name
    scores hold, being functions of the two keys alone). With `hopeless_below`, a row of two
    keys still there whose names alone keep it under that score whatever its context is kept
    whatever the fingerprints: it stays settled (with the fingerprints it was scored with, so a
    later run finds it changed and hopeless again), and is not scored again. The rows are told
    apart by their masks: matching the settled rows against the kept ones by joined keys took
    0.27 s of a 0.1% update at 1.2M chunks."""
    if table is None or not table.num_rows:
        return None, None
    keys = pa.array(list(fingerprint), pa.string())
    now = np.r_[np.array(list(fingerprint.values()), dtype=np.int64), 0]
    ok, present = np.ones(table.num_rows, dtype=bool), np.ones(table.num_rows, dtype=bool)
    for side, stored in (("a", "fa"), ("b", "fb")):
        at = np.asarray(pc.fill_null(pc.index_in(table.column(side), value_set=keys), len(keys)), dtype=np.int64)
        present &= at < len(keys)
        ok &= (at < len(keys)) & (now[at] == np.asarray(table.column(stored), dtype=np.int64))
    if hopeless_below is not None:
        ok |= present & to_numpy(_hopeless(table, hopeless_below), bool)
    return table.filter(pa.array(ok)), table.filter(pa.array(present & ~ok))


def name_scores(table: pa.Table | None) -> dict[tuple[str, str], tuple[float, bool]]:
    """{(a, b): (name score, contained)} of cached rows, for PairScorer."""
    if table is None or not table.num_rows:
        return {}
    columns = [table.column(c).to_pylist() for c in ("a", "b", "name", "contained")]
    return {(a, b): (name, contained) for a, b, name, contained in zip(*columns)}


def _hopeless(table: pa.Table, below: float) -> pa.ChunkedArray:
    """Per cached pair, whether its names alone keep it under `below` whatever its context: the
    score is W_NAME * name + W_CONTEXT * context with context at most 1, and the name score is a
    function of the two keys only, so such a pair is settled for good."""
    return pc.less(table.column("name"), (below - W_CONTEXT) / W_NAME - 1e-9)


def settled_codes(table: pa.Table | None, keys: list[str], below: float) -> np.ndarray:
    """Sorted codes i * len(keys) + j (indices into the sorted keys) of the cached pairs scoring below `below`."""
    if table is None or not table.num_rows:
        return np.empty(0, np.int64)
    low = table.filter(pc.less(table.column("score"), below))
    values = pa.array(keys, pa.string())
    i = np.asarray(pc.fill_null(pc.index_in(low.column("a"), value_set=values), -1), dtype=np.int64)
    j = np.asarray(pc.fill_null(pc.index_in(low.column("b"), value_set=values), -1), dtype=np.int64)
    present = (i >= 0) & (j >= 0)
    return unique(i[present] * len(keys) + j[present])


def memo_from(table: pa.Table | None, at_least: float = float("-inf")) -> dict[tuple[str, str], PairEvidence]:
    """The evidence of split_rows(...)[0] scoring at least `at_least`, as the scorer's memo."""
    if table is None or not table.num_rows:
        return {}
    table = table.filter(pc.greater_equal(table.column("score"), at_least))
    columns = [table.column(c).to_pylist() for c in ("a", "b", *EVIDENCE)]
    return {(a, b): PairEvidence(a, b, *rest) for a, b, *rest in zip(*columns)}


def memo_table(memo: dict[tuple[str, str], PairEvidence], fingerprint: dict[str, int], kept: pa.Table | None = None) -> pa.Table:
    """The cache to keep: `kept` (the valid cached rows) and the pairs of `memo` not among them.
    The pairs are matched as joined keys in Arrow, not through a Python set of the kept pairs
    (290k in a 0.1% update at 145k chunks: 0.26 s for this function under cProfile, 0.18 s so)."""
    pairs = [(p, e) for p, e in memo.items() if e.a in fingerprint and e.b in fingerprint]
    if kept is not None and kept.num_rows and pairs:
        mine = key_column(pa.table({"a": [p[0] for p, _ in pairs], "b": [p[1] for p, _ in pairs]}), ("a", "b"))
        new = pc.invert(pc.is_in(mine, value_set=key_column(kept, ("a", "b")))).to_pylist()
        pairs = [pair for pair, keep in zip(pairs, new) if keep]
    evidence = [e for _, e in pairs]
    table = pa.table({
        "a": pa.array([e.a for e in evidence], pa.string()), "b": pa.array([e.b for e in evidence], pa.string()),
        "fa": pa.array([fingerprint[e.a] for e in evidence], pa.int64()), "fb": pa.array([fingerprint[e.b] for e in evidence], pa.int64()),
        **{c: pa.array([getattr(e, c) for e in evidence], pa.float64() if c in ("score", "name", "neighbours", "chunks", "embedding")
                       else pa.bool_() if c == "contained" else pa.string()) for c in EVIDENCE},
    })
    return table if kept is None else pa.concat_tables([kept.cast(table.schema), table])


# the candidate generators' version: stored candidates of another version are generated again
# (2: the n-gram IVF trains sqrt(n) lists, not 4 sqrt(n); 3: its centroids are rows picked by hash;
# 4: n-gram hits ranked by exact cosine, ties by row, lists and probes chosen exactly: ngram_hits)
CANDIDATES_FORMAT = 4


def keys_digest(keys: list[str]) -> str:
    h = hashlib.sha256(f"candidates-{CANDIDATES_FORMAT}\x1e".encode())
    for k in keys:
        h.update(k.encode() + b"\x1f")
    return h.hexdigest()


def candidates_from(table: pa.Table | None, keys: list[str]) -> dict[str, np.ndarray]:
    """The stored candidate pairs (as candidate_pairs gives them), if they were generated for
    exactly these keys by this version of the generators; else {}."""
    if table is None or not table.num_rows or table.schema.metadata is None \
            or table.schema.metadata.get(b"keys") != keys_digest(keys).encode():
        return {}
    # each generator's rows picked by Arrow: as numpy objects, the 380k generator names of a
    # 1.2M-chunk index took 0.26 s to sort (np.unique) and compare on every update
    generator = table.column("generator")
    codes = np.asarray(table.column("i"), dtype=np.int64) * len(keys) + np.asarray(table.column("j"), dtype=np.int64)
    names = [g for g in table.schema.metadata[b"generators"].decode().split(",") if g]
    found = sorted(pc.unique(generator).to_pylist())
    return {g: unique(codes[to_numpy(pc.equal(generator, g), bool)]) for g in dict.fromkeys([*names, *found])}


def candidates_table(candidates: dict[str, np.ndarray], keys: list[str]) -> pa.Table:
    n = max(len(keys), 1)
    codes = [np.asarray(c, dtype=np.int64) for c in candidates.values()]
    every = np.concatenate([np.empty(0, np.int64), *codes])
    table = pa.table({"generator": pa.array(np.repeat(list(candidates), [len(c) for c in codes]).tolist() if codes else [], pa.string()),
                      "i": pa.array(every // n, pa.int64()), "j": pa.array(every % n, pa.int64())})
    return table.replace_schema_metadata({"keys": keys_digest(keys), "generators": ",".join(sorted(candidates))})
