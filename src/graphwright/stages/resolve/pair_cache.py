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


def positions(table: pa.Table, keys: list[str], previous_keys: pa.ChunkedArray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each cached pair's two keys as positions among `keys` (sorted), -1 for a key no longer
    there. The rows hold their keys' positions among the keys of the run that wrote them
    (`previous_keys`), so one lookup of those keys maps every row: looking up each row's two
    names was 0.4 s of a 0.1% update at 145k chunks (290k rows). Rows written without positions
    (an earlier format) are looked up by name."""
    if previous_keys is not None and "i" in table.column_names:
        now = to_numpy(pc.fill_null(pc.index_in(previous_keys, value_set=pa.array(keys, pa.string())), -1), np.int64)
        return tuple(now[np.asarray(table.column(c), dtype=np.int64)] for c in ("i", "j"))
    values = pa.array(keys, pa.string())
    return tuple(to_numpy(pc.fill_null(pc.index_in(table.column(c), value_set=values), -1), np.int64) for c in ("a", "b"))


def stored(table: pa.Table) -> dict[str, pa.Table]:
    """The cache as the state keeps it: the rows as before (`pairs`, which earlier versions read
    and write) and their positions beside them (`pair_positions`). A run of an earlier version
    keeps no positions, and the next run finds the rows by name."""
    return {"pairs": table.drop_columns(["i", "j"]), "pair_positions": table.select(["i", "j"])}


def joined(derived: dict[str, pa.Table]) -> pa.Table | None:
    """stored(...) read back: the rows, with their positions when the same run wrote both."""
    table, at = derived.get("pairs"), derived.get("pair_positions")
    if table is None or at is None or at.num_rows != table.num_rows:
        return table
    return table.append_column("i", at.column("i")).append_column("j", at.column("j"))


def split_rows(table: pa.Table | None, fingerprint: np.ndarray, at: tuple[np.ndarray, np.ndarray] | None,
               hopeless_below: float | None = None) -> tuple[pa.Table | None, pa.Table | None]:
    """(the cached rows whose two keys still have the fingerprints they were scored with, the
    other cached rows whose two keys are both still there: pairs to score again, whose name
    scores hold, being functions of the two keys alone). `fingerprint`: per key position;
    `at`: the rows' key positions (positions(...)). With `hopeless_below`, a row of two
    keys still there whose names alone keep it under that score whatever its context is kept
    whatever the fingerprints: it stays settled (with the fingerprints it was scored with, so a
    later run finds it changed and hopeless again), and is not scored again. Both tables hold
    their keys' positions among this run's keys in `i` and `j`."""
    if table is None or not table.num_rows:
        return None, None
    i, j = at
    present = (i >= 0) & (j >= 0)
    now = np.r_[np.asarray(fingerprint, dtype=np.int64), 0]
    ok = present & (now[i] == to_numpy(table.column("fa"), np.int64)) & (now[j] == to_numpy(table.column("fb"), np.int64))
    if hopeless_below is not None:
        ok |= present & to_numpy(_hopeless(table, hopeless_below), bool)
    table = _with_positions(table, i, j)
    return table.filter(pa.array(ok)), table.filter(pa.array(present & ~ok))


def _with_positions(table: pa.Table, i: np.ndarray, j: np.ndarray) -> pa.Table:
    for name, values in (("i", i), ("j", j)):
        column = pa.array(values.astype(np.int32, copy=False))
        table = table.set_column(table.column_names.index(name), name, column) if name in table.column_names \
            else table.append_column(name, column)
    return table


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


def settled_codes(table: pa.Table | None, n: int, below: float) -> np.ndarray:
    """Sorted codes i * n + j (positions among this run's n keys) of split_rows' kept pairs scoring below `below`."""
    if table is None or not table.num_rows:
        return np.empty(0, np.int64)
    low = to_numpy(pc.less(table.column("score"), below), bool)
    i, j = (to_numpy(table.column(c), np.int64)[low] for c in ("i", "j"))
    return unique(i * n + j)


def memo_from(table: pa.Table | None, at_least: float = float("-inf")) -> dict[tuple[str, str], PairEvidence]:
    """The evidence of split_rows(...)[0] scoring at least `at_least`, as the scorer's memo."""
    if table is None or not table.num_rows:
        return {}
    table = table.filter(pc.greater_equal(table.column("score"), at_least))
    columns = [table.column(c).to_pylist() for c in ("a", "b", *EVIDENCE)]
    return {(a, b): PairEvidence(a, b, *rest) for a, b, *rest in zip(*columns)}


def memo_table(memo: dict[tuple[str, str], PairEvidence], fingerprint: np.ndarray, keys: list[str],
               kept: pa.Table | None = None) -> pa.Table:
    """The cache to keep: `kept` (split_rows' valid rows, with this run's positions) and the
    pairs of `memo` not among them whose keys are among `keys` (sorted; `fingerprint` per
    position). The pairs are matched by their positions' codes, not through a Python set of the
    kept pairs (290k in a 0.1% update at 145k chunks)."""
    where = {k: p for p, k in enumerate(keys)}
    n = max(len(keys), 1)
    evidence = [e for e in memo.values() if e.a in where and e.b in where]
    i = np.array([where[e.a] for e in evidence], dtype=np.int64)
    j = np.array([where[e.b] for e in evidence], dtype=np.int64)
    if kept is not None and kept.num_rows and len(evidence):
        new = ~np.isin(i * n + j, to_numpy(kept.column("i"), np.int64) * n + to_numpy(kept.column("j"), np.int64))
        evidence, i, j = [e for e, keep in zip(evidence, new.tolist()) if keep], i[new], j[new]
    fingerprint = np.asarray(fingerprint, dtype=np.int64)
    table = pa.table({
        "a": pa.array([e.a for e in evidence], pa.string()), "b": pa.array([e.b for e in evidence], pa.string()),
        "fa": pa.array(fingerprint[i], pa.int64()), "fb": pa.array(fingerprint[j], pa.int64()),
        **{c: pa.array([getattr(e, c) for e in evidence], pa.float64() if c in ("score", "name", "neighbours", "chunks", "embedding")
                       else pa.bool_() if c == "contained" else pa.string()) for c in EVIDENCE},
        "i": pa.array(i, pa.int32()), "j": pa.array(j, pa.int32()),
    })
    return table if kept is None else pa.concat_tables([kept.select(table.column_names).cast(table.schema), table])


# the candidate generators' version: stored candidates of another version are generated again
# (2: the n-gram IVF trains sqrt(n) lists, not 4 sqrt(n); 3: its centroids are rows picked by hash)
CANDIDATES_FORMAT = 3


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
