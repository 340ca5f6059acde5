"""Resolve: merge mentions into entities and assertions into relationships (a fan-in stage).

Mentions are first grouped by normalized name (graphwright.names). With `method: linked` the
name keys are then linked: candidate pairs (resolve_candidates), scored on name, context and type
(resolve_scoring), borderline pairs optionally adjudicated by an LLM, and accepted pairs
clustered without chaining (resolve_clusters). The aliases table records each merge with its
evidence.

Every output row is a pure function of the current mentions and assertions (keys are sorted
before any search; ties break on keys), so resolving after an update gives exactly what
resolving from scratch gives, and a merge whose evidence left with a deleted document is undone
by the next update. Lineage: each entity and relationship carries the sorted set of chunks and
documents that support it.

Per-mention work is columnar: names, keys, chunks and descriptions become integer codes
(Arrow dictionary encoding) and the group-bys are numpy sorts, so Python objects exist per
distinct name, key, entity and relationship, not per mention (on 244k mentions and 405k
assertions this took resolve from 10.9 s and +845 MB to 3.7 s and +450 MB, same output).

Heavy joins run in plain Arrow on the driver: measured with bench/resolve_joins.py, Arrow took
1.21 CPU s for resolve's joins over 1M mentions, Dask 2.04 s, and Ray Data on one machine was two
orders of magnitude slower at 100k (docs/entity-resolution.md has the figures and the decision).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids, tables
from graphwright.config import ResolveConfig
from graphwright.names import normalize_name, resolution_key
from graphwright.resolve_candidates import candidate_pairs
from graphwright.resolve_clusters import coherent_clusters
from graphwright.resolve_scoring import KeyProfile, PairEvidence, PairScorer


def ordered_descriptions(descriptions: list[tuple[object, str]]) -> list[str]:
    """Distinct descriptions, most frequent first, then in corpus order (`position`). Corpus
    order keeps a description stable when later documents add mentions (new text sorts last),
    which is what lets an update reuse reports."""
    counts = Counter(d for _, d in descriptions if d)
    first = {}
    for position, d in sorted((p, d) for p, d in descriptions if d):
        first.setdefault(d, position)
    return sorted(counts, key=lambda d: (-counts[d], first[d], d))


def merge_descriptions(descriptions: list[tuple[object, str]], max_chars: int) -> str:
    """The ordered distinct descriptions, concatenated within a character budget. (The reference
    for `_descriptions`, which computes this for every entity at once.)"""
    out, used = [], 0
    for d in ordered_descriptions(descriptions):
        if out and used + len(d) + 1 > max_chars:
            break
        out.append(d)
        used += len(d) + 1
    return " ".join(out)[:max_chars]


Adjudicator = Callable[[list[tuple[PairEvidence, KeyProfile, KeyProfile]]], dict[tuple[str, str], bool]]


def link_keys(profiles: dict[str, KeyProfile], config: ResolveConfig,
              embed: Callable[[list[str]], np.ndarray] | None = None,
              adjudicate: Adjudicator | None = None) -> tuple[dict[str, str], dict, dict]:
    """({key: cluster label}, {(a, b): (evidence, how)} for accepted pairs, stats)."""
    keys = sorted(profiles)
    vectors = embed([profiles[k].text for k in keys]) if embed is not None and keys else None
    scorer = PairScorer(profiles, dict(zip(keys, vectors)) if vectors is not None else None)
    generated = candidate_pairs(keys, config, vectors)
    pairs = sorted(set().union(*generated.values()))
    accepted, borderline, contained_pairs = {}, [], []
    for i, j in pairs:
        e = scorer(keys[i], keys[j])
        if e.contained and e.score >= config.borderline_threshold:
            contained_pairs.append(e)
        if e.score >= config.accept_threshold:
            accepted[(e.a, e.b)] = (e, "linked")
        elif e.score >= config.borderline_threshold:
            borderline.append(e)
    llm_yes = 0
    if adjudicate is not None and borderline:
        verdicts = adjudicate([(e, profiles[e.a], profiles[e.b]) for e in borderline])
        for e in borderline:
            if verdicts.get((e.a, e.b)):
                accepted[(e.a, e.b)] = (e, "llm")
                llm_yes += 1
    label, cstats = coherent_clusters(keys, {p: e for p, (e, _) in accepted.items()}, scorer,
                                      config.min_link, config.max_cluster_keys, contained_pairs)
    stats = {"keys": len(keys), **{f"candidates_{g}": len(p) for g, p in generated.items()},
             "pairs_scored": len(pairs), "accepted": len(accepted) - llm_yes, "borderline": len(borderline),
             "llm_accepted": llm_yes, **cstats, "keys_merged": sum(1 for k in keys if label[k] != k)}
    return label, accepted, stats


def _canonical(keys: list[str], mentioned: dict[str, int]) -> str:
    """The cluster's most mentioned key (then the longer, then the first): adding a rare variant
    does not change an entity's id."""
    return min(keys, key=lambda k: (-mentioned[k], -len(k), k))


def resolve(mentions: pa.Table, assertions: pa.Table, config: ResolveConfig,
            positions: dict[str, object] | None = None, overflow: dict | None = None,
            embed: Callable[[list[str]], np.ndarray] | None = None, adjudicate: Adjudicator | None = None,
            stats: dict | None = None) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(entities, entity_aliases, relationships) from mentions and assertions. `positions` maps a
    chunk id to its place in the corpus (e.g. (source key, chunk index)); by default the chunk id.
    If `overflow` is a dict, rows whose descriptions exceed the budget are added to it as
    {(table, id): (name, ordered distinct descriptions)}, for an LLM to summarize. `embed`
    (texts -> normalized vectors) is used when config.embeddings is on; `adjudicate` decides
    borderline pairs when config.adjudicate is on. Linking figures are added to `stats`.

    Per-mention and per-assertion work is columnar (numpy codes and Arrow group-bys); Python
    objects are made per name, per key, per entity and per relationship only."""
    to_key = resolution_key if config.method == "linked" else normalize_name
    chunk_names, rank = _chunk_order(mentions, assertions, positions or {})
    names = _Names(to_key)
    m_name = names.codes(mentions.column("name"))
    a_src, a_tgt = (names.codes(assertions.column(c)) for c in ("source", "target"))
    keys = sorted(set(names.key_of_code[np.unique(m_name)].tolist())) if len(m_name) else []
    key_index = {k: i for i, k in enumerate(keys)}
    key_of_name = np.array([key_index.get(k, -1) for k in names.key_of_code.tolist()], dtype=np.int64)
    m_key, a_src, a_tgt = key_of_name[m_name], key_of_name[a_src], key_of_name[a_tgt]
    m_count = _numpy(mentions.column("count"), np.int64)
    m_chunk = _codes(mentions.column("chunk_id"), chunk_names)
    # an endpoint no mention supports, or two names of one key
    a_keep = (a_src >= 0) & (a_tgt >= 0) & (a_src != a_tgt)

    label = {k: k for k in keys}
    accepted: dict = {}
    if config.method == "linked" and len(keys) > 1:
        profiles = _profiles(keys, m_key, m_count, mentions, m_chunk, a_src[a_keep], a_tgt[a_keep])
        if config.embeddings or config.adjudicate:  # a text per name, for the embedding or the LLM
            best = _best_names(m_key, m_name, m_count, len(keys), names.names)
            first = _descriptions(m_key, mentions.column("description"), rank[m_chunk], len(keys), 1, False)[0]
            for i, k in enumerate(keys):
                profiles[k].text = f"{best[i]}: {first[i]}"[:300]
        label, accepted, link_stats = link_keys(profiles, config, embed if config.embeddings else None,
                                                adjudicate if config.adjudicate else None)
        if stats is not None:
            stats.update(link_stats)
    key_mentions = np.bincount(m_key, weights=m_count, minlength=len(keys)).astype(np.int64)
    members: dict[str, list[str]] = {}
    for k in keys:
        members.setdefault(label[k], []).append(k)
    mentioned = dict(zip(keys, key_mentions.tolist()))
    canonical = {}
    for ks in members.values():
        c = _canonical(ks, mentioned)
        canonical.update({k: c for k in ks})

    # entities in canonical-key order; relationship endpoints ordered by entity id
    entity_keys = sorted(set(canonical.values()))
    entity_ids = [ids.entity_id(c) for c in entity_keys]
    position = {c: i for i, c in enumerate(entity_keys)}
    entity_of_key = np.array([position[canonical[k]] for k in keys], dtype=np.int64)
    id_rank = np.empty(len(entity_ids), dtype=np.int64)
    id_rank[np.argsort(np.array(entity_ids, dtype=object), kind="stable")] = np.arange(len(entity_ids))
    n_entities = len(entity_keys)

    m_entity = entity_of_key[m_key]
    entity_names = _best_names(m_entity, m_name, m_count, n_entities, names.names)
    ent_desc, ent_over = _descriptions(m_entity, mentions.column("description"), rank[m_chunk], n_entities,
                                       config.description_max_chars, overflow is not None)

    # relationships: (lower, higher) entity by id, as one code per pair
    ea, eb = entity_of_key[a_src[a_keep]], entity_of_key[a_tgt[a_keep]]
    differ = ea != eb  # two names of one entity
    keep_rows = np.flatnonzero(a_keep)[differ]
    ea, eb = ea[differ], eb[differ]
    swap = id_rank[ea] > id_rank[eb]
    lo, hi = np.where(swap, eb, ea), np.where(swap, ea, eb)
    pair_code = id_rank[lo] * max(n_entities, 1) + id_rank[hi]
    pairs, a_pair = np.unique(pair_code, return_inverse=True)
    a_pair = a_pair.reshape(-1)
    by_rank = np.argsort(id_rank)  # entity index of each id rank
    rel_lo, rel_hi = by_rank[pairs // max(n_entities, 1)], by_rank[pairs % max(n_entities, 1)]
    a_chunk = _codes(assertions.column("chunk_id"), chunk_names)
    rel_weight = np.bincount(a_pair, weights=_numpy(assertions.column("weight"), np.float64)[keep_rows], minlength=len(pairs))
    pair_of_row = np.full(assertions.num_rows, -1, dtype=np.int64)  # -1: the row supports no relationship
    pair_of_row[keep_rows] = a_pair
    rel_desc, rel_over = _descriptions(pair_of_row, assertions.column("description"), rank[a_chunk],
                                       len(pairs), config.description_max_chars, overflow is not None)
    a_chunk = a_chunk[keep_rows]
    a_doc, doc_names = _sorted_codes(assertions.column("doc_id"))
    degree = np.bincount(np.concatenate([rel_lo, rel_hi]), minlength=n_entities)

    entities = _entity_table(entity_keys, entity_ids, entity_names, ent_desc, m_entity, m_count, mentions, m_chunk,
                             chunk_names, degree)
    rel_ids = [ids.relationship_id(entity_ids[a], entity_ids[b]) for a, b in zip(rel_lo.tolist(), rel_hi.tolist())]
    relationships = pa.table({
        "relationship_id": pa.array(rel_ids, pa.string()),
        "source_id": pa.array([entity_ids[a] for a in rel_lo.tolist()], pa.string()),
        "target_id": pa.array([entity_ids[b] for b in rel_hi.tolist()], pa.string()),
        "source": pa.array([entity_names[a] for a in rel_lo.tolist()], pa.string()),
        "target": pa.array([entity_names[b] for b in rel_hi.tolist()], pa.string()),
        "description": rel_desc,
        "weight": pa.array(rel_weight, pa.float64()),
        "chunk_ids": _distinct_lists(a_pair, a_chunk, chunk_names, len(pairs)),
        "doc_ids": _distinct_lists(a_pair, a_doc[keep_rows], doc_names, len(pairs)),
    })
    if overflow is not None:
        for i, ordered in ent_over.items():
            overflow[("entities", entity_ids[i])] = (entity_names[i], ordered)
        for i, ordered in rel_over.items():
            a, b = int(rel_lo[i]), int(rel_hi[i])
            overflow[("relationships", rel_ids[i])] = (f"{entity_names[a]} and {entity_names[b]}", ordered)

    aliases = _alias_table(names, m_name, m_count, keys, canonical, accepted, entity_ids, entity_of_key)
    return tuple(t.select(tables.schema(name).arrow.names).cast(tables.schema(name).arrow)
                 for t, name in ((entities, "entities"), (aliases, "entity_aliases"), (relationships, "relationships")))


class _Names:
    """Distinct names across columns, each normalized to its key once."""

    def __init__(self, to_key: Callable[[str], str]):
        self.to_key = to_key
        self.names: list[str] = []
        self.code: dict[str, int] = {}
        self._keys: list[str] = []

    @property
    def key_of_code(self) -> np.ndarray:
        return np.array(self._keys, dtype=object)

    def codes(self, column: pa.ChunkedArray) -> np.ndarray:
        """The name code of every row (Arrow dictionary encoding: Python sees distinct names only)."""
        encoded = column.combine_chunks().dictionary_encode() if len(column) else pa.array([], pa.string()).dictionary_encode()
        local = []
        for name in encoded.dictionary.to_pylist():
            if name not in self.code:
                self.code[name] = len(self.names)
                self.names.append(name)
                self._keys.append(self.to_key(name))
            local.append(self.code[name])
        return np.asarray(local, dtype=np.int64)[_numpy(encoded.indices, np.int64)] if len(column) else np.empty(0, np.int64)


def _numpy(column, dtype) -> np.ndarray:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=dtype)


def _sorted_codes(column) -> tuple[np.ndarray, pa.Array]:
    """(code per row, distinct values in sorted order): codes sort as the strings do."""
    distinct = pc.unique(column)
    distinct = distinct.take(pc.sort_indices(distinct))
    return _numpy(pc.index_in(column, value_set=distinct), np.int64), distinct


def _codes(column, distinct: pa.Array) -> np.ndarray:
    return _numpy(pc.index_in(column, value_set=distinct), np.int64)


def _chunk_order(mentions: pa.Table, assertions: pa.Table, positions: dict) -> tuple[pa.Array, np.ndarray]:
    """(distinct chunk ids, sorted; each one's rank in corpus order: by `positions`, else by id)."""
    chunk_names = _sorted_codes(pa.chunked_array(mentions.column("chunk_id").chunks + assertions.column("chunk_id").chunks,
                                                 pa.string()))[1]
    names = chunk_names.to_pylist()
    order = sorted(range(len(names)), key=lambda i: (0, positions[names[i]]) if names[i] in positions else (1, names[i]))
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    return chunk_names, rank


def _group_sums(group: np.ndarray, code: np.ndarray, weights: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group, code, summed weight) per distinct (group, code) pair, sorted by group then code."""
    pairs, inverse = np.unique(group * width + code, return_inverse=True)
    return pairs // width, pairs % width, np.bincount(inverse.reshape(-1), weights=weights, minlength=len(pairs))


def _profiles(keys: list[str], m_key, m_count, mentions: pa.Table, m_chunk, src, tgt) -> dict[str, KeyProfile]:
    """What linking knows of each key: mentions, types, chunks (as codes) and related keys."""
    type_code, type_names = _sorted_codes(mentions.column("type"))
    type_names = type_names.to_pylist()
    profiles = {k: KeyProfile(k) for k in keys}
    for k, n in zip(keys, np.bincount(m_key, weights=m_count, minlength=len(keys)).astype(np.int64).tolist()):
        profiles[k].mentions = n
    for k, t, n in zip(*(a.tolist() for a in _group_sums(m_key, type_code, m_count, len(type_names)))):
        profiles[keys[k]].types[type_names[t]] = int(n)
    width = int(m_chunk.max()) + 1 if len(m_chunk) else 1
    pairs = np.unique(m_key * width + m_chunk)
    for k, c in zip((pairs // width).tolist(), (pairs % width).tolist()):
        profiles[keys[k]].chunks.add(c)
    linked = np.unique(np.concatenate([src * len(keys) + tgt, tgt * len(keys) + src]))
    for a, b in zip((linked // len(keys)).tolist(), (linked % len(keys)).tolist()):
        profiles[keys[a]].neighbours.add(keys[b])
    return profiles


def _best_names(group: np.ndarray, name_code: np.ndarray, count: np.ndarray, n_groups: int, names: list[str]) -> list[str]:
    """Per group, its most mentioned name (then the longest, then the first in order)."""
    g, code, total = _group_sums(group, name_code, count, len(names))
    name_rank = np.empty(len(names), dtype=np.int64)
    name_rank[np.argsort(np.array(names, dtype=object), kind="stable")] = np.arange(len(names))
    lengths = np.array([len(n) for n in names], dtype=np.int64)
    order = np.lexsort((name_rank[code], -lengths[code], -total, g))
    firsts = order[np.r_[True, g[order][1:] != g[order][:-1]]] if len(order) else order
    best = [""] * n_groups
    for gi, ci in zip(g[firsts].tolist(), code[firsts].tolist()):
        best[gi] = names[ci]
    return best


def _descriptions(group: np.ndarray, column, rank: np.ndarray, n_groups: int, max_chars: int,
                  want_overflow: bool) -> tuple[pa.Array, dict[int, list[str]]]:
    """Per group, merge_descriptions of its (rank, description) rows; and, if `want_overflow`, the
    ordered descriptions of each group that exceeds `max_chars`. Descriptions are dictionary
    codes here (Arrow's group_by on the strings took three times the memory)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    encoded = column.dictionary_encode()
    texts = encoded.dictionary
    lengths = _numpy(pc.utf8_length(texts), np.int64)
    code = _numpy(pc.fill_null(encoded.indices, -1), np.int64)
    present = (code >= 0) & (group >= 0)  # group -1: a row no group takes
    present[present] = lengths[code[present]] > 0
    g, d, r = group[present], code[present], rank[present]
    by_pair = np.argsort(g * len(texts) + d, kind="stable")
    pair = (g * len(texts) + d)[by_pair]
    firsts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]]) if len(pair) else np.empty(0, np.int64)
    mentions = np.diff(np.r_[firsts, len(pair)])
    earliest = np.minimum.reduceat(r[by_pair], firsts) if len(pair) else firsts
    g, d = pair[firsts] // max(len(texts), 1), pair[firsts] % max(len(texts), 1)
    text_rank = np.empty(len(texts), dtype=np.int64)
    text_rank[_numpy(pc.sort_indices(texts), np.int64)] = np.arange(len(texts))
    order = np.lexsort((text_rank[d], earliest, -mentions, g))  # most frequent, then earliest, then by text
    g, d = g[order], d[order]
    cost = lengths[d] + 1
    start = np.searchsorted(g, np.arange(n_groups + 1))
    spent = np.cumsum(cost)
    before = np.r_[0, spent][start[:-1]]  # what the earlier groups spent
    within = spent - before[g] if len(g) else spent
    keep = (within <= max_chars) | (np.arange(len(g)) == start[g])  # a prefix of each group, never empty
    offsets = np.r_[0, np.cumsum(np.bincount(g[keep], minlength=n_groups))]
    kept = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), texts.take(pa.array(d[keep], pa.int64())))
    merged = pc.utf8_slice_codeunits(pc.binary_join(kept, " "), 0, max_chars)
    over = {}
    if want_overflow and len(g):
        totals = spent[start[1:] - 1] - before - 1
        over_groups = np.flatnonzero((start[1:] > start[:-1]) & (totals > max_chars))
        rows = np.flatnonzero(np.isin(g, over_groups))  # only those groups' texts become Python strings
        ordered = iter(texts.take(pa.array(d[rows], pa.int64())).to_pylist())
        for i in over_groups.tolist():
            over[i] = [next(ordered) for _ in range(start[i + 1] - start[i])]
    return merged, over


def _distinct_lists(group: np.ndarray, codes: np.ndarray, values: pa.Array, n_groups: int) -> pa.Array:
    """Per group, its distinct values in sorted order (codes sort as the values do)."""
    width = len(values) or 1
    pairs = np.unique(group * width + codes)
    offsets = np.searchsorted(pairs // width, np.arange(n_groups + 1))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values.take(pa.array(pairs % width)))


def _entity_table(entity_keys, entity_ids, entity_names, descriptions, m_entity, m_count, mentions: pa.Table, m_chunk,
                  chunk_names, degree) -> pa.Table:
    n = len(entity_keys)
    type_code, type_names = _sorted_codes(mentions.column("type"))
    type_names = type_names.to_pylist()
    types: list[list[tuple]] = [[] for _ in range(n)]
    for e, t, c in zip(*(a.tolist() for a in _group_sums(m_entity, type_code, m_count, len(type_names)))):
        types[e].append((-c, type_names[t] == "ENTITY", type_names[t]))
    ordered = [[t for *_, t in sorted(ts)] for ts in types]
    doc_code, doc_names = _sorted_codes(mentions.column("doc_id"))
    return pa.table({
        "entity_id": pa.array(entity_ids, pa.string()),
        "canonical_key": pa.array(entity_keys, pa.string()),
        "name": pa.array(entity_names, pa.string()),
        "type": pa.array([ts[0] for ts in ordered], pa.string()),
        "types": pa.array(ordered, pa.list_(pa.string())),
        "description": descriptions,
        "mention_count": pa.array(np.bincount(m_entity, weights=m_count, minlength=n).astype(np.int64)),
        "degree": pa.array(degree.astype(np.int64)),
        "chunk_ids": _distinct_lists(m_entity, m_chunk, chunk_names, n),
        "doc_ids": _distinct_lists(m_entity, doc_code, doc_names, n),
    })


def _alias_table(names: _Names, m_name, m_count, keys, canonical, accepted, entity_ids, entity_of_key) -> pa.Table:
    """One row per mentioned name: its entity and how its key joined the entity's cluster."""
    best: dict[str, tuple] = {}  # key -> its best accepted pair inside its cluster
    for (a, b), (e, how) in accepted.items():
        if canonical[a] == canonical[b]:
            for k in (a, b):
                if k not in best or (-e.score, e.a, e.b) < (-best[k][0].score, best[k][0].a, best[k][0].b):
                    best[k] = (e, how)

    def merge_evidence(key: str) -> tuple[str, str]:
        c = canonical[key]
        if key == c:
            return "normalized_name", f"normalizes to {key!r}"
        e, how = best[key]
        other = e.b if e.a == key else e.a
        return how, f"normalizes to {key!r}; merged into {c!r} via {other!r} ({e.describe()})"

    key_index = {k: i for i, k in enumerate(keys)}
    counts = np.bincount(m_name, weights=m_count, minlength=len(names.names)).astype(np.int64)
    rows = []
    for code in sorted(np.unique(m_name).tolist(), key=lambda c: names.names[c]):
        key = names.to_key(names.names[code])
        how, why = merge_evidence(key)
        rows.append({"alias": names.names[code], "entity_id": entity_ids[entity_of_key[key_index[key]]], "method": how,
                     "evidence": why, "mention_count": int(counts[code])})
    return pa.Table.from_pylist(rows, schema=tables.schema("entity_aliases").arrow)
