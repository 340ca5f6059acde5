import json
from pathlib import Path

import pytest
from _helpers import CONFIG_FILE, CORPUS
from typer.testing import CliRunner

from graphwright.cli import app

runner = CliRunner()

INDEX_KEYS = {"documents", "chunks", "chunks_extracted", "entities", "relationships", "communities", "reports", "version"}


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def says(result, text) -> bool:
    """Whether the command's output contains `text` (rich wraps long error lines at 80 columns)."""
    squash = lambda s: "".join(str(s).split())
    return squash(text) in squash(result.output)


@pytest.fixture(scope="module")
def cli_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    config = root / "hashing.yaml"
    # the file asks for Ray; --executor local on the command line must win
    config.write_text("chunk: {size_tokens: 64, overlap_tokens: 8}\nembed:\n  engine: hashing\nexecution:\n  executor: ray\n")
    mp = pytest.MonkeyPatch()
    import graphwright.pipeline.executors as executors

    def no_ray(*a, **k):
        raise AssertionError("--executor local was ignored: the Ray executor was started")

    mp.setattr(executors.RayExecutor, "__init__", no_ray)
    try:
        result = invoke("index", CORPUS, "--index", root / "index", "--config", config, "--executor", "local", "--json")
    finally:
        mp.undo()
    return root / "index", result


def test_index_json(cli_index):
    index, result = cli_index
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # stdout is exactly one JSON object: logs go to stderr
    assert INDEX_KEYS <= set(summary)
    assert summary["documents"] == 6 and summary["version"] == 1
    assert summary["chunks_extracted"] == summary["chunks"] > 0
    assert summary["entities"] > 0 and summary["relationships"] > 0
    assert summary["communities"] > 0 and summary["reports"] > 0
    assert summary["index"] == str(index)


def test_index_rerun_json(cli_index, tmp_path):
    import shutil

    index, _ = cli_index
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    result = invoke("index", CORPUS, "--index", copy, "--config", CONFIG_FILE, "--executor", "local", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["chunks_extracted"] == 0
    # the config differs from the first run's, so the same tables are published under a new config
    assert summary["documents_diff"]["unchanged"] == 6


@pytest.mark.parametrize("mode", ["local", "naive"])
def test_query_json(cli_index, mode):
    index, _ = cli_index
    result = invoke("query", "Who carried copper from Kestrel Island?", "--index", index, "--mode", mode, "-k", 3, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert "evidence" in payload and 0 < len(payload["evidence"]) <= 3
    for e in payload["evidence"]:
        assert {"doc_id", "chunk_id", "text", "score", "title"} <= set(e)
    if mode == "local":
        assert {"entities", "relationships", "reports"} <= set(payload)


def test_query_human_output(cli_index):
    index, _ = cli_index
    result = invoke("query", "Who is Agnes Thorne?", "--index", index)
    assert result.exit_code == 0, result.output
    assert "score" in result.stdout and "version 1" in result.stdout


def test_query_errors(cli_index, tmp_path):
    index, _ = cli_index
    result = invoke("query", "anything", "--index", tmp_path / "missing")
    assert result.exit_code == 1 and says(result, "no such directory")
    result = invoke("query", "anything", "--index", index, "--mode", "psychic")
    assert result.exit_code == 1 and says(result, "unknown query mode")
    result = invoke("query", "anything", "--index", index, "--version", 9)
    assert result.exit_code == 1 and says(result, "no version 9")


def test_inspect_json(cli_index):
    index, result = cli_index
    summary = json.loads(result.stdout)
    result = invoke("inspect", "--index", index, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["tables"]["documents"]["rows"] == summary["documents"]
    assert payload["tables"]["entities"]["rows"] == summary["entities"]
    assert payload["tables"]["chunks"]["rows"] == summary["chunks"]
    assert all(isinstance(t["delta_version"], int) for t in payload["tables"].values())
    assert [v["version"] for v in payload["versions"]] == [1]
    assert payload["versions"][0]["counts"]["documents"] == 6


def test_inspect_human_and_not_an_index(cli_index, tmp_path):
    index, _ = cli_index
    result = invoke("inspect", "--index", index)
    assert result.exit_code == 0 and "documents" in result.stdout
    result = invoke("inspect", "--index", tmp_path)
    assert result.exit_code == 1 and says(result, "not an index directory")


@pytest.mark.parametrize(
    "content, message",
    [
        ("chunk: [unclosed\n", "cannot read configuration"),
        ("chunk:\n  size_tokens: 8\n", "size_tokens"),  # below the minimum of 16
        ("chunk:\n  sise_tokens: 64\n", "sise_tokens"),  # a typo is named, not ignored
        ("embed:\n  engine: word2vec\n", "engine"),
        ("frobnicate: {}\n", "frobnicate"),
        ("- a list\n- not a mapping\n", "must be a mapping"),
    ],
)
def test_bad_config_file(tmp_path, content, message):
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    result = invoke("index", CORPUS, "--index", tmp_path / "index", "--config", config, "--executor", "local", "--json")
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)  # a clean exit, no traceback
    assert says(result, "error:") and says(result, message) and says(result, str(config))
    assert result.stdout == ""
    assert not (tmp_path / "index").exists()


def test_missing_config_file(tmp_path):
    result = invoke("index", CORPUS, "--index", tmp_path / "index", "--config", tmp_path / "nope.yaml")
    assert result.exit_code == 1 and says(result, "cannot read configuration")


def test_an_empty_config_section_means_its_defaults(tmp_path):
    config = tmp_path / "empty-section.yaml"
    config.write_text("execution:\nembed:\n  engine: hashing\n")
    result = invoke("index", CORPUS, "--index", tmp_path / "index", "--config", config, "--executor", "local", "--json")
    assert result.exit_code == 0, result.output


def test_config_section_that_is_not_a_mapping_gives_a_clear_error(tmp_path):
    config = tmp_path / "odd.yaml"
    config.write_text("execution: local\nembed:\n  engine: hashing\n")
    result = invoke("index", CORPUS, "--index", tmp_path / "index", "--config", config, "--executor", "local", "--json")
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert says(result, "execution")


def test_indexing_only_bad_files_exits_non_zero(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "blob.txt").write_bytes(b"\x00\x00\x00\x00")
    (bad / "empty.txt").write_bytes(b"")
    (bad / "sheet.xlsx").write_bytes(b"PK\x03\x04")
    result = invoke("index", bad, "--index", tmp_path / "index", "--config", CONFIG_FILE, "--executor", "local", "--json")
    assert result.exit_code == 1
    assert says(result, "no document could be read") and says(result, "Nothing was changed")
    assert result.stdout == ""


def test_index_requires_an_index_option():
    result = invoke("index", CORPUS)
    assert result.exit_code == 2


def test_eval_reports_recall_at_k(cli_index, tmp_path):
    index, _ = cli_index
    questions = Path(__file__).parent / "data" / "questions.jsonl"
    result = invoke("eval", "--index", index, "--questions", questions, "--mode", "naive", "--k", "10", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # with 6 documents and k=10 every gold document is within reach of naive search
    assert report["questions"] == 3 and report["recall@10"] == 1.0 and report["all_gold@10"] == 1.0
    tight = json.loads(invoke("eval", "--index", index, "--questions", questions, "--mode", "naive", "--k", "1", "--json").stdout)
    assert 0 <= tight["recall@1"] < 1.0  # q3 has two gold documents: one slot cannot hold both
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "no gold"}\n')
    result = invoke("eval", "--index", index, "--questions", bad)
    assert result.exit_code == 1 and says(result, "gold_doc_ids")


def test_runs_lists_each_run_with_status_and_changes(tmp_path):
    index = tmp_path / "index"
    assert invoke("index", CORPUS, "--index", index, "--config", CONFIG_FILE, "--executor", "local", "--json").exit_code == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blob.txt").write_bytes(b"\x00\x01")
    assert invoke("index", empty, "--index", index, "--config", CONFIG_FILE, "--executor", "local").exit_code == 1
    result = invoke("runs", "--index", index, "--json")
    assert result.exit_code == 0, result.output
    newest, first = json.loads(result.stdout)
    assert first["status"] == "succeeded" and first["documents"]["new"] == 6 and first["version"] == 1 and first["new_version"]
    assert newest["status"] == "failed" and "NothingToIndex" in newest["error"] and newest["seconds"] >= 0
