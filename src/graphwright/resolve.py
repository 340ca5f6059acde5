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

Heavy joins run in plain Arrow on the driver: measured with bench/resolve_joins.py, Arrow took
1.21 CPU s for resolve's joins over 1M mentions, Dask 2.04 s, and Ray Data on one machine was two
orders of magnitude slower at 100k (docs/entity-resolution.md has the figures and the decision).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pyarrow as pa

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
    """The ordered distinct descriptions, concatenated within a character budget."""
    out, used = [], 0
    for d in ordered_descriptions(descriptions):
        if out and used + len(d) + 1 > max_chars:
            break
        out.append(d)
        used += len(d) + 1
    return " ".join(out)[:max_chars]


def _pick_name(surfaces: Counter) -> str:
    return min(surfaces.items(), key=lambda kv: (-kv[1], -len(kv[0]), kv[0]))[0]


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


def _canonical(keys: list[str], groups: dict) -> str:
    """The cluster's most mentioned key (then the longer, then the first): adding a rare variant
    does not change an entity's id."""
    return min(keys, key=lambda k: (-groups[k]["n"], -len(k), k))


def resolve(mentions: pa.Table, assertions: pa.Table, config: ResolveConfig,
            positions: dict[str, object] | None = None, overflow: dict | None = None,
            embed: Callable[[list[str]], np.ndarray] | None = None, adjudicate: Adjudicator | None = None,
            stats: dict | None = None) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(entities, entity_aliases, relationships) from mentions and assertions. `positions` maps a
    chunk id to its place in the corpus (e.g. (source key, chunk index)); by default the chunk id.
    If `overflow` is a dict, rows whose descriptions exceed the budget are added to it as
    {(table, id): (name, ordered distinct descriptions)}, for an LLM to summarize. `embed`
    (texts -> normalized vectors) is used when config.embeddings is on; `adjudicate` decides
    borderline pairs when config.adjudicate is on. Linking figures are added to `stats`."""
    positions = positions or {}

    def describe(table: str, row_id: str, name: str, descs: list) -> str:
        merged = merge_descriptions(descs, config.description_max_chars)
        if overflow is not None:
            ordered = ordered_descriptions(descs)
            if sum(len(d) + 1 for d in ordered) - 1 > config.description_max_chars:
                overflow[(table, row_id)] = (name, ordered)
        return merged

    to_key = resolution_key if config.method == "linked" else normalize_name
    keys_of: dict[str, str] = {}

    def keys(column: pa.ChunkedArray) -> list[str]:
        """The key of every name, normalizing each distinct name once (Arrow dictionary encoding)."""
        encoded = column.combine_chunks().dictionary_encode() if len(column) else pa.array([], pa.string()).dictionary_encode()
        distinct = encoded.dictionary.to_pylist()
        for name in distinct:
            if name not in keys_of:
                keys_of[name] = to_key(name)
        return pa.array([keys_of[n] for n in distinct], pa.string()).take(encoded.indices).to_pylist()

    groups: dict[str, dict] = {}
    alias_counts: Counter = Counter()
    cols = [mentions.column(c).to_pylist() for c in ("name", "type", "description", "count", "chunk_id", "doc_id")]
    for key, name, etype, desc, count, cid, did in zip(keys(mentions.column("name")), *cols):
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"surfaces": Counter(), "types": Counter(), "descs": [], "chunks": set(), "docs": set(), "n": 0}
        g["surfaces"][name] += count
        g["types"][etype] += count
        g["descs"].append((positions.get(cid, cid), desc))
        g["chunks"].add(cid)
        g["docs"].add(did)
        g["n"] += count
        alias_counts[name] += count

    key_assertions = []
    neighbours: dict[str, set] = {}
    cols = [assertions.column(c).to_pylist() for c in ("description", "weight", "chunk_id", "doc_id")]
    for a, b, desc, weight, cid, did in zip(keys(assertions.column("source")), keys(assertions.column("target")), *cols):
        if a not in groups or b not in groups or a == b:
            continue  # an endpoint no mention supports, or two names of one key
        key_assertions.append((a, b, desc, weight, cid, did))
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)

    label, accepted = {k: k for k in groups}, {}
    if config.method == "linked" and len(groups) > 1:
        profiles = {
            k: KeyProfile(k, g["n"], dict(g["types"]), g["chunks"], neighbours.get(k, set()))
            for k, g in groups.items()
        }
        if config.embeddings or config.adjudicate:  # a text per name, for the embedding or the LLM
            for k, p in profiles.items():
                g = groups[k]
                p.text = f"{_pick_name(g['surfaces'])}: {next(iter(ordered_descriptions(g['descs'])), '')}"[:300]
        label, accepted, link_stats = link_keys(profiles, config, embed if config.embeddings else None,
                                                adjudicate if config.adjudicate else None)
        if stats is not None:
            stats.update(link_stats)
    members: dict[str, list[str]] = {}
    for k in sorted(groups):
        members.setdefault(label[k], []).append(k)
    canonical = {}
    for ks in members.values():
        c = _canonical(ks, groups)
        canonical.update({k: c for k in ks})
    key_to_id = {k: ids.entity_id(c) for k, c in canonical.items()}

    rel_groups: dict[tuple[str, str], dict] = {}
    for ka, kb, desc, weight, cid, did in key_assertions:
        a, b = key_to_id[ka], key_to_id[kb]
        if a == b:
            continue  # two names of one entity
        pair = tuple(sorted((a, b)))
        g = rel_groups.get(pair)
        if g is None:
            g = rel_groups[pair] = {"descs": [], "weight": 0.0, "chunks": set(), "docs": set()}
        g["descs"].append((positions.get(cid, cid), desc))
        g["weight"] += weight
        g["chunks"].add(cid)
        g["docs"].add(did)

    degree: Counter = Counter()
    for a, b in rel_groups:
        degree[a] += 1
        degree[b] += 1

    entity_rows = []
    for c in sorted(set(canonical.values())):
        ks = members[label[c]]
        surfaces, types, descs, chunks, docs = Counter(), Counter(), [], set(), set()
        for k in ks:
            g = groups[k]
            surfaces.update(g["surfaces"])
            types.update(g["types"])
            descs.extend(g["descs"])
            chunks |= g["chunks"]
            docs |= g["docs"]
        eid = ids.entity_id(c)
        ordered_types = [t for t, _ in sorted(types.items(), key=lambda kv: (-kv[1], kv[0] == "ENTITY", kv[0]))]
        name = _pick_name(surfaces)
        entity_rows.append(
            {
                "entity_id": eid,
                "canonical_key": c,
                "name": name,
                "type": ordered_types[0],
                "types": ordered_types,
                "description": describe("entities", eid, name, descs),
                "mention_count": sum(groups[k]["n"] for k in ks),
                "degree": degree[eid],
                "chunk_ids": sorted(chunks),
                "doc_ids": sorted(docs),
            }
        )
    name_of = {r["entity_id"]: r["name"] for r in entity_rows}

    best: dict[str, tuple] = {}  # key -> its best accepted pair inside its cluster
    for (a, b), (e, how) in accepted.items():
        if canonical[a] == canonical[b]:
            for k in (a, b):
                if k not in best or (-e.score, e.a, e.b) < (-best[k][0].score, best[k][0].a, best[k][0].b):
                    best[k] = (e, how)

    def merge_evidence(key: str) -> tuple[str, str]:
        """How `key` joined its cluster."""
        c = canonical[key]
        if key == c:
            return "normalized_name", f"normalizes to {key!r}"
        e, how = best[key]
        other = e.b if e.a == key else e.a
        return how, f"normalizes to {key!r}; merged into {c!r} via {other!r} ({e.describe()})"

    evidence_of = {k: merge_evidence(k) for k in groups}
    alias_rows = []
    for alias, n in sorted(alias_counts.items()):
        k = keys_of[alias]
        how, why = evidence_of[k]
        alias_rows.append({"alias": alias, "entity_id": key_to_id[k], "method": how, "evidence": why, "mention_count": n})

    rel_rows = []
    for (a, b) in sorted(rel_groups):
        g = rel_groups[(a, b)]
        rel_rows.append(
            {
                "relationship_id": ids.relationship_id(a, b),
                "source_id": a,
                "target_id": b,
                "source": name_of[a],
                "target": name_of[b],
                "description": describe("relationships", ids.relationship_id(a, b), f"{name_of[a]} and {name_of[b]}", g["descs"]),
                "weight": g["weight"],
                "chunk_ids": sorted(g["chunks"]),
                "doc_ids": sorted(g["docs"]),
            }
        )

    return (
        pa.Table.from_pylist(entity_rows, schema=tables.schema("entities").arrow),
        pa.Table.from_pylist(alias_rows, schema=tables.schema("entity_aliases").arrow),
        pa.Table.from_pylist(rel_rows, schema=tables.schema("relationships").arrow),
    )
