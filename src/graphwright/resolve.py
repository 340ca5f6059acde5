"""Resolve: merge mentions into entities and assertions into relationships (a fan-in stage).

Every output row is a pure function of the current mentions and assertions, so resolving after an
update gives exactly what resolving from scratch gives. Lineage: each entity and relationship
carries the sorted set of chunks and documents that support it.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from graphwright import ids, tables
from graphwright.config import ResolveConfig
from graphwright.names import normalize_name


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
    return sorted(surfaces.items(), key=lambda kv: (-kv[1], -len(kv[0]), kv[0]))[0][0]


def resolve(mentions: pa.Table, assertions: pa.Table, config: ResolveConfig,
            positions: dict[str, object] | None = None, overflow: dict | None = None) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(entities, entity_aliases, relationships) from mentions and assertions. `positions` maps a
    chunk id to its place in the corpus (e.g. (source key, chunk index)); by default the chunk id.
    If `overflow` is a dict, rows whose descriptions exceed the budget are added to it as
    {(table, id): (name, ordered distinct descriptions)}, for an LLM to summarize."""
    positions = positions or {}

    def describe(table: str, row_id: str, name: str, descs: list) -> str:
        merged = merge_descriptions(descs, config.description_max_chars)
        if overflow is not None:
            ordered = ordered_descriptions(descs)
            if sum(len(d) + 1 for d in ordered) - 1 > config.description_max_chars:
                overflow[(table, row_id)] = (name, ordered)
        return merged
    groups: dict[str, dict] = {}
    alias_counts: Counter = Counter()
    cols = [mentions.column(c).to_pylist() for c in ("name", "type", "description", "count", "chunk_id", "doc_id")]
    for name, etype, desc, count, cid, did in zip(*cols):
        key = normalize_name(name)
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

    key_to_id = {key: ids.entity_id(key) for key in groups}

    rel_groups: dict[tuple[str, str], dict] = {}
    cols = [assertions.column(c).to_pylist() for c in ("source", "target", "description", "weight", "chunk_id", "doc_id")]
    for src, tgt, desc, weight, cid, did in zip(*cols):
        a, b = key_to_id.get(normalize_name(src)), key_to_id.get(normalize_name(tgt))
        if a is None or b is None or a == b:
            continue  # an endpoint no mention supports, or two names of one entity
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
    for key in sorted(groups):
        g = groups[key]
        eid = key_to_id[key]
        types = [t for t, _ in sorted(g["types"].items(), key=lambda kv: (-kv[1], kv[0] == "ENTITY", kv[0]))]
        entity_rows.append(
            {
                "entity_id": eid,
                "canonical_key": key,
                "name": _pick_name(g["surfaces"]),
                "type": types[0],
                "types": types,
                "description": describe("entities", eid, _pick_name(g["surfaces"]), g["descs"]),
                "mention_count": g["n"],
                "degree": degree[eid],
                "chunk_ids": sorted(g["chunks"]),
                "doc_ids": sorted(g["docs"]),
            }
        )
    name_of = {r["entity_id"]: r["name"] for r in entity_rows}

    alias_rows = [
        {
            "alias": alias,
            "entity_id": key_to_id[normalize_name(alias)],
            "method": config.method,
            "evidence": f"normalizes to {normalize_name(alias)!r}",
            "mention_count": n,
        }
        for alias, n in sorted(alias_counts.items())
    ]

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
