"""Extractive community reports (the default, no LLM), bottom-up: leaves from their own
entities and relationships, parents from their children's reports. Every sentence is copied
from the community's own text, so a report never says more than its sources."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from itertools import islice

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.config import ReportConfig
from graphwright.storage import contracts
from graphwright.util.numeric import sorted_codes, to_numpy, unique
from graphwright.util.rows import row_dicts

GENERATOR = "extractive@2"


def _title(names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


def _sentences(text: str) -> list[str]:
    from graphwright.text.sentences import split_sentences

    return [text[a:b].strip() for a, b in split_sentences(text) if text[a:b].strip()]


def _lead(text: str, n: int = 2) -> str:
    """The first `n` sentences of `text`, joined, splitting no further than they reach."""
    from graphwright.text.sentences import iter_sentences

    spans = ((a, b) for a, b in iter_sentences(text) if text[a:b].strip())
    return " ".join(text[a:b].strip() for a, b in islice(spans, n))


def lead_memo() -> Callable[[str], str]:
    """_lead remembered per text for one build: a description is in the context of one community
    per level, so each distinct text is split once (at 145k chunks splitting every description
    again was half the stage)."""
    memo: dict[str, str] = {}

    def lead(text: str) -> str:
        if text not in memo:
            memo[text] = _lead(text)
        return memo[text]

    return lead


def _pick_sentences(candidates: list[str], limit: int) -> list[str]:
    out, seen = [], set()
    for sentence in candidates:
        key = " ".join(sentence.split()).casefold()
        if key in seen:
            continue
        seen.add(key)
        out.append(" ".join(sentence.split()))
        if len(out) == limit:
            break
    return out


def build_reports(
    communities: pa.Table, entities: pa.Table, relationships: pa.Table, config: ReportConfig,
    previous: pa.Table | None = None, descriptions: Callable[[list[str]], pa.Table] | None = None,
) -> tuple[pa.Table, dict[str, int]]:
    """Reports for every community of at least `min_size` entities, deepest level first.

    Each report is built from a bounded context (its top entities and relationships, or its
    children's reports); a report whose context hashes the same as one in `previous` is reused
    instead of rebuilt. Returns the table and {"built": n, "reused": m}.

    For large indexes, `relationships` may carry a boolean `described` instead of its
    descriptions; `descriptions` (ids -> relationship_id, description) then reads the
    descriptions of the relationships reports use.
    """
    ent = {r["entity_id"]: r for r in row_dicts(entities.select(["entity_id", "name", "type", "description", "degree", "mention_count"]))}
    # only the relationships some report can use become Python rows (the rest stay in Arrow)
    top = _top_relationships(communities, relationships, config.context_relationships)
    top_rows = np.concatenate([np.empty(0, np.int64), *top])
    used = relationships.take(pa.array(unique(top_rows), pa.int64()))
    if "description" not in used.column_names:
        text = descriptions(used.column("relationship_id").to_pylist())
        by_id = dict(zip(text.column("relationship_id").to_pylist(), text.column("description").to_pylist()))
        used = used.append_column("description", pa.array([by_id[r] for r in used.column("relationship_id").to_pylist()], pa.string()))
    rel = {r["relationship_id"]: r for r in row_dicts(used.select(["relationship_id", "source", "target", "description", "weight"]))}
    community_rows = row_dicts(communities.drop_columns(["relationship_ids"]))
    # one take for all communities: each take from a chunked column concatenates its chunks
    # first (8 ms a community with 5.2M relationships, 53 s of the stage at 1.2M chunks)
    names = relationships.column("relationship_id").take(pa.array(top_rows, pa.int64())).to_pylist()
    bounds = np.cumsum([0] + [len(mine) for mine in top]).tolist()
    for c, start, end in zip(community_rows, bounds, bounds[1:]):
        c["relationship_ids"] = names[start:end]
    reusable = {r["input_hash"]: r for r in row_dicts(previous)} if previous is not None else {}

    reports: dict[str, dict] = {}
    stats = {"built": 0, "reused": 0}
    lead = lead_memo()
    # deepest level first, so every child report exists before its parent's
    for c in sorted(community_rows, key=lambda c: (-c["level"], c["community_id"])):
        if c["size"] < config.min_size:
            continue
        context = report_context(c, ent, rel, [reports[k] for k in c["children_ids"] if k in reports], config, lead)
        input_hash = ids.stable_id("report-input", GENERATOR, json.dumps(context, sort_keys=True), length=32)
        if input_hash in reusable:
            report = {**reusable[input_hash]}
            stats["reused"] += 1
        else:
            report = {**extractive_report(context, config), "input_hash": input_hash, "generator": GENERATOR}
            stats["built"] += 1
        reports[c["community_id"]] = {**report, "community_id": c["community_id"], "level": c["level"]}
    rows = [reports[k] for k in sorted(reports)]
    return pa.Table.from_pylist(rows, schema=contracts.schema("community_reports").arrow), stats


def _top_relationships(communities: pa.Table, relationships: pa.Table, k: int) -> list[np.ndarray]:
    """Per community, the rows of `relationships` holding its k heaviest relationships that have
    a description (ties by id), computed over all communities at once."""
    lists = communities.column("relationship_ids").combine_chunks()
    owner = to_numpy(pc.list_parent_indices(lists), np.int64)
    row = to_numpy(pc.fill_null(pc.index_in(pc.list_flatten(lists), value_set=relationships.column("relationship_id").combine_chunks()), -1),
                   np.int64)
    known = row >= 0  # a relationship missing from the table is skipped
    owner, row = owner[known], row[known]
    described = to_numpy(relationships.column("described"), bool) if "described" in relationships.column_names else \
        to_numpy(pc.fill_null(pc.greater(pc.utf8_length(relationships.column("description")), 0), False), bool)
    owner, row = owner[described[row]], row[described[row]]
    weight = to_numpy(relationships.column("weight"), np.float64)
    id_rank, _ = sorted_codes(relationships.column("relationship_id"))
    order = np.lexsort((id_rank[row], -weight[row], owner))
    owner, row = owner[order], row[order]
    start = np.searchsorted(owner, np.arange(communities.num_rows + 1))
    return [row[start[i]:min(start[i + 1], start[i] + k)] for i in range(communities.num_rows)]


def report_context(community: dict, ent: dict, rel: dict, children: list[dict], config: ReportConfig,
                   lead: Callable[[str], str] = _lead) -> dict:
    """Everything a report is written from, bounded: the community's most connected entities and
    heaviest relationships (first sentences of their descriptions) and its children's summaries.
    The report's input hash is this context's hash, so it changes exactly when the report would."""
    members = sorted((ent[e] for e in community["entity_ids"]), key=lambda e: (-e["degree"], -e["mention_count"], e["name"]))
    inner = sorted((rel[r] for r in community["relationship_ids"]), key=lambda r: (-r["weight"], r["relationship_id"]))
    n_chunks = community["n_chunks"]
    # Items are selected by rank but listed by name: a weight that grows without changing which
    # items are selected must not change the context (and so trigger a new report).
    top_entities = sorted(members[: config.context_entities], key=lambda e: e["name"])
    top_relationships = sorted([r for r in inner if r["description"]][: config.context_relationships], key=lambda r: (r["source"], r["target"]))
    return {
        "entity_ids": [e["entity_id"] for e in top_entities],
        "relationship_ids": [r["relationship_id"] for r in top_relationships],
        "sub_community_ids": sorted(r["community_id"] for r in children),
        "entities": [[e["name"], e["type"], lead(e["description"])] for e in top_entities],
        "relationships": [[r["source"], r["target"], lead(r["description"])] for r in top_relationships],
        "children": [[r["title"], r["summary"], r["rating"]] for r in sorted(children, key=lambda r: (r["title"], r["summary"]))],
        # in rank order, among those listed: the title and findings lead with them
        "key_entities": [e["name"] for e in members[:min(5, config.context_entities)]],
        # an absolute, local scale in half points: a rating must not move because another community grew
        "rating": round(min(10.0, 2.5 * math.log2(1 + n_chunks)) * 2) / 2,
    }


def extractive_report(context: dict, config: ReportConfig) -> dict:
    if context["children"]:
        candidates = [s for _, summary, _ in context["children"] for s in _sentences(summary)[:2]]
        basis = f"the reports of its {len(context['children'])} sub-communities"
    else:
        candidates = [s for _, _, d in context["relationships"] for s in _sentences(d)]
        candidates += [s for _, _, d in context["entities"] for s in _sentences(d)[:1]]
        basis = "its entities and relationships"
    title = _title(context["key_entities"][:3])
    summary = " ".join(_pick_sentences(candidates, config.max_sentences)) or f"{title}: entities that occur together."
    described = {name: (etype, desc) for name, etype, desc in context["entities"]}
    findings = [{"summary": f"{name} ({described[name][0]})", "explanation": described[name][1]} for name in context["key_entities"]]
    findings += [{"summary": f"{a} and {b}", "explanation": " ".join(_sentences(d)[:1])} for a, b, d in context["relationships"][:5]]
    full = "\n".join([f"# {title}", "", summary, ""] + [f"- {f['summary']}: {f['explanation']}" for f in findings])
    return {
        "title": title,
        "summary": summary,
        "rating": context["rating"],
        "rating_explanation": f"2.5 x log2(1 + supporting text chunks), capped at 10, in half points; summary drawn from {basis}.",
        "findings": json.dumps(findings, ensure_ascii=False),
        "full_content": full,
        "entity_ids": context["entity_ids"],
        "relationship_ids": context["relationship_ids"],
        "chunk_ids": [],
        "sub_community_ids": context["sub_community_ids"],
    }
