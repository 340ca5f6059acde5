"""Community reports, bottom-up.

Extractive (the default, no LLM): leaves from their own entities and relationships, parents from
their children's reports; every sentence is copied from the community's own text, so a report
never says more than its sources. LLM (`report.mode: llm`, graphwright.llm_reports for the
planning, prompt and parsing): written at index time, leaves first. Lazy (`report.mode: lazy`):
the same LLM reports, written by `ensure_reports` only for the communities a query touches."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids, tables
from graphwright.config import ReportConfig
from graphwright.numeric import sorted_codes, to_numpy, unique
from graphwright.store import IndexStore, read_in

GENERATOR = "extractive@2"


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
    previous: pa.Table | None = None, descriptions: Callable[[list[str]], pa.Table] | None = None,
) -> tuple[pa.Table, dict[str, int]]:
    """Reports for every community of at least `min_size` entities, deepest level first.

    Each report is built from a bounded context (its top entities and relationships, or its
    children's reports); a report whose context hashes the same as one in `previous` is reused
    instead of rebuilt. Returns the table and {"built": n, "reused": m}.

    For large indexes, `communities` may carry `n_chunks` instead of its `chunk_ids` lists, and
    `relationships` a boolean `described` instead of its descriptions; `descriptions` (ids ->
    relationship_id, description) then reads the descriptions of the relationships reports use.
    """
    ent = {r["entity_id"]: r for r in entities.select(["entity_id", "name", "type", "description", "degree", "mention_count"]).to_pylist()}
    # only the relationships some report can use become Python rows (the rest stay in Arrow)
    top = _top_relationships(communities, relationships, config.context_relationships)
    top_rows = np.concatenate([np.empty(0, np.int64), *top])
    used = relationships.take(pa.array(unique(top_rows), pa.int64()))
    if "description" not in used.column_names:
        text = descriptions(used.column("relationship_id").to_pylist())
        by_id = dict(zip(text.column("relationship_id").to_pylist(), text.column("description").to_pylist()))
        used = used.append_column("description", pa.array([by_id[r] for r in used.column("relationship_id").to_pylist()], pa.string()))
    rel = {r["relationship_id"]: r for r in used.select(["relationship_id", "source", "target", "description", "weight"]).to_pylist()}
    if "chunk_ids" in communities.column_names:
        communities = communities.drop_columns(["chunk_ids"]).append_column("n_chunks", pc.list_value_length(communities.column("chunk_ids")))
    community_rows = communities.drop_columns(["relationship_ids"]).to_pylist()
    # one take for all communities: each take from a chunked column concatenates its chunks
    # first (8 ms a community with 5.2M relationships, 53 s of the stage at 1.2M chunks)
    names = relationships.column("relationship_id").take(pa.array(top_rows, pa.int64())).to_pylist()
    bounds = np.cumsum([0] + [len(mine) for mine in top]).tolist()
    for c, start, end in zip(community_rows, bounds, bounds[1:]):
        c["relationship_ids"] = names[start:end]
    reusable = {r["input_hash"]: r for r in previous.to_pylist()} if previous is not None else {}

    reports: dict[str, dict] = {}
    stats = {"built": 0, "reused": 0}
    # deepest level first, so every child report exists before its parent's
    for c in sorted(community_rows, key=lambda c: (-c["level"], c["community_id"])):
        if c["size"] < config.min_size:
            continue
        context = report_context(c, ent, rel, [reports[k] for k in c["children_ids"] if k in reports], config)
        input_hash = ids.stable_id("report-input", GENERATOR, json.dumps(context, sort_keys=True), length=32)
        if input_hash in reusable:
            report = {**reusable[input_hash]}
            stats["reused"] += 1
        else:
            report = {**_extractive_report(context, config), "input_hash": input_hash, "generator": GENERATOR}
            stats["built"] += 1
        reports[c["community_id"]] = {**report, "community_id": c["community_id"], "level": c["level"]}
    rows = [reports[k] for k in sorted(reports)]
    return pa.Table.from_pylist(rows, schema=tables.schema("community_reports").arrow), stats


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


def report_context(community: dict, ent: dict, rel: dict, children: list[dict], config: ReportConfig) -> dict:
    """Everything a report is written from, bounded: the community's most connected entities and
    heaviest relationships (first sentences of their descriptions) and its children's summaries.
    The report's input hash is this context's hash, so it changes exactly when the report would."""
    members = sorted((ent[e] for e in community["entity_ids"]), key=lambda e: (-e["degree"], -e["mention_count"], e["name"]))
    inner = sorted((rel[r] for r in community["relationship_ids"]), key=lambda r: (-r["weight"], r["relationship_id"]))
    n_chunks = community["n_chunks"] if "n_chunks" in community else len(community["chunk_ids"])
    # Items are selected by rank but listed by name: a weight that grows without changing which
    # items are selected must not change the context (and so trigger a new report).
    top_entities = sorted(members[: config.context_entities], key=lambda e: e["name"])
    top_relationships = sorted([r for r in inner if r["description"]][: config.context_relationships], key=lambda r: (r["source"], r["target"]))
    return {
        "entity_ids": [e["entity_id"] for e in top_entities],
        "relationship_ids": [r["relationship_id"] for r in top_relationships],
        "sub_community_ids": sorted(r["community_id"] for r in children),
        "entities": [[e["name"], e["type"], " ".join(_sentences(e["description"])[:2])] for e in top_entities],
        "relationships": [[r["source"], r["target"], " ".join(_sentences(r["description"])[:2])] for r in top_relationships],
        "children": [[r["title"], r["summary"], r["rating"]] for r in sorted(children, key=lambda r: (r["title"], r["summary"]))],
        "key_entities": [e["name"] for e in members[:5]],  # in rank order: the title and findings lead with them
        # an absolute, local scale in half points: a rating must not move because another community grew
        "rating": round(min(10.0, 2.5 * math.log2(1 + n_chunks)) * 2) / 2,
    }


def _extractive_report(context: dict, config: ReportConfig) -> dict:
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


# ---------------------------------------------------------------- LLM reports: index time and lazy

ENTITY_COLUMNS = ["entity_id", "name", "type", "description", "degree", "mention_count", "chunk_ids"]
RELATIONSHIP_COLUMNS = ["relationship_id", "source", "target", "description", "weight", "chunk_ids"]


def _read_in(read: Callable, name: str, column: str, values, columns: list[str]) -> list[dict]:
    return read_in(read, name, column, values, columns).to_pylist()


def _subtree(communities: dict[str, dict], roots: list[str]) -> list[dict]:
    out, stack = {}, [r for r in roots if r in communities]
    while stack:
        cid = stack.pop()
        if cid not in out:
            out[cid] = communities[cid]
            stack.extend(k for k in communities[cid]["children_ids"] if k in communities)
    return list(out.values())


class LLMReports:
    """Plans and writes LLM reports for some communities of an index (all of them at index time;
    those a query touches, and the children they need, in lazy mode), reading the graph through
    `read` (IndexStore.read, or a published version's pinned read)."""

    def __init__(self, store: IndexStore, config: ReportConfig, llm, communities: list[dict], read: Callable | None = None):
        from graphwright.llm_reports import candidate_chunks, plan_reports

        self.store, self.config, self.llm = store, config, llm
        read = read or store.read
        members = {e for c in communities for e in c["entity_ids"]}  # children's members are their parent's
        self.ent = {r["entity_id"]: r for r in _read_in(read, "entities", "entity_id", members, ENTITY_COLUMNS)}
        self.rel = {r["relationship_id"]: r for r in _read_in(
            read, "relationships", "relationship_id", {r for c in communities for r in c["relationship_ids"]}, RELATIONSHIP_COLUMNS)}
        wanted = {ch for c in communities if c["size"] >= config.min_size
                  for ch in candidate_chunks(c, self.ent, self.rel, config.context_chunks)}
        chunk_text = {r["chunk_id"]: r["text"] for r in _read_in(read, "chunks", "chunk_id", wanted, ["chunk_id", "text"])}
        self.communities = {c["community_id"]: c for c in communities}
        self.plans = plan_reports(communities, self.ent, self.rel, chunk_text, config, llm.model)
        self._engine = None

    def _complete(self, requests):
        from graphwright.llm import make_llm
        from graphwright.llm.cache import complete_through_cache

        def engine():  # created once, on the first cache miss
            if self._engine is None:
                self._engine = make_llm(self.llm)
            return self._engine

        return complete_through_cache(self.store, engine, requests, self.llm.model)

    def _fallback(self, cid: str, rows: dict[str, dict]) -> dict:
        c = self.communities[cid]
        context = report_context(c, self.ent, self.rel, [rows[k] for k in c["children_ids"] if k in rows], self.config)
        return {**_extractive_report(context, self.config), "generator": GENERATOR}

    def write(self, targets: list[str], existing: dict[str, dict]) -> tuple[dict[str, dict], list[dict], dict]:
        """({community_id: report row}, call records, counts) for `targets` and what they need."""
        from graphwright.llm_reports import write_reports

        self.llm.require(f"report.mode {self.config.mode}")
        return write_reports(self.plans, targets, existing, self._complete, self._fallback, self.config, self.llm)


def to_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(sorted(rows, key=lambda r: r["community_id"]), schema=tables.schema("community_reports").arrow)


_LAZY_WRITES = threading.Lock()


def ensure_reports(store: IndexStore, community_ids: list[str], config: ReportConfig, llm, *,
                   pins: dict[str, int] | None = None, run_id: str | None = None) -> list[dict]:
    """Reports of `community_ids` (those of at least `min_size` entities), writing the missing
    ones (and the children reports their contexts need, first) for lazy mode.

    The graph is read at `pins` (a published version's table versions); reports are looked up by
    input hash in the latest `community_reports`, so a report written for any version serves
    every version whose community has the same inputs. New reports are upserted there (a failed
    one is returned as its extractive fallback but not stored, so a later query retries it) and
    the calls are recorded in llm_calls with stage 'report' under `run_id`."""
    def read(name, **kw):
        return store.read(name, version=(pins or {}).get(name), **kw)

    everything = {c["community_id"]: c for c in read("communities").to_pylist()}
    targets = [c for c in dict.fromkeys(community_ids) if c in everything and everything[c]["size"] >= config.min_size]
    if not targets:
        return []
    reports = LLMReports(store, config, llm, _subtree(everything, targets), read)
    from graphwright.llm_reports import needed

    hashes = [reports.plans[c].input_hash for c in needed(reports.plans, targets)]
    # one writer at a time in this process (concurrent queries of a server would otherwise race
    # on the same MERGE); a report written meanwhile by another query is found, not paid twice
    with _LAZY_WRITES:
        existing = {r["input_hash"]: r for r in _read_in(store.read, "community_reports", "input_hash", hashes,
                                                          tables.schema("community_reports").arrow.names)}
        rows, calls, _ = reports.write(targets, existing)
        return _store_lazy(store, targets, rows, calls, existing, llm, run_id)


def _store_lazy(store: IndexStore, targets: list[str], rows: dict, calls: list, existing: dict, llm, run_id: str | None) -> list[dict]:
    from graphwright.llm.cache import record_calls

    gen = generator_of(llm)
    fresh = [r for cid, r in rows.items() if r["generator"] == gen and existing.get(r["input_hash"], {}).get("community_id") != cid]
    if fresh:
        store.upsert("community_reports", to_table(fresh))
    if calls:
        record_calls(store, llm, run_id or _query_run_id(), "report", calls)
    return [rows[c] for c in targets]


def generator_of(llm) -> str:
    from graphwright.llm_reports import generator

    return generator(llm.model)


def _query_run_id() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("query-%Y%m%dT%H%M%S%fZ")
