"""LLM community reports (report.mode: llm) and lazy reports (report.mode: lazy), against the fake
OpenAI-compatible server, which answers a report prompt with a report citing every row it got."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pytest
from _helpers import CORPUS, assert_valid, make_config, run, run_stage_details
from fake_openai import FakeOpenAI

from graphwright.pipeline.errors import TooManyFailures
from graphwright.query import query
from graphwright.stages.extract.parse import ParseError
from graphwright.stages.report.llm import Plan, parse_report, report_request
from graphwright.stages.report.llm_reports import LLMReports
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import load_manifest

FAST = {"backoff_s": 0.01, "max_backoff_s": 0.05, "timeout_s": 5}
# small enough that the top-level communities' own rows do not fit, so their children's reports
# stand in for them; large enough that the leaves keep all their rows
BUDGET = {"context_tokens": 600, "child_report_tokens": 60}


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def config(server, mode="llm", **report):
    return make_config(report={"mode": mode, **BUDGET, **report},
                       llm={"model": "fake-model", "base_url": server.base_url, "api_key_env": None, **FAST})


def report_prompts(server) -> list[str]:
    """The user message of every report request the server received, in order."""
    return [b["messages"][1]["content"] for b in server.requests
            if b.get("messages") and b["messages"][0]["content"].startswith("You write a report about one community")]


def plans_of(store: IndexStore, cfg):
    return LLMReports(store, cfg.report, cfg.llm, store.read("communities").to_pylist()).plans


LAZY_QUESTIONS = ("Who is Mara Voss?", "What did Tobias Reed show the council?", "Greywater River clinic Amberfield")


def index_lazily_and_ask(corpus, index, cfg) -> IndexStore:
    """A lazy index whose queries wrote some reports (LAZY_QUESTIONS)."""
    run([corpus], index, cfg)
    for question in LAZY_QUESTIONS:
        query(str(index), question, answer=False)
    return IndexStore(index)


def edit_river(corpus, sentence: str = "The ferry at Greywater River carried grain.") -> None:
    river = corpus / "notes" / "river.txt"
    river.write_text(river.read_text() + f"\n{sentence}\n")


def record_tokenized(monkeypatch) -> list[str]:
    """Every text report planning tokenizes from now on."""
    import graphwright.stages.report.llm as report_llm

    tokenized: list[str] = []
    real = report_llm.count_tokens
    monkeypatch.setattr(report_llm, "count_tokens", lambda texts: tokenized.extend(texts) or real(texts))
    return tokenized


@pytest.fixture
def corpus(tmp_path):
    shutil.copytree(CORPUS, tmp_path / "corpus")
    return tmp_path / "corpus"


def test_parse_report_maps_references_and_tolerates_defects():
    plan = Plan("c", 1, "h", entities=[("e1", "A|PERSON|a"), ("e2", "B|PERSON|b")], relationships=[("r1", "A|B|knows")],
                chunks=[("t1", "text")], children=["k1"], rating=3.5)
    refs = {"Entities": ["e1", "e2"], "Relationships": ["r1"], "Sources": ["t1"], "Reports": ["k1"]}
    text = ('Here it is:\n```json\n{"title": "A and B", "summary": "They know each other [Data: Entities (2)].",'
            ' "rating": "high", "findings": [{"summary": "A knows B", "explanation": "So it says '
            '[Data: Entities (1, 7, +more); Relationships (1); Sources (1); Reports (1)]."}, "a bare finding",],}\n```')
    row = parse_report(text, plan, refs)
    assert row["title"] == "A and B"
    assert row["rating"] == 3.5  # not a number: the plan's rating
    assert (row["entity_ids"], row["relationship_ids"], row["chunk_ids"], row["sub_community_ids"]) == (["e1", "e2"], ["r1"], ["t1"], ["k1"])
    assert '"a bare finding"' in row["findings"] and row["full_content"].startswith("# A and B")
    assert parse_report('{"title": "x", "summary": "y", "rating": 42}', plan, refs)["rating"] == 10.0
    with pytest.raises(ParseError):
        parse_report('{"summary": "no title"}', plan, refs)
    with pytest.raises(ParseError):
        parse_report("I cannot write that report.", plan, refs)


def test_llm_reports_leaves_first_and_parents_read_their_children(server, corpus, tmp_path):
    cfg = config(server)
    summary = run([corpus], tmp_path / "index", cfg)
    store = IndexStore(tmp_path / "index")
    reports = {r["community_id"]: r for r in assert_valid(store, "community_reports").to_pylist()}
    plans = plans_of(store, cfg)
    assert set(reports) == set(plans) and summary["recomputed"]["reports_built"] == len(plans)
    assert {r["generator"] for r in reports.values()} == {"llm:fake-model@report-v1"}
    assert {r["input_hash"] for r in reports.values()} == {p.input_hash for p in plans.values()}
    prompts = report_prompts(server)
    order = {cid: prompts.index(report_request(plan, reports, cfg.report, cfg.llm)[0].messages[1][1]) for cid, plan in plans.items()}
    assert sorted(order.values()) == list(range(len(plans)))  # one request per report
    # one wave: the leaves of every level went out at once, and each parent as its own children
    # were written (never waiting for the rest of their level)
    details = json.loads(next(m["details"] for m in store.read("stage_metrics").to_pylist() if m["stage"] == "report"))
    assert details["waves"] == 1 and details["cache_lookups"] == 1
    parents = [p for p in plans.values() if p.children]
    assert parents, "the budget should make some parent use its children's reports"
    for parent in parents:
        prompt = prompts[order[parent.community_id]]
        for child in parent.children:
            assert order[child] < order[parent.community_id]
            assert reports[child]["title"] in prompt
        # the fake cites every row: references map back to the rows the prompt listed
        assert reports[parent.community_id]["sub_community_ids"] == sorted(parent.children)
        assert reports[parent.community_id]["entity_ids"] == sorted(e for e, _ in parent.entities)
    calls = store.read("llm_calls", where="stage = 'report'").to_pylist()
    assert len(calls) == len(plans) and all(c["status"] == "ok" and not c["cache_hit"] for c in calls)
    assert {c["item_id"] for c in calls} == set(plans)


def test_rerun_reuses_reports_and_the_cache(server, corpus, tmp_path):
    cfg = config(server)
    run([corpus], tmp_path / "index", cfg)
    store = IndexStore(tmp_path / "index")
    n = store.count("community_reports")
    asked = len(server.requests)
    again = run([corpus], tmp_path / "index", cfg)
    assert len(server.requests) == asked  # zero new calls
    assert again["recomputed"]["reports_reused"] == n and again["recomputed"]["reports_built"] == 0
    assert again["new_version"] is False
    # without the reports table, the answers come from the LLM cache: still zero new calls
    store.delete("community_reports", "true")
    rebuilt = run([corpus], tmp_path / "index", cfg)
    assert len(server.requests) == asked
    assert rebuilt["recomputed"]["reports_built"] == n and rebuilt["llm"]["cache_hits"] == n == rebuilt["llm"]["calls"]


def test_changed_community_regenerates_only_itself_and_its_ancestors(server, corpus, tmp_path):
    cfg = config(server)
    run([corpus], tmp_path / "index", make_config())  # the graph; reports written below
    store = IndexStore(tmp_path / "index")
    communities = store.read("communities").to_pylist()
    first = LLMReports(store, cfg.report, cfg.llm, communities)
    rows, calls, _ = first.write(sorted(first.plans), {})
    assert len(calls) == len(first.plans)
    # change the description of one entity of a deepest-level community
    deepest = max(c["level"] for c in communities if c["community_id"] in first.plans)
    leaf = next(c for c in sorted(communities, key=lambda c: c["community_id"]) if c["level"] == deepest and c["community_id"] in first.plans)
    target = leaf["entity_ids"][0]
    entities = store.read("entities").to_pylist()
    for e in entities:
        if e["entity_id"] == target:
            e["description"] = "A rewritten description that no report has seen."
    store.overwrite("entities", pa.Table.from_pylist(entities, schema=store.read("entities").schema))
    second = LLMReports(store, cfg.report, cfg.llm, communities)
    _, calls, stats = second.write(sorted(second.plans), {r["input_hash"]: r for r in rows.values()})
    containing = {c["community_id"] for c in communities if target in c["entity_ids"] and c["community_id"] in first.plans}
    assert len(containing) > 1  # the leaf and at least one ancestor
    assert {c["item_id"] for c in calls} == containing
    assert {k: stats[k] for k in ("built", "reused", "failed")} == {"built": len(containing), "reused": len(first.plans) - len(containing), "failed": 0}


def test_failed_report_falls_back_to_extractive_and_is_retried(server, corpus, tmp_path):
    server.fault("Hollis Wren", "always:503")
    cfg = config(server, max_failed_fraction=1.0)
    first = run([corpus], tmp_path / "index", cfg)
    store = IndexStore(tmp_path / "index")
    reports = store.read("community_reports").to_pylist()
    fallen = {r["community_id"] for r in reports if r["generator"] == "extractive@2 fallback"}
    assert fallen and first["llm"]["failed"] >= 1
    assert all("LLM report failed" in r["rating_explanation"] for r in reports if r["community_id"] in fallen)
    failed_calls = store.read("llm_calls", where="stage = 'report' AND status = 'failed'").to_pylist()
    assert failed_calls and all("503" in c["error"] for c in failed_calls)
    server.faults.clear()
    asked = len(report_prompts(server))
    second = run([corpus], tmp_path / "index", cfg)
    assert second["recomputed"]["reports_built"] == len(fallen)  # only the failed ones (and parents over them) again
    assert len(report_prompts(server)) - asked == len(fallen) >= len(failed_calls)
    assert not any(r["generator"].endswith("fallback") for r in store.read("community_reports").to_pylist())


def test_too_many_failed_reports_fail_the_run(server, corpus, tmp_path):
    server.fault("|", "always:400")  # every report prompt has table rows
    cfg = config(server, max_failed_fraction=0.1)
    with pytest.raises(TooManyFailures, match="LLM reports failed"):
        run([corpus], tmp_path / "index", cfg)
    assert IndexStore(tmp_path / "index").count("index_manifest") == 0  # nothing published


def test_lazy_reports_are_written_by_queries_and_reused(server, corpus, tmp_path):
    cfg = config(server, mode="lazy")
    index = tmp_path / "index"
    summary = run([corpus], index, cfg)
    store = IndexStore(index)
    assert summary["reports"] == 0 and store.count("community_reports") == 0
    assert report_prompts(server) == [] and store.count("llm_calls") == 0
    plans = plans_of(store, cfg)

    first = query(str(index), "What did Tobias Reed show the council about the harbor fees?", answer=False)
    assert store.count("community_reports") == 0  # queries never write the index's own tables
    written = {r["community_id"]: r for r in store.read("lazy_reports").to_pylist()}
    assert first["reports"] and {r["community_id"] for r in first["reports"]} <= set(written)
    assert 0 < len(written) < len(plans)  # only what the query touched (and the children those need)
    assert len(report_prompts(server)) == len(written)
    assert all(written[c]["input_hash"] == plans[c].input_hash for c in written)
    assert {c["item_id"] for c in store.read("llm_calls", where="stage = 'report'").to_pylist()} == set(written)

    asked = len(server.requests)
    second = query(str(index), "What did Tobias Reed show the council about the harbor fees?", answer=False)
    assert len(server.requests) == asked  # zero calls
    assert second["reports"] == first["reports"]

    # an unchanged re-index keeps them, and the version it publishes carries them
    again = run([corpus], index, cfg)
    assert store.count("community_reports") == len(written)
    assert load_manifest(store)["counts"]["community_reports"] == len(written)
    assert again["recomputed"]["reports_reused"] == len(written)
    # the first version pinned an empty table; its queries find the reports by input hash
    old = query(str(index), "What did Tobias Reed show the council about the harbor fees?", answer=False, version=1)
    assert len(server.requests) == asked and old["reports"] == first["reports"]


def test_lazy_index_drops_reports_whose_inputs_changed(server, corpus, tmp_path):
    cfg = config(server, mode="lazy")
    index = tmp_path / "index"
    store = index_lazily_and_ask(corpus, index, cfg)
    before = {r["community_id"]: r["input_hash"] for r in store.read("lazy_reports").to_pylist()}
    edit_river(corpus)
    run([corpus], index, cfg)
    plans = plans_of(store, cfg)
    after = {r["community_id"]: r["input_hash"] for r in store.read("community_reports").to_pylist()}
    # exactly the reports whose community still exists with the same inputs survive
    assert after == {c: h for c, h in before.items() if c in plans and plans[c].input_hash == h}
    assert 0 < len(after) < len(before)


def test_llm_and_lazy_reports_need_a_model(corpus, tmp_path):
    for mode in ("llm", "lazy"):
        with pytest.raises(ValueError, match="needs an LLM"):
            run([corpus], tmp_path / mode, make_config(report={"mode": mode}))
        assert IndexStore(tmp_path / mode).count("index_manifest") == 0


def test_an_unchanged_rerun_skips_llm_reports_without_planning_them(server, corpus, tmp_path, monkeypatch):
    import graphwright.stages.report as report_stage

    cfg = config(server)
    run([corpus], tmp_path / "index", cfg)
    n = IndexStore(tmp_path / "index").count("community_reports")

    def no_plans(*args, **kwargs):
        raise AssertionError("an unchanged rerun planned the LLM reports (53 s at 1.2M chunks)")

    monkeypatch.setattr(report_stage, "LLMReports", no_plans)
    again = run([corpus], tmp_path / "index", cfg)
    assert again["recomputed"]["reports_reused"] == n and again["recomputed"]["reports_built"] == 0
    # the same model behind another address (a restarted server's port): the answers are the same
    moved = config(server)
    moved.llm.base_url, moved.llm.concurrency = server.base_url.replace("127.0.0.1", "localhost"), 3
    assert run([corpus], tmp_path / "index", moved)["recomputed"]["reports_built"] == 0
    # other report settings: the note does not apply, and the reports are planned again
    with pytest.raises(Exception, match="planned the LLM reports"):
        run([corpus], tmp_path / "index", config(server, max_failed_fraction=0.9))


def test_candidate_chunks_rank_by_support_then_id_as_a_full_sort_does():
    import random

    from graphwright.stages.report.support import Support

    rng = random.Random(7)
    ent = {f"e{i}": {"chunk_ids": [f"c{rng.randrange(40)}" for _ in range(rng.randrange(8))]} for i in range(30)}
    rel = {f"r{i}": {"chunk_ids": [f"c{rng.randrange(40)}" for _ in range(rng.randrange(5))]} for i in range(50)}
    community = {"entity_ids": list(ent) + ["gone"], "relationship_ids": list(rel) + ["gone"]}
    support: dict[str, int] = {}
    for row in [*rel.values(), *ent.values()]:
        for c in row["chunk_ids"]:
            support[c] = support.get(c, 0) + 1
    coded = Support.of_lists({k: v["chunk_ids"] for k, v in ent.items()}, {k: v["chunk_ids"] for k, v in rel.items()})
    for n in (0, 1, 5, 39, 100):
        assert coded.top(community, n) == [c for c, _ in sorted(support.items(), key=lambda kv: (-kv[1], kv[0]))][:n]
    assert coded.distinct(list(ent)) == len({c for row in ent.values() for c in row["chunk_ids"]})
    assert coded.top({"entity_ids": [], "relationship_ids": []}, 5) == [] and coded.distinct([]) == 0


def test_a_hub_communitys_candidate_chunks_are_counted_in_place_and_rank_as_a_sort_does(monkeypatch):
    """A community holding a hub has hundreds of thousands of items among 1.2M chunks: they are
    counted with a bincount, not sorted; a small community's few items are sorted. Both rank alike,
    and neither partitions the counts to find the n-th largest."""
    import random

    from graphwright.stages.report import support as support_module
    from graphwright.stages.report.support import Support

    rng = random.Random(3)
    chunks = [f"c{i:04d}" for i in range(1_000)]
    ent = {f"e{i}": {"chunk_ids": sorted(set(rng.choices(chunks[:60], k=40)))} for i in range(20)}  # hubs of a few chunks
    ent["small"] = {"chunk_ids": chunks[500:510]}
    rel = {"r": {"chunk_ids": chunks[:999]}}  # lists every chunk but the last: 1,000 names
    coded = Support.of_lists({k: v["chunk_ids"] for k, v in ent.items()}, {k: v["chunk_ids"] for k, v in rel.items()})

    def expected(community, n):
        support: dict[str, int] = {}
        for row in [rel[r] for r in community["relationship_ids"]] + [ent[e] for e in community["entity_ids"]]:
            for c in row["chunk_ids"]:
                support[c] = support.get(c, 0) + 1
        return [c for c, _ in sorted(support.items(), key=lambda kv: (-kv[1], kv[0]))][:n]

    hub = {"entity_ids": [e for e in ent if e != "small"], "relationship_ids": []}  # 400-800 items: dense
    small = {"entity_ids": ["small"], "relationship_ids": []}  # 10 items of 999 chunks: sorted
    sorts = []
    real_sort = np.sort
    monkeypatch.setattr(support_module.np, "sort", lambda *a, **k: sorts.append(len(a[0])) or real_sort(*a, **k))
    monkeypatch.setattr(support_module.np, "partition", None)  # the n-th largest count comes from the counts' counts
    for n in (1, 7, 50):
        assert coded.top(hub, n) == expected(hub, n)
    assert sorts == []
    assert coded.top(small, 4) == expected(small, 4) and sorts == [10]


def _planned_from_rows(server, corpus, tmp_path):
    """An index of the corpus, and its plans made from rows that carry every chunk list: (config,
    store, communities, (entity rows, relationship rows, chunk texts by id), plans)."""
    from graphwright.stages.report.llm import lineage_of, plan_reports

    cfg = config(server)
    run([corpus], tmp_path / "index", cfg)
    store = IndexStore(tmp_path / "index")
    communities = store.read("communities").to_pylist()
    ent = {r["entity_id"]: r for r in store.read("entities").to_pylist()}
    rel = {r["relationship_id"]: r for r in store.read("relationships").to_pylist()}

    def chunk_text(wanted):
        return {r["chunk_id"]: r["text"] for r in store.rows_in("chunks", "chunk_id", wanted, ["chunk_id", "text"]).to_pylist()}

    return cfg, store, communities, (ent, rel, chunk_text), plan_reports(communities, ent, rel, chunk_text, cfg.report,
                                                                         cfg.llm.model, lineage=lineage_of(ent, rel), answer=cfg.llm.answer_settings())


@pytest.mark.parametrize("rows", ["dicts", "row maps"])
def test_members_the_rows_lack_are_left_out_of_the_plans(server, corpus, tmp_path, rows):
    """A community listing an entity or a relationship its rows do not hold (an index read at
    pins another run moved past) is planned as if it did not list it; the others as before,
    from rows as dicts or as RowMaps over Arrow tables (what LLMReports hands over)."""
    from graphwright.stages.report.llm import lineage_of, plan_reports
    from graphwright.util.rows import RowMap

    cfg, store, communities, (ent, rel, chunk_text), full = _planned_from_rows(server, corpus, tmp_path)
    if rows == "row maps":
        ent = RowMap(pa.Table.from_pylist(list(ent.values())), "entity_id")
        rel = RowMap(pa.Table.from_pylist(list(rel.values())), "relationship_id")
    widened = [c | {"entity_ids": [*c["entity_ids"], "e-gone"], "relationship_ids": ["r-gone", *c["relationship_ids"]]}
               if i % 2 else c for i, c in enumerate(communities)]
    plans = plan_reports(widened, ent, rel, chunk_text, cfg.report, cfg.llm.model, lineage=lineage_of(ent, rel),
                         answer=cfg.llm.answer_settings())
    assert {c: (p.input_hash, p.tokens, p.chunks) for c, p in plans.items()} == \
        {c: (p.input_hash, p.tokens, p.chunks) for c, p in full.items()}


@pytest.mark.parametrize("source", ["lineage", "tables"])
def test_planning_codes_the_chunk_lists_as_arrow_without_python_strings(server, corpus, tmp_path, monkeypatch, source):
    """The chunk lists of the members of the communities an update plans are millions of ids at
    1.2M chunks: they come as resolve's codes (storage.lineage), none read; without those
    (an index written before them) they are handed over as Arrow tables and coded, not listed
    as Python strings. Either way the plans are those planned from rows that carry the lists."""
    from graphwright.stages.report.support import Support

    cfg, store, communities, (ent, rel, chunk_text), full = _planned_from_rows(server, corpus, tmp_path)
    if source == "tables":
        for path in store.files.list("state/lineage"):
            store.files.delete(path)
    handed: list = []
    coded = Support.of.__func__

    def spy(cls, *tables):
        handed.extend(tables)
        return coded(cls, *tables)

    monkeypatch.setattr(Support, "of", classmethod(spy))
    plans = LLMReports(store, cfg.report, cfg.llm, communities).plans
    assert {c: (p.input_hash, p.rating, p.chunks) for c, p in plans.items()} == \
        {c: (p.input_hash, p.rating, p.chunks) for c, p in full.items()}
    assert any(p.chunks for p in plans.values())
    lists = [t for t in handed if t is not None]
    if source == "lineage":
        assert not handed
    else:
        assert lists and all(isinstance(t, pa.Table) and "chunk_ids" in t.column_names for t in lists)


def _changed_reports(store: IndexStore, since: int):
    from graphwright.storage.changes import changes_since

    ch = changes_since(store, "community_reports", since, "community_id", ["community_id"])
    assert ch is not None
    return set(ch.rows.column("community_id").to_pylist()), set(ch.deleted.to_pylist())


def test_an_llm_update_writes_only_the_reports_it_rebuilt(server, corpus, tmp_path):
    """An update's report commit holds the reports it rebuilt, not every report again (an
    overwrite made every reader of the table's changes, the lexical index among them, take
    every report as changed)."""
    cfg = config(server)
    index = tmp_path / "index"
    run([corpus], index, cfg)
    store = IndexStore(index)
    before, total = store.version("community_reports"), store.count("community_reports")
    old_rows = {r["community_id"]: r for r in store.read("community_reports").to_pylist()}
    edit_river(corpus)
    again = run([corpus], index, cfg)
    built = again["recomputed"]["reports_built"]
    assert 0 < built < total
    added, deleted = _changed_reports(store, before)
    new_rows = {r["community_id"]: r for r in store.read("community_reports").to_pylist()}
    assert added == {c for c, r in new_rows.items() if old_rows.get(c) != r}
    assert 0 < len(added) <= built and deleted == set(old_rows) - set(new_rows)


def test_a_lazy_update_writes_only_what_it_removes(server, corpus, tmp_path):
    cfg = config(server, mode="lazy")
    index = tmp_path / "index"
    store = index_lazily_and_ask(corpus, index, cfg)
    run([corpus], index, cfg)  # copies the queries' reports into community_reports
    copied = {r["community_id"] for r in store.read("community_reports").to_pylist()}
    before = store.version("community_reports")
    edit_river(corpus)
    run([corpus], index, cfg)
    kept = {r["community_id"] for r in store.read("community_reports").to_pylist()}
    added, deleted = _changed_reports(store, before)
    assert 0 < len(kept) < len(copied)
    assert added == set() and deleted >= copied - kept


def test_an_update_tokenizes_only_report_rows_whose_text_is_new(server, corpus, tmp_path, monkeypatch):
    """Report planning keeps the token counts of the rows it costed (state/report/row-tokens):
    an update counts the rows whose text changed, not every row again, and plans the same."""
    from graphwright.stages.report.row_tokens import RowTokens

    cfg = config(server)
    index = tmp_path / "index"
    run([corpus], index, cfg)
    edit_river(corpus, "The ferry at Greywater River carried grain to Amberfield.")
    tokenized = record_tokenized(monkeypatch)
    again = run([corpus], index, cfg)
    assert again["recomputed"]["reports_built"] > 0
    in_update = list(tokenized)
    store = IndexStore(index)
    tokenized.clear()
    cold = LLMReports(store, cfg.report, cfg.llm, store.read("communities").to_pylist())
    assert 0 < len(in_update) < len(tokenized) / 2
    assert set(in_update) <= set(tokenized)  # what it counted, it had to: every other row's count was kept
    tokenized.clear()
    warm = LLMReports(store, cfg.report, cfg.llm, store.read("communities").to_pylist(), known=RowTokens.load(store.files))
    assert tokenized == []  # every row the plans cost was counted by the update
    assert {c: p.input_hash for c, p in warm.plans.items()} == {c: p.input_hash for c, p in cold.plans.items()}
    assert {c: p.tokens for c, p in warm.plans.items()} == {c: p.tokens for c, p in cold.plans.items()}


def test_an_update_hashes_only_the_report_rows_rewritten_since_the_last_planning(server, corpus, tmp_path, monkeypatch):
    """The counts are kept by row id too, with the table versions they were counted at: an
    update builds and hashes the text only of the rows a commit rewrote since (the log says
    which), not of every row it costs, and plans as a cold planning does."""
    from graphwright.stages.report import row_tokens
    from graphwright.stages.report.llm import row_format
    from graphwright.storage.changes import changes_since

    cfg = config(server)
    index = tmp_path / "index"
    run([corpus], index, cfg)
    store = IndexStore(index)
    since = {t: store.version(t) for t in row_tokens.KEYS}
    edit_river(corpus, "The ferry at Greywater River carried grain to Amberfield.")
    hashed: list[str] = []
    real = row_tokens.digest
    monkeypatch.setattr(row_tokens, "digest", lambda text: hashed.append(text) or real(text))
    again = run([corpus], index, cfg)
    assert again["recomputed"]["reports_built"] > 0
    rewritten = {t: set(changes_since(store, t, since[t], k, [k]).rows.column(k).to_pylist()) for t, k in row_tokens.KEYS.items()}
    ent = {r["entity_id"]: r for r in store.read("entities").to_pylist()}
    rel = {r["relationship_id"]: r for r in store.read("relationships").to_pylist()}
    from graphwright.stages.report.llm import entity_row, relationship_row

    texts_rewritten = ({entity_row(ent[i]) for i in rewritten["entities"] if i in ent}
                       | {relationship_row(rel[i]) for i in rewritten["relationships"] if i in rel})
    row_texts = {entity_row(r) for r in ent.values()} | {relationship_row(r) for r in rel.values()}
    in_update = [t for t in hashed if t in row_texts]  # (text units are hashed too)
    assert 0 < len(in_update) and set(in_update) <= texts_rewritten
    cold = plans_of(store, cfg)
    hashed.clear()
    known = row_tokens.RowTokens.load(store.files, store, row_format())
    warm = LLMReports(store, cfg.report, cfg.llm, store.read("communities").to_pylist(), known=known)
    assert [t for t in hashed if t in row_texts] == [] and known.id_hits > 0  # nothing rewritten since the update's planning
    assert {c: (p.input_hash, p.tokens) for c, p in warm.plans.items()} == {c: (p.input_hash, p.tokens) for c, p in cold.items()}


def test_row_token_counts_by_id_drop_the_rows_rewritten_since_and_another_row_format(server, corpus, tmp_path):
    import pyarrow.compute as pc

    from graphwright.stages.report import row_tokens
    from graphwright.stages.report.llm import row_format
    from graphwright.storage.patch import patch_table

    cfg = config(server)
    index = tmp_path / "index"
    run([corpus], index, cfg)
    store = IndexStore(index)
    stored = row_tokens.RowTokens.load(store.files, store, row_format())
    ids = stored.by_id["entities"].column("row_id").to_pylist()
    assert len(ids) == store.count("entities")  # a full planning costs every entity row
    first = ids[0]
    assert first in stored.of_ids("entities", {first})
    patch_table(store, "entities", [], [store.read("entities").filter(pc.equal(pc.field("entity_id"), first))])  # written again
    again = row_tokens.RowTokens.load(store.files, store, row_format())
    assert first not in again.of_ids("entities", set(ids)) and len(again.of_ids("entities", set(ids))) == len(ids) - 1
    assert row_tokens.RowTokens.load(store.files, store, "another format").by_id == {}
    # a file whose versions are not versions (damaged, or hand-edited) is not used, and no run fails on it
    import io

    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(store.files.read_bytes(row_tokens.BY_ID_PATH)))
    for versions in (b"{not json", b'["a list"]', b'{"entities": "7", "relationships": true}'):
        damaged = table.replace_schema_metadata({**table.schema.metadata, b"versions": versions})
        sink = io.BytesIO()
        pq.write_table(damaged, sink)
        store.files.write_bytes(row_tokens.BY_ID_PATH, sink.getvalue())
        assert row_tokens.RowTokens.load(store.files, store, row_format()).by_id == {}


def test_a_parents_child_reports_are_tokenized_in_one_batch_as_each_alone(server, corpus, tmp_path, monkeypatch):
    """The child reports a request quotes are cut to their share with one tokenizer batch per
    start, not one call per child; each text is child_text's."""
    from graphwright.stages.report.llm import child_text, child_texts

    long = {"title": "Harbor", "summary": "word " * 400, "findings": json.dumps([{"summary": "a finding"}])}
    short = {"title": "Mill", "summary": "A small mill.", "findings": "not json"}
    assert child_texts({"a": long, "b": short}, 50) == {"a": child_text(long, 50), "b": child_text(short, 50)}
    assert child_texts({"a": long}, 50)["a"].endswith(" …") and child_texts({"b": short}, 50)["b"] == child_text(short, 50)
    from graphwright.text import tokens

    batches, real = [], tokens.whole_spans
    monkeypatch.setattr(tokens, "whole_spans", lambda texts: batches.append(len(texts)) or real(texts))
    monkeypatch.setattr(tokens, "token_spans", lambda *a: pytest.fail("a child report tokenized alone"))
    cfg = config(server)
    run([corpus], tmp_path / "index", cfg)
    plans = plans_of(IndexStore(tmp_path / "index"), cfg)
    assert sum(batches) == sum(len(p.children) for p in plans.values()) > 0


def test_row_token_counts_from_another_tokenizer_are_not_used(tmp_path, monkeypatch):
    from graphwright.stages.report import row_tokens
    from graphwright.storage.location import IndexFiles

    files = IndexFiles(tmp_path)
    known = row_tokens.RowTokens()
    assert known.count(["Mara Voss|PERSON|a doctor", "x"], lambda texts: [7] * len(texts)) == [7, 7]
    assert known.save(files)
    again = row_tokens.RowTokens.load(files)
    assert again.count(["x", "new row"], lambda texts: [1] * len(texts)) == [7, 1] and again.counted == 1
    monkeypatch.setattr(row_tokens, "_tokenizer_version", lambda: "another")
    assert row_tokens.RowTokens.load(files).count(["x"], lambda texts: [3]) == [3]


def test_lazy_queries_cost_report_rows_with_the_counts_the_index_run_left(server, corpus, tmp_path, monkeypatch):
    cfg = config(server, mode="lazy")
    index = tmp_path / "index"
    run([corpus], index, cfg)  # plans every community once, and keeps the row token counts
    tokenized = record_tokenized(monkeypatch)
    result = query(str(index), "Who is Mara Voss?", answer=False)
    assert IndexStore(index).count("lazy_reports") > 0 and result["evidence"]
    assert tokenized == []


def test_an_update_plans_only_the_communities_whose_inputs_changed(server, corpus, tmp_path):
    """An LLM update plans the communities whose rows or members' rows changed (and their
    ancestors), found from the Delta log, not every community; the reports it leaves are those a
    full planning of the same state gives."""
    cfg = config(server)
    index = tmp_path / "index"
    run([corpus], index, cfg)
    store = IndexStore(index)
    edit_river(corpus)
    (corpus / "festival.md").unlink()
    again = run([corpus], index, cfg)
    assert again["recomputed"]["reports_built"] > 0
    full = LLMReports(store, cfg.report, cfg.llm, store.read("communities").to_pylist()).plans
    details = run_stage_details(index, again)
    planned = details["report"]["reports_planned"]
    assert 0 < planned < len(full)
    # where the update's report and cluster time went, step by step, in stage_metrics
    assert set(details["report"]["seconds"]) == {"rows_s", "chunk_counts_s", "plan_s", "write_s"}
    assert set(details["cluster"]["seconds"]) == {"changes_s", "levels_and_rows_s", "write_s", "save_state_s"}
    assert all(v >= 0 for stage in ("report", "cluster") for v in details[stage]["seconds"].values())
    reports = store.read("community_reports").to_pylist()
    assert {r["community_id"]: r["input_hash"] for r in reports} == {c: p.input_hash for c, p in full.items()}
    assert all(r["generator"].startswith("llm:") for r in reports)
    # and after a deletion alone
    (corpus / "council.txt").unlink()
    run([corpus], index, cfg)
    full = LLMReports(store, cfg.report, cfg.llm, store.read("communities").to_pylist()).plans
    assert {r["community_id"]: r["input_hash"] for r in store.read("community_reports").to_pylist()} == \
        {c: p.input_hash for c, p in full.items()}


def test_a_community_without_a_chunk_count_is_rated_from_its_members_lists(server, corpus, tmp_path):
    """A version written before communities counted their chunks reads `n_chunks` as null (a
    lazy query pinned to it): its plans, ratings included, are those of the counted rows."""
    cfg = config(server)
    index = tmp_path / "index"
    run([corpus], index, cfg)
    store = IndexStore(index)
    rows = store.read("communities").to_pylist()
    counted = LLMReports(store, cfg.report, cfg.llm, rows).plans
    uncounted = LLMReports(store, cfg.report, cfg.llm, [r | {"n_chunks": None} for r in rows]).plans
    assert len({p.rating for p in counted.values()}) > 1
    assert {c: (p.input_hash, p.rating) for c, p in uncounted.items()} == {c: (p.input_hash, p.rating) for c, p in counted.items()}


def test_plans_read_the_chunk_lists_of_only_the_communities_that_take_text_units(server, corpus, tmp_path, monkeypatch):
    """A community whose children's reports stand in for its rows lists no text unit, so an
    update that plans a top-level community again does not read its members' chunk lists (most
    of the index's lineage), only those of the communities that take text units. The plans are
    those planned from rows that carry every list."""
    from graphwright.stages.report.llm import plan_reports

    cfg, store, communities, (ent, rel, chunk_text), full = _planned_from_rows(server, corpus, tmp_path)
    # an update whose leaves kept their inputs: every other community is planned again
    fixed = {c["community_id"]: full[c["community_id"]].input_hash for c in communities
             if not c["children_ids"] and c["community_id"] in full}
    asked: list[tuple[str, set]] = []
    rows_in = IndexStore.rows_in

    def spy(self, name, column, values, columns, **kw):
        if "chunk_ids" in columns:
            asked.append((name, set(values)))
        return rows_in(self, name, column, values, columns, **kw)

    monkeypatch.setattr(IndexStore, "rows_in", spy)
    for fixing in ({}, fixed):
        asked.clear()
        plans = LLMReports(store, cfg.report, cfg.llm, communities, fixed=fixing).plans
        takers = {c for c, p in plans.items() if c not in fixing and not p.children}
        members = {e for c in communities if c["community_id"] in takers for e in c["entity_ids"]}
        assert {e for name, wanted in asked if name == "entities" for e in wanted} <= members
        assert {c: (p.input_hash, p.rating, p.chunks) for c, p in plans.items()} == \
            {c: (p.input_hash, p.rating, p.chunks) for c, p in
             plan_reports(communities, ent, rel, chunk_text, cfg.report, cfg.llm.model, fixed=fixing,
                          answer=cfg.llm.answer_settings()).items()}
    planned = {e for c in communities if c["community_id"] not in fixed and c["community_id"] in plans for e in c["entity_ids"]}
    assert len(members) < len(planned), "the planned parents' members are read"


def test_a_fallback_report_of_a_community_without_a_chunk_count_is_rated_from_its_members_lists(server, corpus, tmp_path):
    """A failed report falls back to an extractive one; for a version written before
    communities counted their chunks (n_chunks null) it is rated as the counted row is, instead
    of failing on the missing count."""
    cfg = config(server)
    run([corpus], tmp_path / "index", cfg)
    store = IndexStore(tmp_path / "index")
    rows = store.read("communities").to_pylist()
    counted = LLMReports(store, cfg.report, cfg.llm, rows)
    uncounted = LLMReports(store, cfg.report, cfg.llm, [r | {"n_chunks": None} for r in rows])
    leaves = [r["community_id"] for r in rows if not r["children_ids"]]
    assert leaves and [uncounted._fallback(c, {}) for c in leaves] == [counted._fallback(c, {}) for c in leaves]


def test_an_update_makes_python_rows_only_of_the_communities_it_plans(server, corpus, tmp_path, monkeypatch):
    """The communities an update does not plan (neither stale nor a stale one's child) stay in
    Arrow: every level's member lists as Python took 1.5 s of a 0.1% update at 1.2M chunks."""
    from graphwright.stages import report

    cfg = config(server)
    index = tmp_path / "index"
    run([corpus], index, cfg)
    store = IndexStore(index)
    made = []
    row_dicts = report.row_dicts
    monkeypatch.setattr(report, "row_dicts", lambda table: made.append(table) or row_dicts(table))
    (corpus / "notes" / "orchard.txt").write_text("Ilsa Brandt tends the Northfield Orchard. Ilsa Brandt sells apples to Tomas Reyes.\n")
    again = run([corpus], index, cfg)
    communities = [t for t in made if "children_ids" in t.column_names]
    assert len(communities) == 1 and 0 < communities[0].num_rows < store.count("communities")
    details = run_stage_details(index, again)
    assert communities[0].num_rows >= details["report"]["reports_planned"]
    full = LLMReports(store, cfg.report, cfg.llm, store.read("communities").to_pylist()).plans
    assert {r["community_id"]: r["input_hash"] for r in store.read("community_reports").to_pylist()} == \
        {c: p.input_hash for c, p in full.items()}


def test_a_report_reused_for_rows_with_other_ids_cites_the_ids_its_plan_numbers_them_by():
    """A plan hashes its rows' texts, not their ids: a moved file's chunks, or another community's
    members with the same texts, give the same input hash. The report reused for it keeps its text
    and cites the rows of this plan."""
    from types import SimpleNamespace

    from graphwright.stages.report.llm import generator
    from graphwright.stages.report.schedule import write_reports

    def plan(cid, entities, chunks):
        return Plan(cid, 0, "same-hash", [(e, f"{e[-1]}|{t}") for e, t in zip(entities, ("Mara Voss", "Tobias Reed"))], [],
                    [(c, t) for c, t in zip(chunks, ("the harbor fees rose", "the council met"))], [], rating=1.0)

    llm = SimpleNamespace(model="fake-model")
    old = {"community_id": "c-old", "level": 0, "input_hash": "same-hash", "generator": generator("fake-model"),
           "title": "Harbor", "summary": "Mara Voss raised the fees [Data: Entities (1); Sources (2)].", "rating": 3.0,
           "rating_explanation": "", "findings": json.dumps([{"summary": "Reed", "explanation": "He met [Data: Entities (2)]."}]),
           "full_content": "", "entity_ids": ["e-old-1", "e-old-2"], "relationship_ids": [], "chunk_ids": ["ch-old-2"],
           "sub_community_ids": []}
    plans = {"c-new": plan("c-new", ["e-new-1", "e-new-2"], ["ch-new-1", "ch-new-2"])}
    rows, _, stats = write_reports(plans, ["c-new"], {"same-hash": old}, lambda keys: {}, None, None,
                                   SimpleNamespace(child_report_tokens=60), llm)
    assert stats["reused"] == 1
    row = rows["c-new"]
    assert row["summary"] == old["summary"] and row["community_id"] == "c-new"
    assert row["entity_ids"] == ["e-new-1", "e-new-2"] and row["chunk_ids"] == ["ch-new-2"]


def test_reports_written_under_other_llm_answer_settings_are_not_reused(server, corpus, tmp_path):
    cfg = config(server)
    run([corpus], tmp_path / "index", cfg)
    before = {r["community_id"]: r["input_hash"] for r in IndexStore(tmp_path / "index").read("community_reports").to_pylist()}
    hotter = cfg.model_copy(update={"llm": cfg.llm.model_copy(update={"temperature": 0.7})})
    summary = run([corpus], tmp_path / "index", hotter)
    assert summary["recomputed"]["reports_reused"] == 0 and summary["recomputed"]["reports_built"] == len(before)
    after = {r["community_id"]: r["input_hash"] for r in IndexStore(tmp_path / "index").read("community_reports").to_pylist()}
    assert after.keys() == before.keys() and all(after[c] != before[c] for c in before)
