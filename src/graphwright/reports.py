"""Extractive community reports (no LLM), built bottom-up: leaves from their own entities and
relationships, parents from their children's reports. Every sentence in a report is copied from
the community's own text, so a report never says more than its sources."""

from __future__ import annotations

import json
import math

import pyarrow as pa

from graphwright import ids, tables
from graphwright.config import ReportConfig

GENERATOR = "extractive@1"


def _title(names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


def _sentences(text: str) -> list[str]:
    from graphwright.extract.nlp import split_sentences

    return [text[a:b].strip() for a, b in split_sentences(text) if text[a:b].strip()]


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
    previous: pa.Table | None = None,
) -> tuple[pa.Table, dict[str, int]]:
    """Reports for every community of at least `min_size` entities, deepest level first.

    A report whose inputs (members and their descriptions, inner relationships, child reports)
    hash the same as a report in `previous` is reused instead of rebuilt. Returns the table and
    {"built": n, "reused": m}.
    """
    ent = {r["entity_id"]: r for r in entities.select(["entity_id", "name", "type", "description", "degree", "mention_count", "chunk_ids"]).to_pylist()}
    rel = {r["relationship_id"]: r for r in relationships.select(["relationship_id", "source", "target", "description", "weight"]).to_pylist()}
    comms = communities.to_pylist()
    reusable = {r["input_hash"]: r for r in previous.to_pylist()} if previous is not None else {}

    reports: dict[str, dict] = {}
    stats = {"built": 0, "reused": 0}
    # deepest level first, so every child report exists before its parent's
    for c in sorted(comms, key=lambda c: (-c["level"], c["community_id"])):
        if c["size"] < config.min_size:
            continue
        members = sorted((ent[e] for e in c["entity_ids"]), key=lambda e: (-e["degree"], -e["mention_count"], e["name"]))
        inner = sorted((rel[r] for r in c["relationship_ids"]), key=lambda r: (-r["weight"], r["relationship_id"]))
        children = sorted((reports[k] for k in c["children_ids"] if k in reports), key=lambda r: (-r["rating"], r["community_id"]))
        n_chunks = len(c["chunk_ids"])
        # a local, absolute scale: a report's rating must not change because another community grew
        rating = round(min(10.0, 2.5 * math.log2(1 + n_chunks)), 1)
        input_hash = ids.stable_id(
            "report-input", GENERATOR, config.max_sentences, rating,
            *(f"{e['name']}|{e['type']}|{e['description']}" for e in members),
            *(f"{r['relationship_id']}|{r['weight']}|{r['description']}" for r in inner),
            *(r["input_hash"] for r in children),
            length=32,
        )
        if input_hash in reusable:
            reports[c["community_id"]] = {**reusable[input_hash], "community_id": c["community_id"], "level": c["level"]}
            stats["reused"] += 1
            continue
        reports[c["community_id"]] = _extractive_report(c, members, inner, children, rating, n_chunks, config)
        reports[c["community_id"]]["input_hash"] = input_hash
        stats["built"] += 1
    rows = [reports[k] for k in sorted(reports)]
    return pa.Table.from_pylist(rows, schema=tables.schema("community_reports").arrow), stats


def _extractive_report(c, members, inner, children, rating, n_chunks, config: ReportConfig) -> dict:
    if children:
        candidates = [s for r in children for s in _sentences(r["summary"])[:2]]
        basis = f"{len(children)} sub-community reports"
    else:
        candidates = [s for r in inner for s in _sentences(r["description"])]
        candidates += [s for e in members for s in _sentences(e["description"])[:1]]
        basis = f"{len(inner)} relationships among its {len(members)} entities"
    summary_sentences = _pick_sentences(candidates, config.max_sentences)
    findings = [
        {"summary": f"{e['name']} ({e['type']})", "explanation": " ".join(_sentences(e["description"])[:2])}
        for e in members[:5]
    ] + [
        {"summary": f"{r['source']} and {r['target']}", "explanation": " ".join(_sentences(r["description"])[:1])}
        for r in inner[:5]
        if r["description"]
    ]
    title = _title([e["name"] for e in members[:3]])
    summary = " ".join(summary_sentences) or f"{title}: {len(members)} entities that occur together."
    full = "\n".join([f"# {title}", "", summary, ""] + [f"- {f['summary']}: {f['explanation']}" for f in findings])
    return {
        "community_id": c["community_id"],
        "level": c["level"],
        "title": title,
        "summary": summary,
        "rating": rating,
        "rating_explanation": f"2.5 x log2(1 + {n_chunks} supporting text chunks), capped at 10; summary built from {basis}.",
        "findings": json.dumps(findings, ensure_ascii=False),
        "full_content": full,
        "generator": GENERATOR,
    }
