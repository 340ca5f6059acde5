"""An index run and a serving process write at once: the run's LLM calls and the queries' answers
and lazy reports go to append-only tables, so neither fails the other and no report is paid
twice in one process."""

from __future__ import annotations

import shutil
import threading

import pytest
from _helpers import CORPUS, make_config, run
from fake_openai import FakeOpenAI

from graphwright.query import Searcher, query
from graphwright.storage.delta import IndexStore

FAST = dict(backoff_s=0.01, max_backoff_s=0.05, timeout_s=10)
QUESTIONS = ("What did Tobias Reed show the council about the harbor fees?", "Who is Mara Voss?",
             "Greywater River clinic Amberfield", "What happened at the festival?")


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def lazy_config(server):
    return make_config(
        extract={"engine": "llm"},
        llm={"engine": "openai", "model": "fake-model", "base_url": server.base_url, "api_key_env": None, **FAST},
        report={"mode": "lazy", "context_tokens": 600, "child_report_tokens": 60},
        execution={"commit_every": 4},
    )


def test_queries_answering_during_an_index_run_do_not_fail_it(server, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    cfg = lazy_config(server)
    index = tmp_path / "index"
    run([corpus], index, cfg)
    for name, value in (("GRAPHWRIGHT_LLM__MODEL", "fake-model"), ("GRAPHWRIGHT_LLM__BASE_URL", server.base_url),
                        ("GRAPHWRIGHT_LLM__API_KEY_ENV", "")):
        monkeypatch.setenv(name, value)
    (corpus / "harbor.txt").write_text((corpus / "harbor.txt").read_text() + "\nLater Mara Voss repaired the western pier.\n")
    (corpus / "notes" / "pier.txt").write_text("Tobias Reed and Mara Voss inspected the pier at Port Elling in spring.\n")
    errors, answered, done = [], [], threading.Event()

    def serve():
        searcher = Searcher(str(index))
        while not done.is_set():
            for q in QUESTIONS:
                try:
                    answered.append(query(str(index), q, mode="local", answer=True, searcher=searcher)["answer"])
                except Exception as exc:  # noqa: BLE001 - the test reports any failure
                    errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        summary = run([corpus], index, cfg)  # extraction and reports calls while the queries write
    finally:
        done.set()
        thread.join(timeout=120)
    assert not errors, errors[:3]
    assert answered and summary["documents_diff"]["changed"] == 1 and summary["new_version"]
    store = IndexStore(index)
    lazy = store.read("lazy_reports").to_pylist()
    assert lazy  # the queries wrote reports beside the run
    # one process never paid twice for one report: each input hash was asked once
    asked = [c["key"] for c in store.read("llm_calls", where="stage = 'report'").to_pylist() if not c["cache_hit"]]
    assert len(asked) == len(set(asked))
