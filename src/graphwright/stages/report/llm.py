"""LLM community reports in GraphRAG's shape (title, summary, rating, rating explanation,
findings, references), truly bottom-up.

Planning needs no LLM: for each community, deepest level first, its context is its own entities
and relationships (plus text units while they fit) when those fit `report.context_tokens`;
otherwise its children's reports stand in for their members' rows, largest child first, until it
fits (and what still does not fit is trimmed by rank). A child's report takes a fixed share of
the context (`child_report_tokens`), so a plan, and its input hash, is known before any report
is written: the hash covers the rows it lists and the input hashes of the children it uses.
Writing then runs level by level, deepest first, so every child report a parent uses exists
when the parent's prompt is built. Tokens are counted with the chunker's tokenizer.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from graphwright import ids
from graphwright.engines.llm.interface import LLMRequest
from graphwright.stages.extract.parse import ParseError, loads_lenient
from graphwright.stages.report.row_tokens import RowTokens
from graphwright.stages.report.support import Lineage, Support
from graphwright.text.tokens import count_tokens, truncate_many, truncate_tokens
from graphwright.util.rows import ranked

PROMPT_VERSION = "report-v1"
TABLES = ("Entities", "Relationships", "Sources", "Reports")

SYSTEM = """You write a report about one community of a knowledge graph: a group of entities and \
the relationships among them. Use only the data tables given; do not invent facts.

Answer with one JSON object:
{"title": "short name of the community naming its key entities",
 "summary": "executive summary: how the community is structured and what matters most about it",
 "rating": 0-10 importance of the community,
 "rating_explanation": "one sentence explaining the rating",
 "findings": [{"summary": "one-line insight", "explanation": "a paragraph grounded in the data, \
ending with its references"}]}

Give 2 to 6 findings. Support every explanation with references to the rows it uses, by table \
name and id, like [Data: Entities (1, 3); Relationships (2); Sources (1); Reports (1)]. \
Cite only ids that appear in the tables."""

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "summary": {"type": "string"},
        "rating": {"type": "number"},
        "rating_explanation": {"type": "string"},
        "findings": {"type": "array", "items": {"type": "object", "properties": {
            "summary": {"type": "string"}, "explanation": {"type": "string"}}, "required": ["summary", "explanation"]}},
    },
    "required": ["title", "summary", "rating", "rating_explanation", "findings"],
}


def generator(model: str) -> str:
    return f"llm:{model}@{PROMPT_VERSION}"


def _clean(text) -> str:
    return " ".join(str(text or "").split())


@dataclass
class Plan:
    community_id: str
    level: int
    input_hash: str
    entities: list[tuple[str, str]]  # (entity id, row text), listed by text
    relationships: list[tuple[str, str]]
    chunks: list[tuple[str, str]]
    children: list[str]  # communities whose reports stand in for their members' rows
    rating: float  # used when the model gives none: 2.5 x log2(1 + supporting chunks), capped at 10
    tokens: int = 0  # the context's size as planned
    needs: list[str] = field(default_factory=list)  # = children: reports to write before this one
    planned: bool = True  # False: only names the input hash its kept report was written with (plan_reports' `fixed`)


def entity_row(e: dict) -> str:
    return _clean(f"{e['name']}|{e['type']}|{e['description']}")


def relationship_row(r: dict) -> str:
    return _clean(f"{r['source']}|{r['target']}|{r['description']}")


def row_format() -> str:
    """What a row's text is made by (the code of entity_row, relationship_row and _clean): token
    counts kept by row id (row_tokens) hold only while it stays the same."""
    code = [f.__code__ for f in (entity_row, relationship_row, _clean)]
    return ids.stable_id("report-row-format", *(c.co_code.hex() + repr(c.co_consts) + repr(c.co_names) for c in code), length=16)


def lineage_of(ent: dict, rel: dict) -> Lineage:
    """Chunk lists read from rows that carry them (`chunk_ids`)."""
    return lambda es, rs: Support.of_lists({e: ent[e]["chunk_ids"] for e in es if e in ent}, {r: rel[r]["chunk_ids"] for r in rs if r in rel})


def with_chunk_counts(communities: list[dict], lineage: Lineage, fixed: dict[str, str] | None = None) -> list[dict]:
    """The communities with `n_chunks` set: a version written before the column reads it as
    None, and it is counted from the members' chunk lists (those in `fixed` need no count)."""
    uncounted = [c for c in communities if c.get("n_chunks") is None and c["community_id"] not in (fixed or {})]
    if not uncounted:
        return communities
    support = lineage({e for c in uncounted for e in c["entity_ids"]}, set())
    counts = {c["community_id"]: support.distinct(c["entity_ids"]) for c in uncounted}
    return [c | {"n_chunks": counts[c["community_id"]]} if c["community_id"] in counts else c for c in communities]


MIN_ROW_COST = 3  # a row's prompt tokens are at least its id, its separator and one token of text


def _counter(known: RowTokens | None) -> Callable[[list[str]], list[int]]:
    return count_tokens if known is None else (lambda texts: known.count(texts, count_tokens))


class _Costs:
    """Prompt tokens of rows, counted when first asked for (a plan looks at the rows that can
    fit its budget, not every row of a large community)."""

    def __init__(self, text: Callable[[str], str], count: Callable[[list[str]], list[int]] = count_tokens,
                 known: dict[str, int] | None = None):
        """`known`: {id: token count} of rows counted before (row_tokens by id)."""
        self.text, self.count = text, count
        self.tokens = {i: n + 2 for i, n in (known or {}).items()}

    def of(self, ids) -> list[int]:
        tokens = self.tokens
        missing = [i for i in dict.fromkeys(ids) if i not in tokens]
        if missing:  # +2: the row's id and separator in the prompt
            tokens.update(zip(missing, (n + 2 for n in self.count([self.text(i) for i in missing]))))
        return [tokens[i] for i in ids]

    def __getitem__(self, i: str) -> int:
        cost = self.tokens.get(i)
        return self.of([i])[0] if cost is None else cost


def plan_reports(communities: list[dict], ent: Mapping, rel: Mapping, chunk_text: Callable[[set[str]], dict[str, str]], config,
                 model: str, known: RowTokens | None = None, fixed: dict[str, str] | None = None,
                 lineage: Lineage | None = None, answer: str = "") -> dict[str, Plan]:
    """A plan per community of at least `min_size` entities among `communities` (which must
    include the children of every community to plan, and their descendants unless `fixed`).
    `ent`/`rel` need name, type (entities), source, target (relationships), description, degree
    / weight, and chunk_ids unless `lineage` reads them: `lineage(entity ids, relationship ids)`
    gives the chunk lists of the members of the communities that take text units (the lists of
    a top-level community's members are most of the index's lineage). Every community to plan
    has its `n_chunks` (with_chunk_counts). `chunk_text(ids)`
    reads the texts of the candidate text units, asked once for those of every community that
    can take some. `known`: token counts of row texts from earlier runs (row_tokens); the plans
    are the same without it. `fixed`: {community id: input hash} of communities whose inputs did
    not change (report.stale), given a plan that only names that hash: their reports are reused
    as they are, and neither their rows nor their descendants are needed. `answer`: the LLM
    settings an answer depends on beside the prompt (LLMConfig.answer_settings), part of every
    input hash: a report written under other ones is not reused."""
    fixed = fixed or {}
    eligible = {c["community_id"]: c for c in communities if c["size"] >= config.min_size}
    e_text, r_text = {}, {}

    def entity_text(i: str) -> str:
        return e_text[i] if i in e_text else e_text.setdefault(i, entity_row(ent[i]))

    def relationship_text(i: str) -> str:
        return r_text[i] if i in r_text else r_text.setdefault(i, relationship_row(rel[i]))

    count = _counter(known)
    e_cost = _Costs(entity_text, count, known.of_ids("entities", ent) if known else None)
    r_cost = _Costs(relationship_text, count, known.of_ids("relationships", rel) if known else None)
    order = sorted(eligible.values(), key=lambda c: (-c["level"], c["community_id"]))
    rows: dict[str, tuple] = {}  # what each plan lists: (entities, relationships, children, room for text units)
    # the members the rows lack (none in a consistent index), found once in set operations
    # instead of looking up each member of each community (a top community's 362k relationships)
    to_plan = [c for c in order if c["community_id"] not in fixed]
    absent = (set().union(*(c["entity_ids"] for c in to_plan)).difference(ent),
              set().union(*(c["relationship_ids"] for c in to_plan)).difference(rel))
    for c in order:  # deepest first: a parent's children are planned before it
        cid = c["community_id"]
        rows[cid] = None if cid in fixed else _rows(c, eligible, rows, ent, rel, e_cost, r_cost, config, absent)
    takers = [cid for cid, planned in rows.items() if planned is not None and not planned[2] and planned[3] > 0
              and config.context_chunks > 0]
    support = (lineage or lineage_of(ent, rel))({e for cid in takers for e in eligible[cid]["entity_ids"]},
                                                {r for cid in takers for r in eligible[cid]["relationship_ids"]})
    wanted = {cid: support.top(eligible[cid], config.context_chunks) for cid in takers}
    c_text = {c: _clean(t) for c, t in chunk_text({ch for chunks in wanted.values() for ch in chunks}).items()}
    c_cost = dict(zip(c_text, (n + 2 for n in count(list(c_text.values())))))
    gen = generator(model)
    plans: dict[str, Plan] = {}
    for c in order:
        if c["community_id"] in fixed:
            plans[c["community_id"]] = Plan(c["community_id"], c["level"], fixed[c["community_id"]], [], [], [], [], rating=0.0,
                                            planned=False)
            continue
        keep_e, keep_r, children, room = rows[c["community_id"]]
        chunks: list[str] = []
        for ch in wanted.get(c["community_id"], ()):
            if ch in c_cost and c_cost[ch] <= room:
                chunks.append(ch)
                room -= c_cost[ch]
        plans[c["community_id"]] = _plan(c, keep_e, keep_r, children, chunks, plans, e_cost, r_cost, c_cost,
                                         entity_text, relationship_text, c_text, config, gen, answer)
    if known is not None:  # by id, for the next run: what each row costed, without its +2
        for table, costs in (("entities", e_cost), ("relationships", r_cost)):
            known.note_ids(table, {i: n - 2 for i, n in costs.tokens.items()})
    return plans


def _rows(c, eligible, planned, ent, rel, e_cost, r_cost, config, absent: tuple[set, set]) -> tuple[list[str], list[str], list[str], int]:
    """The rows a community's context lists, the children whose reports stand in for the rest,
    and the room left for text units (when it uses no child report). `absent`: the entity and
    relationship ids of the planned communities that `ent` and `rel` lack."""
    budget, share = config.context_tokens, config.child_report_tokens
    def held(key: str, lacking: set) -> list[str]:
        return [x for x in c[key] if x not in lacking] if lacking else list(c[key])

    keep_e, keep_r = held("entity_ids", absent[0]), held("relationship_ids", absent[1])

    def fits(es, rs, n_children) -> bool:
        if MIN_ROW_COST * (len(es) + len(rs)) + share * n_children > budget:
            return False  # decided without counting a token
        return sum(e_cost.of(es)) + sum(r_cost.of(rs)) + share * n_children <= budget

    children: list[str] = []
    if not fits(keep_e, keep_r, 0):
        kids = sorted((eligible[k] for k in c["children_ids"] if k in planned), key=lambda k: (-k["size"], k["community_id"]))
        left_e, left_r = set(keep_e), set(keep_r)  # what no chosen child covers, as sets: a child costs its own size
        for kid in kids:
            if share * (len(children) + 1) > budget:
                break
            children.append(kid["community_id"])
            left_e.difference_update(kid["entity_ids"])
            left_r.difference_update(kid["relationship_ids"])
            if MIN_ROW_COST * (len(left_e) + len(left_r)) + share * len(children) <= budget:
                keep_e, keep_r = [e for e in keep_e if e in left_e], [r for r in keep_r if r in left_r]
                if fits(keep_e, keep_r, len(children)):
                    break
        keep_e, keep_r = [e for e in keep_e if e in left_e], [r for r in keep_r if r in left_r]
    if not fits(keep_e, keep_r, len(children)):  # still too big: keep the best-ranked rows that fit
        keep_e, keep_r = _trim(keep_e, keep_r, ent, rel, e_cost, r_cost, budget - share * len(children))
    room = budget - sum(e_cost.of(keep_e)) - sum(r_cost.of(keep_r)) if not children else 0
    return keep_e, keep_r, children, room


def _plan(c, keep_e, keep_r, children, chunks, plans, e_cost, r_cost, c_cost, e_text, r_text, c_text, config, gen,
          answer: str) -> Plan:
    share = config.child_report_tokens
    # listed by text, not by rank: a weight that changes without changing what is selected must
    # not change the context (and so trigger a new report)
    entities = sorted(((e, e_text(e)) for e in keep_e), key=lambda t: (t[1], t[0]))
    relationships = sorted(((r, r_text(r)) for r in keep_r), key=lambda t: (t[1], t[0]))
    chunk_rows = sorted(((ch, c_text[ch]) for ch in chunks), key=lambda t: t[0])
    payload = {
        "entities": [t for _, t in entities], "relationships": [t for _, t in relationships],
        "chunks": [t for _, t in chunk_rows], "children": [plans[k].input_hash for k in children],
        "child_report_tokens": share if children else None,
    }
    input_hash = ids.stable_id("report-input", gen, answer, json.dumps(payload, sort_keys=True, ensure_ascii=False), length=32)
    n_chunks = c["n_chunks"]
    tokens = sum(e_cost.of(keep_e)) + sum(r_cost.of(keep_r)) + share * len(children) + sum(c_cost[ch] for ch in chunks)
    return Plan(c["community_id"], c["level"], input_hash, entities, relationships, chunk_rows, children,
                rating=round(min(10.0, 2.5 * math.log2(1 + n_chunks)) * 2) / 2, tokens=tokens, needs=list(children))


def _trim(es, rs, ent, rel, e_cost, r_cost, budget) -> tuple[list[str], list[str]]:
    """Entities by degree and relationships by weight, alternately, while they fit (a row is
    costed only while some room is left)."""
    ranked_e, ranked_r = ranked(ent, es, "degree"), ranked(rel, rs, "weight")
    kept_e, kept_r, used = [], [], 0
    for i in range(max(len(ranked_e), len(ranked_r))):
        if budget - used < MIN_ROW_COST:
            break  # no row fits any more
        for items, costs, kept in ((ranked_e, e_cost, kept_e), (ranked_r, r_cost, kept_r)):
            if i % 256 == 0:
                costs.of(items[i:i + 256])  # costed a slice at a time, in rank order
            if i < len(items) and used + costs[items[i]] <= budget:
                kept.append(items[i])
                used += costs[items[i]]
    return kept_e, kept_r


def needed(plans: dict[str, Plan], targets: list[str]) -> set[str]:
    """`targets` and, transitively, the children whose reports their contexts use."""
    out, stack = set(), [t for t in targets if t in plans]
    while stack:
        cid = stack.pop()
        if cid not in out:
            out.add(cid)
            stack.extend(plans[cid].needs)
    return out


def child_text(report: dict, limit: int) -> str:
    return truncate_tokens(_child_row(report), limit)


def child_texts(reports: dict[str, dict], limit: int) -> dict[str, str]:
    """child_text of each report, tokenized in one batch (the tokenizer spreads it over its
    threads: a parent's children were tokenized one call each, 0.4-0.6 s of an update at 145k),
    each only as far as its cut needs (truncate_many)."""
    texts = {cid: _child_row(r) for cid, r in reports.items()}
    return dict(zip(texts, truncate_many(list(texts.values()), limit)))


def _child_row(report: dict) -> str:
    findings = [f.get("summary", "") for f in findings_of(report.get("findings"))]
    return _clean(f"{report['title']}|{report['summary']}" + (" Findings: " + "; ".join(findings) if findings else ""))


def findings_of(value) -> list[dict]:
    """A report's findings column as a list of dicts (none where it is not one)."""
    try:
        items = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return []
    return [f for f in items or [] if isinstance(f, dict)]


def report_request(plan: Plan, child_reports: dict[str, dict], config, llm,
                   texts: dict[str, str] | None = None) -> tuple[LLMRequest, dict[str, list[str]]]:
    """The request, and per table the ids its rows are numbered by (row n = ids[n - 1]);
    `texts`: child_texts of (some of) its children, made beforehand."""
    refs = plan_refs(plan)
    sections = [
        ("Entities", "id|entity|type|description", [t for _, t in plan.entities]),
        ("Relationships", "id|source|target|description", [t for _, t in plan.relationships]),
        ("Reports", "id|title|summary (reports of sub-communities)",
         [(texts or {}).get(k) or child_text(child_reports[k], config.child_report_tokens) for k in plan.children]),
        ("Sources", "id|text", [t for _, t in plan.chunks]),
    ]
    body = "\n\n".join(f"-----{name}-----\n{header}\n" + "\n".join(f"{i}|{row}" for i, row in enumerate(rows, 1))
                       for name, header, rows in sections if rows)
    request = LLMRequest(messages=(("system", SYSTEM), ("user", f"Data tables:\n\n{body}\n\nWrite the report as JSON.")),
                         json_schema=SCHEMA, max_tokens=llm.max_tokens, temperature=llm.temperature, prompt_version=PROMPT_VERSION)
    return request, refs


def plan_refs(plan: Plan) -> dict[str, list[str]]:
    """Per table, the ids a plan's prompt numbers its rows by (row n = ids[n - 1])."""
    return {"Entities": [e for e, _ in plan.entities], "Relationships": [r for r, _ in plan.relationships],
            "Sources": [c for c, _ in plan.chunks], "Reports": list(plan.children)}


_DATA = re.compile(r"\[Data:([^\]]*)\]", re.IGNORECASE)
_TABLE = re.compile(r"(Entities|Relationships|Sources|Reports)\s*\(([^)]*)\)", re.IGNORECASE)


def cited(texts: list[str], refs: dict[str, list[str]]) -> dict[str, list[str]]:
    """Ids cited by GraphRAG-style references ([Data: Entities (1, 3); Sources (2, +more)]);
    numbers that are not rows of the prompt are ignored."""
    out: dict[str, set[str]] = {name: set() for name in TABLES}
    for text in texts:
        for block in _DATA.findall(text):
            for table, numbers in _TABLE.findall(block):
                name = table.capitalize()
                rows = refs[name]
                for n in re.findall(r"\d+", numbers):
                    if 1 <= int(n) <= len(rows):
                        out[name].add(rows[int(n) - 1])
    return {name: sorted(v) for name, v in out.items()}


def parse_report(text: str | None, plan: Plan, refs: dict[str, list[str]]) -> dict:
    """The report's columns from the model's answer (lenient JSON); ParseError when it is not a
    report (no title or no summary)."""
    data = loads_lenient(text)
    if not isinstance(data, dict):
        raise ParseError("answer is not a JSON object")
    title, summary = _clean(data.get("title")), _clean(data.get("summary"))
    if not title or not summary:
        raise ParseError(f"report without {'title' if not title else 'summary'}: {str(text)[:80]!r}")
    try:
        rating = float(data.get("rating"))
        rating = plan.rating if math.isnan(rating) else max(0.0, min(10.0, rating))
    except (TypeError, ValueError):
        rating = plan.rating
    findings = []
    for f in data.get("findings") or []:
        if isinstance(f, str):
            f = {"summary": f, "explanation": ""}
        if isinstance(f, dict) and (_clean(f.get("summary")) or _clean(f.get("explanation"))):
            findings.append({"summary": _clean(f.get("summary")), "explanation": _clean(f.get("explanation"))})
    explanation = _clean(data.get("rating_explanation"))
    full = "\n\n".join([f"# {title}", summary] + [f"## {f['summary']}\n\n{f['explanation']}" for f in findings])
    return {
        "title": title, "summary": summary, "rating": rating, "rating_explanation": explanation,
        "findings": json.dumps(findings, ensure_ascii=False), "full_content": full,
        **cited_columns(summary, explanation, findings, refs),
    }


def cited_columns(summary: str, explanation: str, findings: list[dict], refs: dict[str, list[str]]) -> dict[str, list[str]]:
    """A report's id columns: the rows its texts cite, as `refs` numbers them."""
    used = cited([summary, explanation] + [f"{f.get('summary', '')} {f.get('explanation', '')}" for f in findings], refs)
    return {"entity_ids": used["Entities"], "relationship_ids": used["Relationships"], "chunk_ids": used["Sources"],
            "sub_community_ids": used["Reports"]}
