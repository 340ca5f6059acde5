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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids, memory, tables
from graphwright.config import ResolveConfig
from graphwright.names import normalize_name, resolution_key
from graphwright.numeric import distinct_lists, to_numpy, unique
from graphwright.resolve_candidates import candidate_pairs
from graphwright.resolve_clusters import coherent_clusters
from graphwright.resolve_scoring import CodeSet, KeyProfile, PairEvidence, PairScorer


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


def resolve(mentions: pa.Table | Scan, assertions: pa.Table | Scan, config: ResolveConfig,
            positions: dict[str, object] | None = None, overflow: dict | None = None,
            embed: Callable[[list[str]], np.ndarray] | None = None, adjudicate: Adjudicator | None = None,
            stats: dict | None = None) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(entities, entity_aliases, relationships): resolve_parts with the relationships in one table."""
    resolved = resolve_parts(mentions, assertions, config, positions, overflow, embed, adjudicate, stats)
    parts = list(resolved.relationship_parts)
    schema = tables.schema("relationships").arrow
    return resolved.entities, resolved.aliases, pa.concat_tables(parts) if parts else schema.empty_table()


@dataclass
class Resolved:
    entities: pa.Table
    aliases: pa.Table
    relationships: int  # how many relationship_parts will yield
    relationship_parts: Iterator[pa.Table]  # in relationship order, at most PART_ROWS assertions' worth each


def resolve_parts(mentions: pa.Table | Scan, assertions: pa.Table | Scan, config: ResolveConfig,
                  positions: dict[str, object] | None = None, overflow: dict | None = None,
                  embed: Callable[[list[str]], np.ndarray] | None = None, adjudicate: Adjudicator | None = None,
                  stats: dict | None = None) -> Resolved:
    """Entities, entity_aliases and relationships from mentions and assertions, each a table or a
    Scan (columns -> record batches; read twice). `positions` maps a chunk id to its place in the
    corpus (e.g. (source key, chunk index)); by default the chunk id. If `overflow` is a dict,
    rows whose descriptions exceed the budget are added to it as {(table, id): (name, ordered
    distinct descriptions)}, for an LLM to summarize. `embed` (texts -> normalized vectors) is
    used when config.embeddings is on; `adjudicate` decides borderline pairs when
    config.adjudicate is on. Linking figures are added to `stats`.

    Rows are read in batches and kept as integer codes (names, chunks, documents, types, and a
    64-bit hash per description); descriptions are read again at the end for the few each row
    keeps. Python objects exist per distinct name, key and entity. Relationships (millions at a
    million chunks) are built a part at a time while `relationship_parts` is iterated; their
    overflow entries are added as each part is built."""
    to_key = resolution_key if config.method == "linked" else normalize_name
    names, chunks, docs, types = _Dictionary(to_key), _Dictionary(), _Dictionary(), _Dictionary()
    m = _read_codes(_as_scan(mentions), {"name": names, "type": types, "chunk_id": chunks, "doc_id": docs}, "count")
    a = _read_codes(_as_scan(assertions), {"source": names, "target": names, "chunk_id": chunks, "doc_id": docs}, "weight")
    memory.release()
    chunk_names, chunk_code = chunks.sort()
    doc_names, doc_code = docs.sort()
    type_names, type_code = types.sort()
    for rows in (m, a):  # recoded so that codes sort as the ids do
        rows["chunk_id"], rows["doc_id"] = chunk_code[rows["chunk_id"]], doc_code[rows["doc_id"]]
    m["type"] = type_code[m["type"]]
    rank = _corpus_rank(chunk_names.to_pylist(), positions or {})

    key_of_code = names.keys
    keys = sorted(set(key_of_code[unique(m["name"])].tolist())) if len(m["name"]) else []
    key_index = {k: i for i, k in enumerate(keys)}
    key_of_name = np.array([key_index.get(k, -1) for k in key_of_code.tolist()], dtype=np.int64)
    m_key, a_src, a_tgt = key_of_name[m["name"]], key_of_name[a["source"]], key_of_name[a["target"]]
    # an endpoint no mention supports, or two names of one key
    a_keep = (a_src >= 0) & (a_tgt >= 0) & (a_src != a_tgt)

    label = {k: k for k in keys}
    accepted: dict = {}
    if config.method == "linked" and len(keys) > 1:
        profiles = _profiles(keys, m_key, m["count"], m["type"], type_names.to_pylist(), m["chunk_id"], a_src, a_tgt, a_keep)
        if config.embeddings or config.adjudicate:  # a text per name, for the embedding or the LLM
            best = _best_names(m_key, m["name"], m["count"], len(keys), names.values)
            plan = _DescriptionPlan(m_key, m["description"], m["length"], rank[m["chunk_id"]], len(keys), 0, False)
            first = plan.merge(_fetch_texts(_as_scan(mentions), plan.needed()), cut=False)
            for i, k in enumerate(keys):
                profiles[k].text = f"{best[i]}: {first[i].as_py()}"[:300]
        label, accepted, link_stats = link_keys(profiles, config, embed if config.embeddings else None,
                                                adjudicate if config.adjudicate else None)
        if stats is not None:
            stats.update(link_stats)
        del profiles
        memory.release()
    mentioned = dict(zip(keys, np.bincount(m_key, weights=m["count"], minlength=len(keys)).astype(np.int64).tolist()))
    members: dict[str, list[str]] = {}
    for k in keys:
        members.setdefault(label[k], []).append(k)
    canonical = {}
    for ks in members.values():
        c = _canonical(ks, mentioned)
        canonical.update({k: c for k in ks})

    # entities in canonical-key order; a relationship's endpoints ordered by entity id
    entity_keys = sorted(set(canonical.values()))
    entity_ids = [ids.entity_id(c) for c in entity_keys]
    n_entities = len(entity_keys)
    position = {c: i for i, c in enumerate(entity_keys)}
    entity_of_key = np.array([position[canonical[k]] for k in keys], dtype=np.int64)
    id_rank = np.empty(n_entities, dtype=np.int64)
    id_rank[np.argsort(np.array(entity_ids, dtype=object), kind="stable")] = np.arange(n_entities)
    m_entity = entity_of_key[m_key]
    entity_names = _best_names(m_entity, m["name"], m["count"], n_entities, names.values)

    rows, a_pair, pairs = _supported_pairs(a_src, a_tgt, a_keep, entity_of_key, id_rank)
    del a_src, a_tgt, a_keep, a["source"], a["target"]
    width = max(n_entities, 1)
    by_rank = np.argsort(id_rank)  # entity index of each id rank
    rel_lo, rel_hi = by_rank[pairs // width], by_rank[pairs % width]

    limit, want = config.description_max_chars, overflow is not None
    ent_parts = _Parts(m_entity, n_entities, None, m, rank, limit, want)
    ent_texts = _fetch_texts(_as_scan(mentions), ent_parts.needed())
    memory.release()
    descriptions = []
    for p in range(len(ent_parts)):
        _, _, plan = ent_parts.plan(p)
        descriptions.append(plan.merge(ent_texts))
        for i, ordered in plan.overflow(ent_texts).items() if want else ():
            i += int(ent_parts.cuts[p])
            overflow[("entities", entity_ids[i])] = (entity_names[i], ordered)
    del ent_parts, ent_texts
    entities = pa.table({
        "entity_id": pa.array(entity_ids, pa.string()),
        "canonical_key": pa.array(entity_keys, pa.string()),
        "name": pa.array(entity_names, pa.string()),
        **_types(m_entity, m["type"], m["count"], type_names.to_pylist(), n_entities),
        "description": pa.concat_arrays([pa.array([], pa.string()), *descriptions]),
        "mention_count": pa.array(np.bincount(m_entity, weights=m["count"], minlength=n_entities).astype(np.int64)),
        "degree": pa.array(np.bincount(np.concatenate([rel_lo, rel_hi]), minlength=n_entities).astype(np.int64)),
        "chunk_ids": distinct_lists(m_entity, m["chunk_id"], chunk_names, n_entities),
        "doc_ids": distinct_lists(m_entity, m["doc_id"], doc_names, n_entities),
    })
    aliases = _alias_table(names, m["name"], m["count"], keys, canonical, accepted, entity_ids, entity_of_key)
    del m, m_key, m_entity
    memory.release()
    endpoints = _Endpoints(pa.array(entity_ids, pa.string()), pa.array(entity_names, pa.string()), rel_lo, rel_hi)
    rel_parts = _Parts(a_pair, len(pairs), rows, a, rank, limit, want)
    del rows, a_pair
    a = {c: a[c] for c in ("weight", "chunk_id", "doc_id")}  # what the parts are built from besides their plans
    memory.release()
    parts = _relationship_parts(_as_scan(assertions), a, rel_parts, endpoints, chunk_names, doc_names, overflow)
    return Resolved(*(_conform(t, name) for t, name in ((entities, "entities"), (aliases, "entity_aliases"))),
                    len(pairs), parts)


def _supported_pairs(a_src: np.ndarray, a_tgt: np.ndarray, a_keep: np.ndarray, entity_of_key: np.ndarray,
                     id_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the assertions that support a relationship, the relationship each supports as an index
    into the third, each relationship as lo * entities + hi on its endpoints' id ranks). Rows
    are coded a slice at a time: forty million of them made a dozen temporaries of 325 MB."""
    width, rows, codes = max(len(id_rank), 1), [np.empty(0, np.int32)], [np.empty(0, np.int64)]
    for start in range(0, len(a_keep), PART_ROWS):
        r = np.flatnonzero(a_keep[start:start + PART_ROWS]) + start
        ea, eb = entity_of_key[a_src[r]], entity_of_key[a_tgt[r]]
        differ = ea != eb  # two names of one entity support no relationship
        ra, rb = id_rank[ea[differ]], id_rank[eb[differ]]
        rows.append(r[differ].astype(np.int32))
        codes.append(np.minimum(ra, rb) * width + np.maximum(ra, rb))
    pairs, a_pair = np.unique(np.concatenate(codes), return_inverse=True)
    return np.concatenate(rows), a_pair.reshape(-1).astype(np.int32), pairs


def _conform(table: pa.Table, name: str) -> pa.Table:
    schema = tables.schema(name).arrow
    return table.select(schema.names).cast(schema)


PART_ROWS = 4_000_000  # mentions or assertions per part (and per slice where rows are coded): ~1 GB of transient arrays


@dataclass
class _Endpoints:
    """Each relationship's entities (indexes into the entity columns), in relationship order."""
    entity_ids: pa.Array
    entity_names: pa.Array
    lo: np.ndarray
    hi: np.ndarray


class _Parts:
    """Rows grouped by consecutive group numbers and cut into parts of about PART_ROWS rows, with
    each part's description plan. Plans are made when asked for, twice per part (once to learn
    which texts to read in one pass over the table, once to merge them) rather than kept:
    together they were the largest thing resolve held."""

    def __init__(self, group: np.ndarray, n_groups: int, rows: np.ndarray | None, table: dict[str, np.ndarray],
                 chunk_rank: np.ndarray, max_chars: int, want_overflow: bool):
        """`group` numbers the table's `rows` (None: all of them); `table` holds their description
        hashes, lengths and chunk codes; `chunk_rank` orders chunks by their place in the corpus."""
        by_group = np.argsort(group, kind="stable")
        self.group = group[by_group].astype(np.int32)
        self.rows = (by_group if rows is None else rows[by_group]).astype(np.int32)  # each row's place in the table
        self.hashes, self.lengths = table["description"][self.rows], table["length"][self.rows]
        self.rank = chunk_rank.astype(np.int32)[table["chunk_id"][self.rows]]
        self.max_chars, self.want_overflow = max_chars, want_overflow
        self.row_start = np.r_[0, np.cumsum(np.bincount(self.group, minlength=n_groups))]
        self.cuts = unique(np.r_[0, np.searchsorted(self.row_start, np.arange(PART_ROWS, len(self.group), PART_ROWS)), n_groups])

    def __len__(self) -> int:
        return len(self.cuts) - 1

    def plan(self, p: int) -> tuple[np.ndarray, np.ndarray, _DescriptionPlan]:
        """(the part's rows in the table, their group numbered from the part's first, its plan)."""
        span = slice(self.row_start[self.cuts[p]], self.row_start[self.cuts[p + 1]])
        local = self.group[span] - self.cuts[p]
        return self.rows[span], local, _DescriptionPlan(local, self.hashes[span], self.lengths[span], self.rank[span],
                                                        int(self.cuts[p + 1] - self.cuts[p]), self.max_chars,
                                                        self.want_overflow)

    def needed(self) -> np.ndarray:
        return np.concatenate([np.empty(0, np.int64)] + [self.plan(p)[2].needed() for p in range(len(self))])


def _relationship_parts(scan: Scan, a: dict[str, np.ndarray], parts: _Parts, ends: _Endpoints, chunk_names: pa.Array,
                        doc_names: pa.Array, overflow: dict | None) -> Iterator[pa.Table]:
    """The relationships table a part at a time; a part covers consecutive relationships."""
    texts = _fetch_texts(scan, parts.needed())
    memory.release()
    for p in range(len(parts)):
        sel, local, rel_plan = parts.plan(p)
        first, k = int(parts.cuts[p]), int(parts.cuts[p + 1] - parts.cuts[p])
        lo, hi = pa.array(ends.lo[first:first + k]), pa.array(ends.hi[first:first + k])
        source_ids, target_ids = ends.entity_ids.take(lo), ends.entity_ids.take(hi)
        rel_ids = [ids.relationship_id(x, y) for x, y in zip(source_ids.to_pylist(), target_ids.to_pylist())]
        part = pa.table({
            "relationship_id": pa.array(rel_ids, pa.string()),
            "source_id": source_ids,
            "target_id": target_ids,
            "source": ends.entity_names.take(lo),
            "target": ends.entity_names.take(hi),
            "description": rel_plan.merge(texts),
            "weight": pa.array(np.bincount(local, weights=a["weight"][sel], minlength=k), pa.float64()),
            "chunk_ids": distinct_lists(local, a["chunk_id"][sel], chunk_names, k),
            "doc_ids": distinct_lists(local, a["doc_id"][sel], doc_names, k),
        })
        if overflow is not None:
            names = part.column("source").to_pylist(), part.column("target").to_pylist()
            for i, ordered in rel_plan.overflow(texts).items():
                overflow[("relationships", rel_ids[i])] = (f"{names[0][i]} and {names[1][i]}", ordered)
        yield _conform(part, "relationships")


Scan = Callable[[list[str]], Iterable[pa.RecordBatch]]
BATCH_ROWS = 65_536


def _as_scan(rows: pa.Table | Scan) -> Scan:
    if isinstance(rows, pa.Table):
        return lambda columns: rows.select(columns).to_batches(max_chunksize=BATCH_ROWS)
    return rows


class _Dictionary:
    """Distinct strings met across batches, coded in the order they were first seen; with `key`,
    each one's key is computed once."""

    def __init__(self, key: Callable[[str], str] | None = None):
        self.key = key
        self.values: list[str] = []
        self._keys: list[str] = []
        self.code: dict[str, int] = {}

    @property
    def keys(self) -> np.ndarray:
        return np.array(self._keys, dtype=object)

    def codes(self, column: pa.Array) -> np.ndarray:
        """The code of every row (Arrow dictionary encoding: Python sees each batch's distinct values)."""
        encoded = column.dictionary_encode()
        local = []
        for value in encoded.dictionary.to_pylist():
            code = self.code.get(value)
            if code is None:
                code = self.code[value] = len(self.values)
                self.values.append(value)
                if self.key is not None:
                    self._keys.append(self.key(value))
            local.append(code)
        return np.asarray(local, dtype=np.int64)[to_numpy(encoded.indices, np.int64)] if len(column) else np.empty(0, np.int64)

    def sort(self) -> tuple[pa.Array, np.ndarray]:
        """(the values in sorted order, the sorted position of each code): recoded, codes sort as the values do."""
        order = np.argsort(np.array(self.values, dtype=object), kind="stable") if self.values else np.empty(0, np.int64)
        position = np.empty(len(order), dtype=np.int32)
        position[order] = np.arange(len(order), dtype=np.int32)
        return pa.array([self.values[i] for i in order.tolist()], pa.string()), position


def _read_codes(scan: Scan, coded: dict[str, _Dictionary], number: str) -> dict[str, np.ndarray]:
    """One pass over a table: per row, the code of each `coded` column (int32), the `number`
    column, and the hash and length of its description. About 36 bytes a row."""
    dtypes = {**dict.fromkeys(coded, np.int32), number: np.float64 if number == "weight" else np.int32,
              "description": np.int64, "length": np.int32}
    parts: dict[str, list[np.ndarray]] = {c: [] for c in dtypes}
    for batch in scan([*coded, number, "description"]):
        for column, dictionary in coded.items():
            parts[column].append(dictionary.codes(batch.column(column)).astype(np.int32))
        # a copy: a zero-copy view would keep the whole imported batch alive, descriptions included
        parts[number].append(np.array(to_numpy(batch.column(number), dtypes[number]), copy=True))
        hashes, lengths = _description_hashes(batch.column("description"))
        parts["description"].append(hashes)
        parts["length"].append(lengths.astype(np.int32))
    out = {}
    for column, dtype in dtypes.items():  # one column at a time, handing each one's pieces back
        out[column] = np.concatenate(parts.pop(column)) if parts[column] else np.empty(0, dtype)
        memory.release()
    return out


def _description_hashes(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(64-bit hash, length in characters) per row; length 0 for a missing or empty description.
    Two distinct descriptions of one entity sharing a hash would merge (p ~ n^2 / 2^64)."""
    encoded = column.dictionary_encode()
    if not len(encoded.dictionary):
        return np.zeros(len(column), np.int64), np.zeros(len(column), np.int64)
    hashes = np.array([hash(t) for t in encoded.dictionary.to_pylist()], dtype=np.int64)
    lengths = to_numpy(pc.utf8_length(encoded.dictionary), np.int64)
    index = to_numpy(pc.fill_null(encoded.indices, -1), np.int64)
    present = index >= 0
    index[~present] = 0
    return np.where(present, hashes[index], 0), np.where(present, lengths[index], 0)


class _Texts:
    """Descriptions by their 64-bit hash: one Arrow array in hash order (as a dict of Python
    strings, the texts a million chunks' relationships keep took several GB)."""

    def __init__(self, hashes: np.ndarray, texts: pa.Array):
        self.hashes, self.texts = hashes, texts  # hashes sorted and distinct

    def take(self, wanted: np.ndarray) -> pa.Array:
        at = np.minimum(np.searchsorted(self.hashes, wanted), max(len(self.hashes) - 1, 0))
        if len(wanted) and not np.array_equal(self.hashes[at], wanted):
            raise KeyError("a description that was not fetched")
        return self.texts.take(pa.array(at))


def _fetch_texts(scan: Scan, wanted: np.ndarray) -> _Texts:
    """The description with each hash in `wanted` (a second pass, keeping only those)."""
    found_hashes, found_texts = [np.empty(0, np.int64)], [pa.array([], pa.string())]
    wanted = unique(wanted) if len(wanted) else wanted
    for batch in scan(["description"]) if len(wanted) else ():
        distinct = batch.column("description").dictionary_encode().dictionary
        hashes = np.array([hash(t) for t in distinct.to_pylist()], dtype=np.int64)
        found = wanted[np.minimum(np.searchsorted(wanted, hashes), len(wanted) - 1)] == hashes  # (np.isin re-sorts `wanted` per batch)
        if found.any():
            found_hashes.append(hashes[found])
            found_texts.append(distinct.filter(pa.array(found)))
    hashes = np.concatenate(found_hashes)
    order = np.argsort(hashes, kind="stable")  # the first text met with each hash, as before
    order = order[np.r_[True, hashes[order][1:] != hashes[order][:-1]]] if len(order) else order
    return _Texts(hashes[order], pa.concat_arrays(found_texts).take(pa.array(order)))


class _DescriptionPlan:
    """merge_descriptions for every group at once, from (group, description hash, length, rank)
    per row: distinct descriptions ordered by mentions, then earliest rank, then text, and
    kept while they fit `max_chars`. The order is computed on hashes; only the descriptions that
    can be kept (and those tied with the last kept one, whose text decides the order) are read."""

    def __init__(self, group: np.ndarray, hashes: np.ndarray, lengths: np.ndarray, rank: np.ndarray, n_groups: int,
                 max_chars: int, want_overflow: bool):
        self.n_groups, self.max_chars = n_groups, max_chars
        present = (group >= 0) & (lengths > 0)  # group -1: a row no group takes
        g, h, r = group[present], hashes[present], rank[present]
        order = np.lexsort((h, g))
        g, h, r, length = g[order], h[order], r[order], lengths[present][order].astype(np.int64)
        firsts = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (h[1:] != h[:-1])]) if len(g) else np.empty(0, np.int64)
        count = np.diff(np.r_[firsts, len(g)])
        earliest = np.minimum.reduceat(r, firsts) if len(g) else firsts
        g, h, length = g[firsts], h[firsts], length[firsts]
        order = np.lexsort((h, earliest, -count, g))
        self.g, self.h, self.count, self.earliest = g[order], h[order], count[order], earliest[order]
        cost = length[order] + 1
        self.start = np.searchsorted(self.g, np.arange(n_groups + 1))
        spent = np.cumsum(cost)
        before = np.r_[0, spent][self.start[:-1]]
        within = spent - before[self.g] if len(self.g) else spent
        keep = (within <= max_chars) | (np.arange(len(self.g)) == self.start[self.g])
        # a tie on (mentions, earliest) is broken by the text: read every description tied with
        # a group's last kept one (a kept prefix never reaches past that tie)
        new_tie = np.r_[True, (self.g[1:] != self.g[:-1]) | (self.count[1:] != self.count[:-1])
                        | (self.earliest[1:] != self.earliest[:-1])] if len(self.g) else np.empty(0, bool)
        tie = np.cumsum(new_tie) - 1
        last_kept = np.full(n_groups, -1, dtype=np.int64)
        np.maximum.at(last_kept, self.g[keep], tie[keep])
        self.candidate = tie <= last_kept[self.g]
        totals = spent[self.start[1:] - 1] - before - 1 if len(self.g) else np.zeros(n_groups, np.int64)
        self.over = np.flatnonzero((self.start[1:] > self.start[:-1]) & (totals > max_chars)) if want_overflow else np.empty(0, np.int64)
        self.candidate |= np.isin(self.g, self.over)

    def needed(self) -> np.ndarray:
        return self.h[self.candidate]

    def _ordered(self, texts: _Texts, rows: np.ndarray) -> pa.Table:
        """The given rows with their texts, in exact order (group, -mentions, earliest, text)."""
        return pa.table({"g": self.g[rows], "c": -self.count[rows], "e": self.earliest[rows],
                         "d": texts.take(self.h[rows])}).sort_by(
            [("g", "ascending"), ("c", "ascending"), ("e", "ascending"), ("d", "ascending")])

    def merge(self, texts: _Texts, cut: bool = True) -> pa.Array:
        """Per group, its kept descriptions joined by spaces (and cut to max_chars)."""
        rows = self._ordered(texts, np.flatnonzero(self.candidate))
        g = to_numpy(rows.column("g"), np.int64)
        start = np.searchsorted(g, np.arange(self.n_groups + 1))
        spent = np.cumsum(to_numpy(pc.utf8_length(rows.column("d")), np.int64) + 1)
        within = spent - np.r_[0, spent][start[:-1]][g] if len(g) else spent
        keep = (within <= self.max_chars) | (np.arange(len(g)) == start[g])
        offsets = np.r_[0, np.cumsum(np.bincount(g[keep], minlength=self.n_groups))]
        kept = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), rows.column("d").filter(pa.array(keep)).combine_chunks())
        joined = pc.binary_join(kept, " ")
        return pc.utf8_slice_codeunits(joined, 0, self.max_chars) if cut else joined

    def overflow(self, texts: _Texts) -> dict[int, list[str]]:
        """The ordered descriptions of each group over the budget."""
        rows = self._ordered(texts, np.flatnonzero(np.isin(self.g, self.over)))
        out: dict[int, list[str]] = {}
        for g, d in zip(rows.column("g").to_pylist(), rows.column("d").to_pylist()):
            out.setdefault(g, []).append(d)
        return out


def _corpus_rank(chunk_names: list[str], positions: dict) -> np.ndarray:
    """Each chunk's rank in corpus order: by `positions`, else by id."""
    order = sorted(range(len(chunk_names)),
                   key=lambda i: (0, positions[chunk_names[i]]) if chunk_names[i] in positions else (1, chunk_names[i]))
    rank = np.empty(len(chunk_names), dtype=np.int64)
    rank[order] = np.arange(len(chunk_names))
    return rank


def _group_sums(group: np.ndarray, code: np.ndarray, weights: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group, code, summed weight) per distinct (group, code) pair, sorted by group then code."""
    pairs, inverse = np.unique(group * width + code, return_inverse=True)
    return pairs // width, pairs % width, np.bincount(inverse.reshape(-1), weights=weights, minlength=len(pairs))


def _profiles(keys: list[str], m_key, m_count, m_type, type_names: list[str], m_chunk, src, tgt, keep) -> dict[str, KeyProfile]:
    """What linking knows of each key: mentions, types, chunks (as codes) and related keys (from
    the assertions `keep` marks)."""
    profiles = {k: KeyProfile(k) for k in keys}
    for k, n in zip(keys, np.bincount(m_key, weights=m_count, minlength=len(keys)).astype(np.int64).tolist()):
        profiles[k].mentions = n
    for k, t, n in zip(*(x.tolist() for x in _group_sums(m_key, m_type, m_count, max(len(type_names), 1)))):
        profiles[keys[k]].types[type_names[t]] = int(n)
    width = int(m_chunk.max()) + 1 if len(m_chunk) else 1
    pairs = unique(m_key * width + m_chunk)
    chunk_codes = (pairs % width).astype(np.int32)  # one array; each key's chunks are a slice of it
    bounds = np.searchsorted(pairs // width, np.arange(len(keys) + 1)).tolist()
    for i, k in enumerate(keys):
        profiles[k].chunks = CodeSet(chunk_codes[bounds[i]:bounds[i + 1]])
    k, step = len(keys), PART_ROWS
    once = unique(np.concatenate([np.empty(0, np.int64)] + [  # each related pair once, a slice of assertions at a time
        unique(np.minimum(s, t) * k + np.maximum(s, t)) for s, t in
        ((src[o:o + step][keep[o:o + step]], tgt[o:o + step][keep[o:o + step]]) for o in range(0, len(src), step))]))
    linked = unique(np.concatenate([once, (once % k) * k + once // k]))  # both directions
    neighbour_codes = (linked % len(keys)).astype(np.int32)
    bounds = np.searchsorted(linked // len(keys), np.arange(len(keys) + 1)).tolist()
    for i, k in enumerate(keys):
        profiles[k].code, profiles[k].neighbours = i, CodeSet(neighbour_codes[bounds[i]:bounds[i + 1]])
    return profiles


def _best_names(group: np.ndarray, name_code: np.ndarray, count: np.ndarray, n_groups: int, names: list[str]) -> list[str]:
    """Per group, its most mentioned name (then the longest, then the first in order)."""
    g, code, total = _group_sums(group, name_code, count, max(len(names), 1))
    name_rank = np.empty(len(names), dtype=np.int64)
    name_rank[np.argsort(np.array(names, dtype=object), kind="stable")] = np.arange(len(names))
    lengths = np.array([len(n) for n in names], dtype=np.int64)
    order = np.lexsort((name_rank[code], -lengths[code], -total, g))
    firsts = order[np.r_[True, g[order][1:] != g[order][:-1]]] if len(order) else order
    best = [""] * n_groups
    for gi, ci in zip(g[firsts].tolist(), code[firsts].tolist()):
        best[gi] = names[ci]
    return best


def _types(m_entity, m_type, m_count, type_names: list[str], n: int) -> dict[str, pa.Array]:
    """Each entity's types, most mentioned first ('ENTITY', the extractor's default, last among equals)."""
    types: list[list[tuple]] = [[] for _ in range(n)]
    for e, t, c in zip(*(x.tolist() for x in _group_sums(m_entity, m_type, m_count, max(len(type_names), 1)))):
        types[e].append((-c, type_names[t] == "ENTITY", type_names[t]))
    ordered = [[t for *_, t in sorted(ts)] for ts in types]
    return {"type": pa.array([ts[0] for ts in ordered], pa.string()), "types": pa.array(ordered, pa.list_(pa.string()))}


def _alias_table(names: _Dictionary, m_name, m_count, keys, canonical, accepted, entity_ids, entity_of_key) -> pa.Table:
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
    counts = np.bincount(m_name, weights=m_count, minlength=len(names.values)).astype(np.int64)
    rows = []
    for code in sorted(unique(m_name).tolist(), key=lambda c: names.values[c]):
        key = names.key(names.values[code])
        how, why = merge_evidence(key)
        rows.append({"alias": names.values[code], "entity_id": entity_ids[entity_of_key[key_index[key]]], "method": how,
                     "evidence": why, "mention_count": int(counts[code])})
    return pa.Table.from_pylist(rows, schema=tables.schema("entity_aliases").arrow)
