"""Storage faults (issue 22): each is detected and named (table, version, file) by reads,
queries and `graphwright check`, and `check --repair` (with `index --rebuild` where it says so)
brings the index back to what a clean run holds."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import CONFIG_FILE, CORPUS, run
from typer.testing import CliRunner

from graphwright.cli import app
from graphwright.ops.check import check
from graphwright.query import query
from graphwright.storage.delta import IndexStore
from graphwright.storage.health import StorageError

DIGEST = Path(__file__).parents[1] / "scripts" / "index-digest"


def digest(index) -> str:
    return subprocess.run([sys.executable, str(DIGEST), str(index)], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory):
    """An index published twice: the corpus, then the corpus and one more document."""
    base = tmp_path_factory.mktemp("check")
    corpus = base / "corpus"
    shutil.copytree(CORPUS, corpus)
    run([corpus], base / "index")
    first = digest(base / "index")
    (corpus / "later.txt").write_text("Later, Mara Voss sold the Gull to Pell Arden. Pell Arden sailed it to Kestrel Island.")
    run([corpus], base / "index")
    return base, first, digest(base / "index")


@pytest.fixture
def index(two_versions, tmp_path):
    base, _, _ = two_versions
    shutil.copytree(base / "index", tmp_path / "index")
    shutil.copytree(base / "corpus", tmp_path / "corpus")
    return tmp_path / "index"


def latest_commit(index, table) -> Path:
    return sorted((index / "tables" / table / "_delta_log").glob("*.json"))[-1]


def cli(*args):
    return CliRunner().invoke(app, [*args])


def test_a_clean_index_checks_ok(index):
    result = check(IndexStore(index))
    assert result["ok"] and result["problems"] == [] and result["published_version"] == 2
    assert cli("check", "--index", str(index)).exit_code == 0


def test_an_emptied_latest_log_is_detected_not_served_empty_and_rolled_back(index, two_versions):
    _, first, _ = two_versions
    commit = latest_commit(index, "entities")
    commit.write_bytes(b"")
    with pytest.raises(StorageError, match=rf"table entities at Delta version {int(commit.stem)} .* commit file _delta_log/{commit.name} is empty"):
        IndexStore(index).read("entities")  # queries take entity rows from the search files, not this table
    found = check(IndexStore(index))
    assert not found["ok"]
    (problem,) = [p for p in found["problems"] if p["table"] == "entities"]
    assert problem["version"] == int(commit.stem) and list(problem["files"]) == [f"_delta_log/{commit.name}"]
    inspected = cli("inspect", "--index", str(index))
    assert inspected.exit_code == 2 and "broken: entities" in inspected.output

    repaired = cli("check", "--index", str(index), "--repair", "--json")
    assert repaired.exit_code == 0, repaired.output
    report = json.loads(repaired.stdout)
    assert any("rolled back to published version 1" in line for line in report["repaired"])
    assert (index / "quarantine").is_dir()  # nothing deleted
    assert query(str(index), "Who keeps the harbor?", answer=False)["version"] == 3
    assert _data_lines(digest(index)) == _data_lines(first)


def _data_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith(("index_manifest", "vectors", "runs", "stage_metrics"))]


def test_a_truncated_log_gives_one_line_naming_the_table(index):
    commit = latest_commit(index, "communities")  # a table the local mode reads (its rows come from the search files otherwise)
    commit.write_bytes(commit.read_bytes()[:150])
    with pytest.raises(StorageError) as raised:
        query(str(index), "Who keeps the harbor?", answer=False)
    message = str(raised.value)
    assert "\n" not in message and "table communities" in message and "graphwright check" in message
    result = cli("query", "Who keeps the harbor?", "--index", str(index), "--no-answer")
    assert result.exit_code == 74 and "Traceback" not in result.output and "<unknown>" not in result.output
    (problem,) = [p for p in check(IndexStore(index))["problems"] if p["table"] == "communities" and p["scope"] == "published"]
    assert "truncated or corrupt" in problem["detail"]


def test_a_deleted_parquet_file_is_named_and_the_rebuild_it_names_restores_the_index(index, two_versions):
    base, _, clean = two_versions
    data_file = index / "tables" / "chunks" / sorted(_files_in_every_version(index, "chunks"))[0]
    data_file.unlink()
    with pytest.raises(StorageError, match=f"table chunks .* its data file {data_file.name} is missing"):
        IndexStore(index).read("chunks")
    (problem,) = check(IndexStore(index))["problems"]
    assert problem["table"] == "chunks" and data_file.name in problem["detail"]

    report = json.loads(cli("check", "--index", str(index), "--repair", "--json").stdout)
    (advice,) = report["left"]
    assert "--rebuild chunks" in advice  # every published version held the file: rebuild from the documents
    result = cli("index", str(base / "corpus"), "--index", str(index), "--config", str(CONFIG_FILE), "--rebuild", "chunks", "--json")
    assert result.exit_code == 0, result.output
    assert check(IndexStore(index))["ok"]
    assert _data_lines(digest(index)) == _data_lines(clean)


def _files_in_every_version(index, table) -> set[str]:
    from deltalake import DeltaTable

    from graphwright.storage.manifest import manifests

    sets = [set(DeltaTable(str(index / "tables" / table), version=m["table_versions"][table]).get_add_actions(flatten=True)
                .column("path").to_pylist()) for m in manifests(IndexStore(index))]
    common = set.intersection(*sets)
    assert common  # the premise: a file every published version reads
    return common


def test_a_deleted_or_altered_vector_file_is_named_and_rebuilt(index):
    store = IndexStore(index)
    before = check(store)
    manifest = json.loads(cli("versions", "--index", str(index), "--json").stdout)[-1]
    from graphwright.storage.manifest import load_manifest

    relative = load_manifest(store)["vector_indexes"]["chunk"]
    assert before["ok"] and manifest["version"] == 2
    (index / relative).unlink()
    with pytest.raises(StorageError, match=f"vector file {relative} .* is missing; `graphwright check --index .* --repair` rebuilds it"):
        query(str(index), "Who keeps the harbor?", mode="naive", answer=False)
    (problem,) = check(store)["problems"]
    assert problem["what"] == "vector" and relative in problem["detail"]
    assert cli("check", "--index", str(index), "--repair").exit_code == 0
    assert check(store)["ok"] and query(str(index), "Who keeps the harbor?", mode="naive", answer=False)["evidence"]

    raw = bytearray((index / relative).read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size, one byte changed
    (index / relative).write_bytes(bytes(raw))
    (problem,) = check(store)["problems"]
    assert "does not have the sha256 the manifest recorded" in problem["detail"]


def test_a_missing_or_altered_search_file_is_named_and_rolled_back_to_an_intact_version(index):
    from graphwright.storage.manifest import load_manifest

    store = IndexStore(index)
    pinned = load_manifest(store)["vector_indexes"]
    folder = index / pinned["graph"].rsplit("/", 1)[0]
    (folder / "indptr.npy").unlink()  # one array of the passage graph
    (problem,) = check(store)["problems"]
    assert problem["what"] == "search" and "indptr.npy is missing" in problem["detail"] and "roll back" in problem["repair"]
    assert cli("check", "--index", str(index)).exit_code == 2
    assert cli("check", "--index", str(index), "--repair").exit_code == 0
    assert check(store)["ok"] and load_manifest(store)["vector_indexes"]["graph"] != pinned["graph"]
    assert query(str(index), "Who keeps the harbor?", mode="graph", answer=False)["evidence"]

    lexical = next(p for k, p in load_manifest(store)["vector_indexes"].items() if p.startswith("lexical/"))
    version = json.loads((index / lexical).read_text())
    segment = index / "lexical" / version["kind"] / version["files"][0]
    raw = bytearray(segment.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    segment.write_bytes(bytes(raw))
    (problem,) = check(store)["problems"]
    assert problem["what"] == "search" and "does not have the sha256 the manifest recorded" in problem["detail"]


def test_search_files_deleted_by_hand_are_rebuilt_by_the_next_index_run(index):
    shutil.rmtree(index / "lexical")
    assert not check(IndexStore(index))["ok"]
    result = cli("index", str(index.parent / "corpus"), "--index", str(index), "--config", str(CONFIG_FILE))
    assert result.exit_code == 0, result.output
    import re

    assert re.search(r"recomputed entities (unchanged|\+\d+ -\d+ ~\d+), relationships", re.sub(r"[\s│]+", " ", result.output))
    assert check(IndexStore(index))["ok"]  # the rebuilt version files are hashed, not taken from the old manifest


def test_the_summary_of_a_run_whose_resolve_had_nothing_to_do():
    from graphwright.cli.indexing import _diff

    assert _diff({"unchanged": True}) == "unchanged"  # resolve's note when its inputs did not move
    assert _diff({"added": 2, "removed": 1, "changed": 0}) == "+2 -1 ~0"


def test_a_broken_log_at_the_latest_version_only_is_named_for_the_next_run(index):
    """A table written after the last publish (a failed run): queries still work, the check says
    the next run would fail, and the repair rolls back to the published version."""
    store = IndexStore(index)
    import pyarrow as pa

    store.upsert("source_errors", pa.Table.from_pylist([{"run_id": "r", "source": "s", "reason": "x"}]))
    latest_commit(index, "source_errors").write_bytes(b"{not json\n")
    assert query(str(index), "Who keeps the harbor?", answer=False)["evidence"]
    (problem,) = check(store)["problems"]
    assert problem["table"] == "source_errors" and problem["scope"] == "latest"
    assert cli("check", "--index", str(index), "--repair").exit_code == 0
    assert check(store)["ok"]


def test_an_index_rerun_over_a_deleted_parquet_file_names_it_and_the_check(index, two_versions):
    base, _, _ = two_versions
    data_file = index / "tables" / "chunks" / sorted(_files_in_every_version(index, "chunks"))[0]
    data_file.unlink()
    result = cli("index", str(base / "corpus"), "--index", str(index), "--config", str(CONFIG_FILE))
    said = " ".join(result.output.split())
    assert result.exit_code == 74 and "Traceback" not in said
    assert "table chunks at Delta version" in said and data_file.name in said and "graphwright check" in said
