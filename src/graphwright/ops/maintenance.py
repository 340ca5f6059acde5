"""Delta maintenance on the nightly job's schedule: compaction (`optimize`) of tables that updates
fill with small files, and retention (`vacuum` of what only old versions need), each every N-th
nightly run (maintenance section). What it did and cost is one stage_metrics row ("maintain")
of the nightly run it followed, so cost reports count it with that run.

Updates write in proportion to their change (storage.patch): each adds a few files to the tables
it touches, and a patched file's old version stays for the versions that pin it. Compaction keeps
reads from paying for many small files; vacuum returns the disk. Neither changes a row, so a
published version stays readable until vacuum drops the versions below `keep_versions`.
mentions and assertions are compacted only if listed (`optimize_tables`): resolve keeps its
coded rows per data file (stages.resolve.state), and a compacted table is coded again in full by
the next resolve (about a full resolve's read)."""

from __future__ import annotations

import json
import resource
import time

import pyarrow as pa

from graphwright.config import MaintenanceConfig
from graphwright.ops.costs import stage_cost, stage_row
from graphwright.ops.versions import retain
from graphwright.storage.delta import IndexStore
from graphwright.storage.log_retention import KEEP_LOG
from graphwright.storage.memo import rebase_notes
from graphwright.storage.parquet_files import delta_writer_properties
from graphwright.storage.patch import data_files


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def due(store: IndexStore, every: int, what: str) -> bool:
    """Whether `what` is due: the last maintenance that did it is `every` nightly runs back (or it
    never ran and this is the `every`-th). 0: never."""
    if every <= 0:
        return False
    if not store.exists("stage_metrics"):
        return every == 1
    rows = store.read("stage_metrics", columns=["run_id", "details"], where="stage = 'maintain'").to_pylist()
    rows.sort(key=lambda r: r["run_id"])
    since = next((k for k, r in enumerate(reversed(rows)) if json.loads(r["details"]).get(what)), len(rows))
    return since + 1 >= every


def maintain(store: IndexStore, run_id: str, config: MaintenanceConfig, cost=None, model: str = "") -> dict:
    """Compact and vacuum if due; record the stage_metrics row. Returns its details."""
    wall, cpu = time.perf_counter(), _cpu()
    details: dict = {"optimize": False, "vacuum": False}
    written = 0
    if due(store, config.optimize_every, "optimize"):
        details["optimize"] = True
        compacted, moved = {}, {}
        for name in config.optimize_tables:
            if store.exists(name) and len(data_files(store, name)) >= config.min_files:
                before = store.version(name)
                result = store.ensure(name).optimize.compact(target_size=config.target_file_mb << 20,
                                                             writer_properties=delta_writer_properties(name),
                                                             post_commithook_properties=KEEP_LOG)
                moved[name] = (before, store.version(name))
                compacted[name] = {"files_removed": result["numFilesRemoved"], "files_added": result["numFilesAdded"]}
                added = result["filesAdded"]
                written += int((json.loads(added) if isinstance(added, str) else added).get("totalSize", 0) or 0)
        details["compacted"] = compacted
        details["notes_rebased"] = rebase_notes(store, moved)  # the same rows: the stages' notes stay valid
    if due(store, config.vacuum_every, "vacuum"):
        details["vacuum"] = True
        details["retention"] = retain(store, config.keep_versions)
    row = stage_row(run_id, "maintain", wall_s=time.perf_counter() - wall, cpu_s=_cpu() - cpu, bytes_written=written,
                    work_unit="tables", work_done=len(details.get("compacted", {})), work_total=len(config.optimize_tables))
    row["cost"] = stage_cost(row, cost, model) if cost is not None else None
    row["details"] = json.dumps(details, sort_keys=True, default=str)
    store.upsert("stage_metrics", pa.Table.from_pylist([row]))
    return details | {"wall_s": row["wall_s"]}
