"""The round trip of our exports with the reference engines' own packages (graphrag 3.3.0,
lightrag-hku 1.5.7) in their own venv, offline: a deterministic fake LLM (tests/fake_openai.py)
and our embedding server on loopback. `scripts/check-exports` builds the venv and runs this
module; `--read-only` (what CI runs) the tests not marked slow.

1. Index two documents and export both layouts.
2. Query each engine in every mode: contexts hold only our rows. The one command an export's
   own settings make possible (`graphrag query --root EXPORT`, `lightrag-server` in it) works.
3. `graphrag update` with one new document: no duplicate titles (slow).
4. LightRAG `ainsert` of a new document, then `adelete_by_doc_id` of one of ours: nothing still
   cites the deleted chunks, and no inconsistency warning on the next query (slow).
5. The same steps on an index each engine built itself from the same documents (slow).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import networkx as nx
import pytest
import requests
from _helpers import CORPUS, make_config, run
from roundtrip import (
    REF_PYTHON,
    REF_VENV,
    REPO,
    graphrag_entities,
    json_lines,
    lightrag_leftovers,
    lightrag_names,
    reference_env,
    under_embeddings,
)
from roundtrip import run as run_reference

pytestmark = [pytest.mark.reference,
              pytest.mark.skipif(not REF_PYTHON.exists(), reason=f"no reference venv at {REF_VENV} (scripts/check-exports builds it)")]

OURS = ("harbor.txt", "council.txt")  # the two documents we index
NEW = "festival.md"  # the one each engine adds
DELETED = "harbor.txt"  # the one LightRAG deletes
QUESTION = "Who is Tobias Reed?"
GRAPHRAG_METHODS = ("local", "global", "drift", "basic")
LIGHTRAG_MODES = ("local", "global", "hybrid", "mix", "naive")


@pytest.fixture(scope="module")
def trip(tmp_path_factory):
    from fake_openai import FakeOpenAI

    from graphwright.exports import export
    from graphwright.exports.embed_server import EmbeddingServer

    root = tmp_path_factory.mktemp("roundtrip")
    corpus = root / "corpus"
    corpus.mkdir()
    for name in OURS:
        shutil.copy(CORPUS / name, corpus / name)
    with FakeOpenAI() as llm:
        config = make_config(llm={"model": "graphwright-test", "base_url": llm.base_url, "api_key_env": None})
        run([corpus], root / "index", config)
        exports = {fmt: Path(export(root / "index", fmt)["path"]) for fmt in ("graphrag", "lightrag")}
        with EmbeddingServer.for_index(str(root / "index")) as embed:
            yield SimpleNamespace(root=root, index=root / "index", exports=exports, llm=llm, embed=embed,
                                  dim=json.loads((exports["lightrag"] / "vdb_entities.json").read_text())["embedding_dim"])


def _ours(trip):
    import pyarrow.parquet as pq

    output = trip.exports["graphrag"] / "output"
    names, pairs, chunks = lightrag_names(trip.exports["lightrag"])
    return SimpleNamespace(
        titles=set(pq.read_table(output / "entities.parquet").column("title").to_pylist()),
        reports=set(pq.read_table(output / "community_reports.parquet").column("title").to_pylist()),
        texts=set(pq.read_table(output / "text_units.parquet").column("text").to_pylist()),
        names=names, pairs=pairs, chunks=chunks)


def _copy(path: Path, to: Path) -> Path:
    shutil.copytree(path, to)
    return to


def test_every_mode_of_both_engines_answers_from_our_rows_only(trip):
    proc = run_reference([REF_PYTHON, REPO / "bench" / "reference_query.py", "--graphrag", _copy(trip.exports["graphrag"], trip.root / "q-gr"),
                          "--lightrag", _copy(trip.exports["lightrag"], trip.root / "q-lr"), "--llm-base-url", trip.llm.base_url,
                          "--embed-base-url", trip.embed.base_url, "--embed-model", trip.embed.model, "--json", QUESTION])
    results = {(r["engine"], r["mode"]): r for r in json_lines(proc.stdout)}
    assert set(results) == {("graphrag", m) for m in GRAPHRAG_METHODS} | {("lightrag", m) for m in LIGHTRAG_MODES}
    ours = _ours(trip)
    for (engine, mode), r in results.items():
        context = r["context"]
        print(f"{engine:8} {mode:6}", {k: len(v) for k, v in context.items()})
        assert r["answer"] and "According to the" in str(r["answer"]), r
        if engine == "graphrag":
            assert {e["entity"] for e in context.get("entities", [])} <= ours.titles
            assert {x for rel in context.get("relationships", []) for x in (rel["source"], rel["target"])} <= ours.titles
            assert {rep["title"] for rep in context.get("reports", [])} <= ours.reports
            assert {s["text"] for s in context.get("sources", [])} <= ours.texts
            if mode == "drift":  # its API hands back the step answers it reduced, not tables: they quote our rows
                assert any(t in r["answer"] for t in ours.titles | ours.reports), r["answer"]
            else:
                assert context.get({"local": "entities", "global": "reports", "basic": "sources"}[mode]), (mode, context)
        else:
            assert not [w for w in r["warnings"] if "inconsisten" in w], r["warnings"]
            assert {e["entity"] for e in context["entities"]} <= ours.names
            assert {tuple(sorted((x["source"], x["target"]))) for x in context["relationships"]} <= ours.pairs
            assert {c["chunk_id"] for c in context["chunks"]} <= ours.chunks and context["chunks"]
            if mode != "naive":
                assert context["entities"] or context["relationships"], (mode, context)
    assert "Tobias Reed" in {e["entity"] for e in results[("lightrag", "local")]["context"]["entities"]}
    assert "TOBIAS REED" in {e["entity"] for e in results[("graphrag", "local")]["context"]["entities"]}


_PARSE_RECORDS = """
import asyncio, json, sys
import networkx as nx
from lightrag.operate import _process_json_extraction_result
from lightrag.utils import normalize_entity_name
workdir = sys.argv[1]
kg = nx.read_graphml(workdir + "/graph_chunk_entity_relation.graphml")
cache = json.load(open(workdir + "/kv_store_llm_response_cache.json"))
out = {"renamed": [n for n in kg.nodes if normalize_entity_name(n) != n], "records": 0, "unknown": [], "retyped": [], "dropped": 0}
for record in cache.values():
    nodes, edges = asyncio.run(_process_json_extraction_result(record["return"], record["chunk_id"], 0))
    said = json.loads(record["return"])
    out["records"] += 1
    out["dropped"] += len(said["entities"]) - sum(map(len, nodes.values())) + len(said["relationships"]) - sum(map(len, edges.values()))
    out["unknown"] += [n for n in nodes if n not in kg] + [f"{s}~{t}" for s, t in edges if not kg.has_edge(s, t)]
    out["retyped"] += [(n, d["entity_type"]) for n, ds in nodes.items() for d in ds if d["entity_type"] != kg.nodes[n]["entity_type"] and n in kg
                       and d["entity_type"] not in {x["type"] for x in said["entities"] if x["name"] == n}]
print(json.dumps(out))
"""


def test_lightrag_parses_our_names_and_records_as_we_wrote_them(trip):
    """LightRAG's own normaliser leaves every node name as it is, and its own rebuild parser
    reads every extraction record into names and pairs of the graph, dropping nothing."""
    report = json_lines(run_reference([REF_PYTHON, "-c", _PARSE_RECORDS, trip.exports["lightrag"]]).stdout)[-1]
    print("LightRAG's parser on our records:", report)
    assert report == {"renamed": [], "records": len(lightrag_names(trip.exports["lightrag"])[2]), "unknown": [], "retyped": [], "dropped": 0}


_NAME_RULES = """
import json, sys
from graphrag.index.utils.string import clean_str
from lightrag.utils import normalize_entity_name
def fixed(text):
    previous = None
    while text != previous:
        previous, text = text, normalize_entity_name(text)
    return text
names = json.loads(sys.stdin.read())
print(json.dumps({"graphrag": [clean_str(n.upper()) for n in names], "lightrag": [fixed(n) for n in names]}))
"""


def test_our_name_rules_agree_with_the_engines_own():
    """graphwright.exports.names against graphrag's clean_str and LightRAG's normalize_entity_name
    on hostile names: quotes, entities, tags, full-width and CJK text, odd spaces, numbers."""
    import random

    from graphwright.exports.names import graphrag_title, lightrag_name

    names = ["O’Brien", "“Scrooge”", "'Marley'", '"Fred"', "Ａｌｉｃｅ", "Bob\u00a0Cratchit", "Fezziwig<br>", "<p>Belle</p>", "12", "1.2",
             "123", "Tiny &amp; Tim", "Ghost\x07 of Christmas", "北京 大学", "北京 University", "《Carol》", "Fred\u202fJr", "  spaced  ",
             "Mr. Fezziwig’s", "—Dash—", "（Old）Joe", '"“Dick”"', "Caf\u00e9 Fan", "\ud800bad", "tab\tname"]
    rng = random.Random(21)
    alphabet = "aZ 1.'\"“”‘’《》（）—－　\u00a0\u202f&;<>/br北京ＡＢ\x07\t"
    names += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(400)]
    proc = subprocess.run([str(REF_PYTHON), "-c", _NAME_RULES], input=json.dumps(names), capture_output=True, text=True,
                          env=reference_env(), check=True, timeout=300)
    theirs = json.loads(proc.stdout.splitlines()[-1])
    assert [graphrag_title(n) for n in names] == theirs["graphrag"]
    assert [(n, lightrag_name(n)) for n in names] == list(zip(names, theirs["lightrag"]))


def test_graphrag_query_is_one_command_after_export(trip):
    """The export's settings.yaml and .env are all graphrag needs: its own CLI, run under our
    embedding server, with none of its variables set."""
    graphrag = REF_VENV / "bin" / "graphrag"
    for method in ("local", "global"):
        proc = run_reference(under_embeddings(trip.index, [graphrag, "query", "--root", trip.exports["graphrag"], "--method", method, QUESTION]))
        assert "According to the" in proc.stdout and "TOBIAS REED" in proc.stdout.upper(), proc.stdout[-2000:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_lightrag_server_serves_the_export_with_its_env(trip):
    """`lightrag-server` started in (a copy of) the export reads its .env and answers /query."""
    server = REF_VENV / "bin" / "lightrag-server"
    if subprocess.run([str(REF_PYTHON), "-c", "import uvicorn"], capture_output=True, check=False).returncode != 0:
        # scripts/check-exports builds the venv with it: there a skip would be a check not made
        (pytest.fail if os.environ.get("GRAPHWRIGHT_CHECK_EXPORTS") else pytest.skip)(
            f"lightrag-server needs lightrag-hku[api], which {REF_VENV} lacks")
    workdir, port = _copy(trip.exports["lightrag"], trip.root / "server"), _free_port()
    proc = subprocess.Popen([str(c) for c in under_embeddings(trip.index, [server, "--port", port])], cwd=workdir,
                            env=reference_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(240):
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, proc.stdout.read()[-4000:]
            time.sleep(0.5)
        for mode in LIGHTRAG_MODES:
            answer = requests.post(f"http://127.0.0.1:{port}/query", json={"query": QUESTION, "mode": mode}, timeout=120)
            assert answer.ok, answer.text
            assert "According to the context" in answer.json()["response"], (mode, answer.text[:500])
    finally:
        proc.terminate()
        proc.wait(timeout=60)


# ------------------------------------------------------------------ the write paths (slow)

def _graphrag_update(trip, root: Path) -> dict:
    """`graphrag update` of `root` with the new document, run as a user would (one command
    under our embedding server, the project's own settings); the entities before and after."""
    before = graphrag_entities(root)
    shutil.copy(CORPUS / NEW, root / "input" / NEW)
    run_reference(under_embeddings(trip.index, [REF_VENV / "bin" / "graphrag", "update", "--root", root, "--skip-validation"]))
    return {"before": before, "after": graphrag_entities(root)}


def _native_graphrag(trip) -> Path:
    """A graphrag project indexed by graphrag itself from our two documents, with the export's
    own settings (same endpoints, chunk size and input pattern)."""
    root = trip.root / "gr-native"
    (root / "input").mkdir(parents=True)
    for name in ("settings.yaml", ".env"):
        shutil.copy(trip.exports["graphrag"] / name, root / name)
    for name in OURS:
        shutil.copy(CORPUS / name, root / "input" / name)
    run_reference(under_embeddings(trip.index, [REF_VENV / "bin" / "graphrag", "index", "--root", root, "--skip-validation"]))
    return root


def _summary(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("ids", "by_title")}


@pytest.mark.slow
def test_graphrag_update_merges_a_new_document_into_our_entities(trip):
    ours = _graphrag_update(trip, _copy(trip.exports["graphrag"], trip.root / "gr-update"))
    native = _graphrag_update(trip, _native_graphrag(trip))
    for name, result in (("export", ours), ("graphrag's own index", native)):
        print(f"graphrag update on {name}: before {_summary(result['before'])}\n    after {_summary(result['after'])}")
    before, after = ours["before"], ours["after"]
    assert after["duplicate_titles"] == [] and after["case_duplicates"] == []
    assert native["after"]["duplicate_titles"] == []
    assert before["ids"] <= after["ids"], "graphrag's update keeps the ids of the entities it merges into"
    assert after["frequency_mismatch"] == 0 and before["frequency_mismatch"] == 0
    assert sorted(after["documents"]) == sorted([*OURS, NEW]), after["documents"]  # ours recognised, the new one added
    # the new document's names that we hold merged into our rows: they gained its text units
    shared = [t for t in ("TOBIAS REED", "OSWIN HALE", "ELLING HARBOR COMPANY") if t in before["by_title"]]
    assert shared
    for title in shared:
        old, new = before["by_title"][title], after["by_title"][title]
        assert new["id"] == old["id"] and len(new["text_unit_ids"]) > len(old["text_unit_ids"]), title


def _lightrag_trip(trip, workdir: Path, build: tuple[str, ...] = ()) -> dict:
    proc = run_reference([REF_PYTHON, REPO / "bench" / "reference_write.py", "--lightrag", workdir,
                          *(["--build", *(CORPUS / b for b in build)] if build else []), "--insert", CORPUS / NEW,
                          "--delete-file", DELETED, "--llm-base-url", trip.llm.base_url, "--embed-base-url", trip.embed.base_url,
                          "--embed-model", trip.embed.model, "--dim", trip.dim, QUESTION])
    report = json_lines(proc.stdout)[-1]
    report["leftovers"] = lightrag_leftovers(workdir, set(report["deleted_chunks"]), (CORPUS / DELETED).read_text())
    return report


@pytest.mark.slow
def test_lightrag_insert_then_delete_leaves_nothing_of_the_deleted_document(trip):
    ours = _lightrag_trip(trip, _copy(trip.exports["lightrag"], trip.root / "lr-trip"))
    native_dir = trip.root / "lr-native"
    native_dir.mkdir()
    native = _lightrag_trip(trip, native_dir, build=OURS)
    for name, r in (("export", ours), ("LightRAG's own index", native)):
        print(f"LightRAG on {name}: delete {r['delete_status']} ({r['delete_status_code']}), warnings {r['delete_warnings']}\n"
              f"    leftovers {r['leftovers']}\n    query warnings {[w for q in r['queries'] for w in q['warnings']]}")
    for r in (ours, native):
        assert r["delete_status"] == "success", r["delete_message"]
        assert sorted(r["documents_after"]) == sorted({*OURS, NEW} - {DELETED})
    assert ours["deleted_chunks"] and ours["leftovers"]["clean"], ours["leftovers"]
    assert not [w for w in ours["delete_warnings"] if "cache missing" in w.lower() or "no cached" in w.lower()], ours["delete_warnings"]
    assert {t for t in ours["leftovers"]["types"]} == {t.lower() for t in ours["leftovers"]["types"]}
    for q in ours["queries"]:
        assert not [w for w in q["warnings"] if "inconsisten" in w], (q["mode"], q["warnings"])
        assert q["context"]["chunks"], q["mode"]
    assert {q["mode"] for q in ours["queries"]} == set(LIGHTRAG_MODES)
    # what LightRAG extracted from the new document landed on our nodes (same names), and those
    # nodes kept the chunks of the document we did not delete
    kg = nx.read_graphml(trip.root / "lr-trip" / "graph_chunk_entity_relation.graphml")
    chunks = json.loads((trip.root / "lr-trip" / "kv_store_text_chunks.json").read_text())
    new_chunks = {c for c, v in chunks.items() if v["file_path"] == NEW}
    kept_chunks = {c for c, v in chunks.items() if v["file_path"] == "council.txt"}
    for name in ("Tobias Reed", "Oswin Hale"):
        cited = set(kg.nodes[name]["source_id"].split("<SEP>"))
        assert cited & new_chunks and cited & kept_chunks, (name, cited)
