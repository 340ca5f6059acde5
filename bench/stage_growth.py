"""How each stage grows with the corpus: for the first (full) run recorded in each index's
stage_metrics, seconds and bytes written per chunk by stage, the driver's peak after it, and the
size on disk of each table and of the stages' state. Reads the indexes; measures nothing anew.

    python bench/stage_growth.py DIR/index-120000 DIR/index-1200000
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from graphwright.storage.delta import IndexStore


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def main() -> None:
    for index in (Path(p) for p in sys.argv[1:]):
        store = IndexStore(index)
        runs = sorted(store.read("runs", columns=["run_id", "command"]).column("run_id").to_pylist())
        first = runs[0]
        rows = {r["stage"]: r for r in store.read("stage_metrics", where=f"run_id = '{first}'").to_pylist()}
        chunks = store.count("chunks")
        print(f"{index}: {chunks} chunks, first run {first}")
        for stage, r in rows.items():
            peak = json.loads(r["details"]).get("driver_peak_rss_mb")
            print(f"  {stage:<8} {r['wall_s']:8.1f} s  {1e3 * r['wall_s'] / chunks:7.3f} ms/chunk  "
                  f"{(r['bytes_written'] or 0) / chunks:8.0f} B/chunk written  peak after {peak} MB")
        tables = {t.name: _size(t) for t in sorted((index / "tables").iterdir())}
        print("  on disk (MB): " + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in tables.items()))
        state = index / "state"
        if state.exists():
            print("  state (MB): " + ", ".join(f"{p.name} {_size(p) / 2**20:.0f}" for p in sorted(state.iterdir()) if p.is_dir())
                  + f"; per chunk {_size(state) / chunks:.0f} B")
        print(f"  vectors (MB): {_size(index / 'vectors') / 2**20:.0f}; whole index {_size(index) / 2**20:.0f} MB"
              f" ({os.cpu_count()} cores here)")


if __name__ == "__main__":
    main()
