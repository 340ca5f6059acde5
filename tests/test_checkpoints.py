"""Delta checkpoints: a table's opens replay at most a few commits, whatever the runs behind it,
and every version stays readable."""

import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from _helpers import CORPUS, make_config, run

from graphwright.storage.checkpoints import CHECKPOINT_EVERY, checkpoint_due, commits_since_checkpoint
from graphwright.storage.delta import IndexStore


def _runs_row(n: int) -> pa.Table:
    return pa.Table.from_pylist([{"run_id": f"run-{n:03d}", "command": "index", "started_at": datetime.now(timezone.utc),
                                  "status": "succeeded", "config_hash": "c", "summary": "{}", "finished_at": None, "error": None}])


def test_a_table_with_many_commits_gets_a_checkpoint_and_keeps_its_versions(tmp_path):
    store = IndexStore(tmp_path / "index")
    for n in range(CHECKPOINT_EVERY + 2):
        store.upsert("runs", _runs_row(n))
    latest, since = commits_since_checkpoint(store, "runs")
    assert since == latest + 1 > CHECKPOINT_EVERY  # the premise: nothing checkpointed yet
    assert checkpoint_due(store) == {"runs": latest}
    assert commits_since_checkpoint(store, "runs") == (latest, 0)
    assert checkpoint_due(store) == {}  # nothing due: nothing written again
    # the checkpoint deletes no commit: an early version reads as it was
    assert store.read("runs", version=2).num_rows == 2
    assert store.read("runs").num_rows == CHECKPOINT_EVERY + 2
    store.upsert("runs", _runs_row(99))
    assert commits_since_checkpoint(store, "runs") == (latest + 1, 1)


def test_nightly_runs_keep_every_table_within_a_few_commits_of_a_checkpoint(tmp_path):
    """Each run commits to runs and stage_metrics even when it changes nothing: without
    checkpoints their opens would replay every run ever made."""
    index = tmp_path / "index"
    checkpointed = {}
    for _ in range(7):
        summary = run([CORPUS], index, make_config())
        store = IndexStore(index)
        details = json.loads(next(r["details"] for r in store.read("stage_metrics").to_pylist()
                                  if r["stage"] == "publish" and r["run_id"] == summary["run_id"]))
        checkpointed.update(details["checkpoints"])
    assert "runs" in checkpointed
    for name in store.versions():
        latest, since = commits_since_checkpoint(store, name)
        # what the publish stage left due, plus the commits the run made after it
        assert since < CHECKPOINT_EVERY + 3, (name, latest, since)


def _age_log(store: IndexStore, name: str, days: int = 40) -> None:
    import os
    import time

    log = Path(store.path(name)) / "_delta_log"
    old = time.time() - days * 86400
    for entry in log.iterdir():
        os.utime(entry, (old, old))


def test_delta_rs_own_checkpoints_delete_no_commit_a_version_needs(tmp_path):
    """delta-rs checkpoints a table every `delta.checkpointInterval` commits (100 by default) and
    by default then deletes the log files older than 30 days below it: a published version from
    before could no longer be opened. Tables made here, and every write here, keep their log."""
    store = IndexStore(tmp_path / "index")
    # a small interval stands in for the 100th commit; set outside graphwright, on purpose
    store.ensure("runs").alter.set_table_properties({"delta.checkpointInterval": "3"})
    for n in range(3):
        store.append("runs", _runs_row(n))
    pinned = store.version("runs") - 1
    _age_log(store, "runs")
    for n in range(3, 9):
        store.append("runs", _runs_row(n))
    assert store.read("runs", version=pinned).num_rows == 2


def test_trimming_a_log_keeps_every_version_from_the_checkpoint_below_the_oldest_needed(tmp_path):
    from graphwright.storage.health import StorageError, log_entries
    from graphwright.storage.log_retention import trim_log

    store = IndexStore(tmp_path / "index")
    checkpoints = []
    for n in range(25):
        store.upsert("runs", _runs_row(n))  # version n + 1 holds n + 1 rows (version 0 made the table)
        if n in (9, 19):
            store.ensure("runs").create_checkpoint()
            checkpoints.append(store.version("runs"))
    assert checkpoints == [10, 20]
    assert trim_log(store, "runs", 9) == 0  # no checkpoint at or below it: nothing goes
    assert trim_log(store, "runs", 15, dry_run=True) == 10 and store.read("runs", version=3).num_rows == 3
    assert trim_log(store, "runs", 15) == 10  # commits 0-9
    assert min(int(n[:20]) for n in log_entries(store.table_files("runs")) if n[:20].isdigit()) == 10
    for version in (10, 15, 25):
        assert store.read("runs", version=version).num_rows == version
    with pytest.raises(StorageError, match="table runs at Delta version 3"):
        store.read("runs", version=3)
    store.upsert("runs", _runs_row(99))
    assert store.read("runs").num_rows == 26


def test_a_version_read_just_before_a_checkpoint_still_reads_after_a_vacuum(tmp_path):
    """graphwright's own tables are read at their latest version, but a query process can hold
    one a while (an LLM cache lookup reads one version twice) while the nightly job publishes,
    which checkpoints, and vacuums: the checkpoint before the newest is kept."""
    from graphwright.ops.versions import _trim_logs

    store = IndexStore(tmp_path / "index")
    for n in range(12):
        store.upsert("runs", _runs_row(n))
    store.ensure("runs").create_checkpoint()
    held = store.version("runs")
    for n in range(12, 15):
        store.upsert("runs", _runs_row(n))
    store.ensure("runs").create_checkpoint()
    assert _trim_logs(store, {}, dry_run=False) == held  # the commits below the held version
    assert store.read("runs", version=held).num_rows == held


def test_only_a_whole_checkpoint_is_a_floor():
    from graphwright.storage.log_retention import complete_checkpoints

    names = [f"{v:020d}.json" for v in range(31)] + ["00000000000000000010.checkpoint.parquet",
                                                     "00000000000000000020.checkpoint.0000000001.0000000002.parquet",
                                                     "00000000000000000020.checkpoint.0000000002.0000000002.parquet",
                                                     "00000000000000000030.checkpoint.0000000001.0000000003.parquet",
                                                     "_last_checkpoint"]
    assert complete_checkpoints(dict.fromkeys(names, 1)) == [10, 20]  # 30 is one part of three


def test_vacuum_trims_each_log_below_what_the_kept_versions_read(tmp_path):
    """Without it a log grows by a file per commit for ever (log cleanup is off so that old
    versions stay readable); with it, what the kept versions need stays and checks clean."""
    from _helpers import index_fresh

    from graphwright.ops.check import check
    from graphwright.ops.versions import retain
    from graphwright.query import query
    from graphwright.storage.health import log_entries
    from graphwright.storage.manifest import DATA_TABLES, manifests

    fresh = index_fresh(tmp_path)
    river = fresh.corpus / "notes" / "river.txt"
    for n in range(6):  # each run changes a document, so each publishes a version
        river.write_text(river.read_text() + f"\nThe Greywater River rose again in year {n}.\n")
        run([fresh.corpus], fresh.index)
    store = IndexStore(fresh.index)

    def logs() -> dict[str, int]:
        return {name: len(log_entries(store.table_files(name))) for name in store.versions()}

    for n in range(25):  # the runs table's commits of many more nights, checkpointed as publish does
        store.upsert("runs", _runs_row(100 + n))
        if n % 12 == 11:
            store.ensure("runs").create_checkpoint()
    before = logs()
    nothing_dropped = retain(store, 10)  # no version goes, but the runs table grew all the same
    assert nothing_dropped["dropped"] == [] and nothing_dropped["log_files_removed"] > 0
    assert logs()["runs"] < before["runs"]
    result = retain(store, 2)
    assert result["log_files_removed"] > 0
    kept = manifests(store)
    assert [m["version"] for m in kept] == result["kept"] == [6, 7]
    after = logs()
    assert sum(after.values()) < sum(before.values())
    assert any(after[t] < before[t] for t in DATA_TABLES)  # below version 6's pins
    for m in kept:
        assert check(store, m["version"])["ok"]
        assert query(str(fresh.index), "Greywater River", mode="local", version=m["version"])["evidence"]
