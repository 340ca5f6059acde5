"""Resolve: merge mentions into entities and assertions into relationships (plain functions).

Mentions are first grouped by normalized name (graphwright.text.names). With `method: linked`
the name keys are then linked (linking: candidates, scoring, adjudication, clusters). The
aliases table records each merge with its evidence.

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

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.config import ResolveConfig
from graphwright.stages.resolve.codes import (
    Dictionary,
    Scan,
    as_scan,
    best_names,
    corpus_rank,
    group_sums,
    read_codes,
)
from graphwright.stages.resolve.descriptions import DescriptionPlan, fetch_texts
from graphwright.stages.resolve.linking import Adjudicator, canonical_key, link_keys
from graphwright.stages.resolve.profiles import Profiles, key_profiles
from graphwright.storage import contracts
from graphwright.text.names import normalize_name, resolution_key
from graphwright.util import memory
from graphwright.util.numeric import distinct_codes, distinct_lists, grouped_order, pair_inverse, to_numpy, unique


def resolve(mentions: pa.Table | Scan, assertions: pa.Table | Scan, config: ResolveConfig,
            positions: dict[str, object] | None = None, overflow: dict | None = None,
            embed: Callable[[list[str]], np.ndarray] | None = None, adjudicate: Adjudicator | None = None,
            stats: dict | None = None) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(entities, entity_aliases, relationships): resolve_parts with the relationships in one table."""
    resolved = resolve_parts(mentions, assertions, config, positions, overflow, embed, adjudicate, stats)
    parts = list(resolved.relationship_parts)
    schema = contracts.schema("relationships").arrow
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
    names, chunks, docs, types = Dictionary(to_key), Dictionary(), Dictionary(), Dictionary()
    m = read_codes(as_scan(mentions), {"name": names, "type": types, "chunk_id": chunks, "doc_id": docs}, "count")
    a = read_codes(as_scan(assertions), {"source": names, "target": names, "chunk_id": chunks, "doc_id": docs}, "weight")
    memory.release()
    chunk_names, chunk_code = chunks.sort()
    doc_names, doc_code = docs.sort()
    type_names, type_code = types.sort()
    for rows in (m, a):  # recoded so that codes sort as the ids do
        rows["chunk_id"], rows["doc_id"] = chunk_code[rows["chunk_id"]], doc_code[rows["doc_id"]]
    m["type"] = type_code[m["type"]]
    rank = corpus_rank(chunk_names.to_pylist(), positions or {})

    key_of_code = names.keys
    keys = sorted(set(key_of_code[distinct_codes(m["name"], len(key_of_code))].tolist()))
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
            best = best_names(m_key, m["name"], m["count"], len(keys), names.values)
            plan = DescriptionPlan(m_key, m["description"], m["length"], rank[m["chunk_id"]], len(keys), 0, False)
            first = plan.merge(fetch_texts(as_scan(mentions), plan.needed()), cut=False)
            for i, k in enumerate(keys):
                profiles[k].text = f"{best[i]}: {first[i].as_py()}"[:300]
        label, accepted, link_stats = link_keys(profiles, config, embed if config.embeddings else None,
                                                adjudicate if config.adjudicate else None)
        if stats is not None:
            stats.update(link_stats)
        del profiles
        memory.release()
    canonical, entity_keys, entity_ids, position, entity_of_key, id_rank = key_entities(keys, label, m_key, m["count"])
    n_entities = len(entity_keys)
    m_entity = entity_of_key[m_key]
    entity_names = best_names(m_entity, m["name"], m["count"], n_entities, names.values)

    rows, a_pair, pairs = _supported_pairs(a_src, a_tgt, a_keep, entity_of_key, id_rank)
    del a_src, a_tgt, a_keep, a["source"], a["target"]
    width = max(n_entities, 1)
    by_rank = np.argsort(id_rank)  # entity index of each id rank
    rel_lo, rel_hi = by_rank[pairs // width], by_rank[pairs % width]

    limit, want = config.description_max_chars, overflow is not None
    ent_parts = _Parts(m_entity, n_entities, None, m, rank, limit, want)
    ent_texts = fetch_texts(as_scan(mentions), ent_parts.needed())
    memory.release()
    descriptions = merged_descriptions(ent_parts, ent_texts, entity_ids, entity_names, overflow if want else None)
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
    parts = _relationship_parts(as_scan(assertions), a, rel_parts, endpoints, chunk_names, doc_names, overflow)
    return Resolved(*(_conform(t, name) for t, name in ((entities, "entities"), (aliases, "entity_aliases"))),
                    len(pairs), parts)


def key_entities(keys: list[str], label: dict[str, str], m_key: np.ndarray, m_count: np.ndarray):
    """The entities the linked keys form: (canonical key of each key, entity keys in canonical-key
    order, their ids, entity index by canonical key, entity index of each key, each entity's rank
    by id: a relationship's endpoints are ordered by entity id)."""
    mentioned = dict(zip(keys, np.bincount(m_key, weights=m_count, minlength=len(keys)).astype(np.int64).tolist()))
    members: dict[str, list[str]] = {}
    for k in keys:
        members.setdefault(label[k], []).append(k)
    canonical = {}
    for ks in members.values():
        c = canonical_key(ks, mentioned)
        canonical.update({k: c for k in ks})
    entity_keys = sorted(set(canonical.values()))
    entity_ids = [ids.entity_id(c) for c in entity_keys]
    position = {c: i for i, c in enumerate(entity_keys)}
    entity_of_key = np.array([position[canonical[k]] for k in keys], dtype=np.int64)
    id_rank = np.empty(len(entity_keys), dtype=np.int64)
    id_rank[np.argsort(np.array(entity_ids, dtype=object), kind="stable")] = np.arange(len(entity_keys))
    return canonical, entity_keys, entity_ids, position, entity_of_key, id_rank


def merged_descriptions(parts: "_Parts", texts, entity_ids: list[str], names, overflow: dict | None) -> list:
    """Each part's merged entity descriptions; with `overflow`, the texts over the limit of each
    entity go there (by ("entities", id)) for summarizing."""
    descriptions = []
    for p in range(len(parts)):
        _, _, plan = parts.plan(p)
        descriptions.append(plan.merge(texts))
        for i, ordered in plan.overflow(texts).items() if overflow is not None else ():
            i += int(parts.cuts[p])
            overflow[("entities", entity_ids[i])] = (names[i], ordered)
    return descriptions


def _supported_pairs(a_src: np.ndarray, a_tgt: np.ndarray, a_keep: np.ndarray, entity_of_key: np.ndarray,
                     id_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the assertions that support a relationship, the relationship each supports as an index
    into the third, each relationship as lo * entities + hi on its endpoints' id ranks). Rows
    are coded a slice at a time: forty million of them made a dozen temporaries of 325 MB."""
    width, rows, lo, hi = max(len(id_rank), 1), [np.empty(0, np.int32)], [np.empty(0, np.int32)], [np.empty(0, np.int32)]
    # each key's entity as its id rank, looked up once per endpoint (a table of 53k keys, where
    # the entity and then its rank were two lookups of every row)
    rank_of_key = id_rank[entity_of_key].astype(np.int32) if len(entity_of_key) else np.zeros(1, np.int32)
    for start in range(0, len(a_keep), PART_ROWS):
        part = slice(start, start + PART_ROWS)
        ra, rb = rank_of_key[a_src[part]], rank_of_key[a_tgt[part]]  # a row not kept may name no key (-1): masked
        r = np.flatnonzero(a_keep[part] & (ra != rb))  # two names of one entity support no relationship
        ra, rb = ra[r], rb[r]
        rows.append((r + start).astype(np.int32))
        lo.append(np.minimum(ra, rb))
        hi.append(np.maximum(ra, rb))
    # the distinct pairs by two counting passes over the ranks, not a hash of every code
    pairs, a_pair = pair_inverse(np.concatenate(lo), np.concatenate(hi), width, width)
    return np.concatenate(rows), a_pair.astype(np.int32), pairs


def _conform(table: pa.Table, name: str) -> pa.Table:
    schema = contracts.schema(name).arrow
    return table.select(schema.names).cast(schema)


PART_ROWS = 4_000_000  # mentions or assertions per part (and per slice where rows are coded): ~1 GB of transient arrays
UPDATE_PLAN_BYTES = 1 << 30  # the description plans an update keeps between their two uses (_Parts)


@dataclass
class _Endpoints:
    """Each relationship's entities (indexes into the entity columns), in relationship order."""
    entity_ids: pa.Array
    entity_names: pa.Array
    lo: np.ndarray
    hi: np.ndarray


class _Parts:
    """Rows grouped by consecutive group numbers and cut into parts of about PART_ROWS rows, with
    each part's description plan. Each plan is asked for twice (once to learn which texts to read
    in one pass over the table, once to merge them). A full resolve makes it twice rather than
    keep it: together the plans were the largest thing resolve held. An update's rows are a
    fraction of those (the hubs' 7.7M mentions at 1.2M chunks, under a third of the build's
    peak): `keep_bytes` lets it keep plans of up to that many bytes in all until their second
    use, instead of making them again (0.8 s of a 0.1% update at 1.2M chunks)."""

    def __init__(self, group: np.ndarray, n_groups: int, rows: np.ndarray | None, table: dict[str, np.ndarray],
                 chunk_rank: np.ndarray, max_chars: int, want_overflow: bool, keep_bytes: int = 0):
        """`group` numbers the table's `rows` (None: all of them); `table` holds their description
        hashes, lengths and chunk codes; `chunk_rank` orders chunks by their place in the corpus."""
        by_group = grouped_order(group)
        self.group = group[by_group].astype(np.int32)
        self.rows = (by_group if rows is None else rows[by_group]).astype(np.int32)  # each row's place in the table
        self.hashes, self.lengths = table["description"][self.rows], table["length"][self.rows]
        self.rank = chunk_rank.astype(np.int32)[table["chunk_id"][self.rows]]
        self.max_chars, self.want_overflow = max_chars, want_overflow
        self.row_start = np.r_[0, np.cumsum(np.bincount(self.group, minlength=n_groups))]
        self.cuts = unique(np.r_[0, np.searchsorted(self.row_start, np.arange(PART_ROWS, len(self.group), PART_ROWS)), n_groups])
        self.keep_bytes, self.kept = keep_bytes, {}
        self.plans_made = 0

    def __len__(self) -> int:
        return len(self.cuts) - 1

    def plan(self, p: int) -> tuple[np.ndarray, np.ndarray, DescriptionPlan]:
        """(the part's rows in the table, their group numbered from the part's first, its plan)."""
        span = slice(self.row_start[self.cuts[p]], self.row_start[self.cuts[p + 1]])
        local = self.group[span] - self.cuts[p]
        plan = self.kept.pop(p, None)  # kept for its second use only
        if plan is None:
            plan = DescriptionPlan(local, self.hashes[span], self.lengths[span], self.rank[span],
                                   int(self.cuts[p + 1] - self.cuts[p]), self.max_chars, self.want_overflow)
            self.plans_made += 1
            size = plan.nbytes()
            if size <= self.keep_bytes - sum(k.nbytes() for k in self.kept.values()):
                self.kept[p] = plan
        return self.rows[span], local, plan

    def needed(self) -> np.ndarray:
        return np.concatenate([np.empty(0, np.int64)] + [self.plan(p)[2].needed() for p in range(len(self))])

    def needed_at(self) -> tuple[np.ndarray, np.ndarray]:
        """(needed()'s hashes, a row of the table holding each): what a text fetcher reads
        without looking for the rows (stages.resolve.texts)."""
        hashes, rows = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        for p in range(len(self)):
            sel, _, plan = self.plan(p)
            hashes.append(plan.needed())
            rows.append(sel[plan.needed_at()].astype(np.int64))
        return np.concatenate(hashes), np.concatenate(rows)


def _relationship_parts(scan: Scan | Callable, a: dict[str, np.ndarray], parts: _Parts, ends: _Endpoints, chunk_names: pa.Array,
                        doc_names: pa.Array, overflow: dict | None,
                        chunk_lists: Callable[[int, int], pa.ListArray] | None = None) -> Iterator[pa.Table]:
    """The relationships table a part at a time; a part covers consecutive relationships.
    `scan`: the assertions, or a function from the needed description hashes to their Texts.
    `chunk_lists(first, k)`: the chunk_ids of relationships first..first+k-1, when known."""
    texts = scan(*parts.needed_at()) if getattr(scan, "fetches_texts", False) else fetch_texts(scan, parts.needed())
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
            "chunk_ids": chunk_lists(first, k) if chunk_lists else distinct_lists(local, a["chunk_id"][sel], chunk_names, k),
            "doc_ids": distinct_lists(local, a["doc_id"][sel], doc_names, k),
        })
        if overflow is not None:
            names = part.column("source").to_pylist(), part.column("target").to_pylist()
            for i, ordered in rel_plan.overflow(texts).items():
                overflow[("relationships", rel_ids[i])] = (f"{names[0][i]} and {names[1][i]}", ordered)
        yield _conform(part, "relationships")


def _profiles(keys: list[str], m_key, m_count, m_type, type_names: list[str], m_chunk, src, tgt, keep) -> Profiles:
    """What linking knows of each key (stages.resolve.profiles), from the assertions `keep` marks."""
    return key_profiles(keys, m_key, m_count, m_type, type_names, m_chunk, src, tgt, keep, PART_ROWS)


def _types(m_entity, m_type, m_count, type_names: list[str], n: int) -> dict[str, pa.Array]:
    """Each entity's types, most mentioned first ('ENTITY', the extractor's default, last among equals)."""
    types: list[list[tuple]] = [[] for _ in range(n)]
    for e, t, c in zip(*(x.tolist() for x in group_sums(m_entity, m_type, m_count, max(len(type_names), 1)))):
        types[e].append((-c, type_names[t] == "ENTITY", type_names[t]))
    ordered = [[t for *_, t in sorted(ts)] for ts in types]
    return {"type": pa.array([ts[0] for ts in ordered], pa.string()), "types": pa.array(ordered, pa.list_(pa.string()))}


def _alias_table(names: Dictionary, m_name, m_count, keys, canonical, accepted, entity_ids, entity_of_key) -> pa.Table:
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

    # the names in sorted order (Arrow sorts UTF-8 bytes: code point order, as Python does), each
    # with the key the dictionary computed when it first met the name
    codes = distinct_codes(m_name, len(names.values))
    aliases = pa.array([names.values[c] for c in codes.tolist()], pa.string())
    order = to_numpy(pc.sort_indices(aliases), np.int64)
    codes, aliases = codes[order], aliases.take(order)
    alias_keys = names.keys[codes].tolist() if len(codes) else []
    key_index = {k: i for i, k in enumerate(keys)}
    evidence = [merge_evidence(k) for k in alias_keys]
    counts = np.bincount(m_name, weights=m_count, minlength=len(names.values)).astype(np.int64)
    return pa.table({"alias": aliases, "entity_id": pa.array([entity_ids[entity_of_key[key_index[k]]] for k in alias_keys], pa.string()),
                     "method": pa.array([how for how, _ in evidence], pa.string()),
                     "evidence": pa.array([why for _, why in evidence], pa.string()),
                     "mention_count": pa.array(counts[codes], pa.int64())}, schema=contracts.schema("entity_aliases").arrow)
