"""Delta maintenance on the nightly schedule: compaction and vacuum every N-th run, recorded as the
run's "maintain" stage with its cost; a compacted index reads the same and updates as before."""

from __future__ import annotations

import json

from graphwright.config import load_config
from graphwright.ops import jobs
from graphwright.storage.delta import IndexStore
from graphwright.storage.patch import data_files


def test_nightly_compacts_and_vacuums_on_its_schedule(tmp_path):
    config = load_config(overrides={"execution": {"executor": "local"}, "embed": {"engine": "hashing", "dim": 32},
                                    "ingest": {"max_delete_fraction": 1.0},
                                    "maintenance": {"optimize_every": 2, "vacuum_every": 3, "min_files": 2, "keep_versions": 1}})
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    done = []
    for night in range(4):
        (src / f"d{night}.txt").write_text(f"Alice Moreau met Bruno Keller in Port Elling on night {night}. Chidi Okafor wrote to Alice Moreau.")
        result = jobs.nightly([str(src)], str(index), config)
        done.append((result["maintenance"]["optimize"], result["maintenance"]["vacuum"]))
    assert done == [(False, False), (True, False), (False, True), (True, False)]
    store = IndexStore(index)
    rows = store.read("stage_metrics", where="stage = 'maintain'").to_pylist()
    assert len(rows) == 4 and all(r["cost"] is not None and r["wall_s"] > 0 for r in rows)
    compacted = [json.loads(r["details"]) for r in rows if json.loads(r["details"])["optimize"]]
    assert any(d["compacted"] for d in compacted)
    assert len(data_files(store, "relationships")) <= 2
    # a compacted index reads the same, and the stages' notes still hold: a rerun does nothing
    before = sorted(store.read("entities").column("entity_id").to_pylist())
    result = jobs.nightly([str(src)], str(index), config)
    assert sorted(IndexStore(index).read("entities").column("entity_id").to_pylist()) == before
    details = {r["stage"]: json.loads(r["details"]) for r in IndexStore(index).read(
        "stage_metrics", where=f"run_id = '{result['run']['run_id']}'").to_pylist()}
    assert details["resolve"]["linking"]["unchanged"] is True
    assert all(details[s].get("skipped") for s in ("cluster", "report", "embed"))
