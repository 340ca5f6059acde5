"""What one extraction commit's appends cost as the index grows: `IndexStore.append` of a
commit's rows (4,096 by default) to `llm_cache` and `llm_calls`, as the LLM path commits them,
against copies of each given index (data files hard-linked; the appends go to the copies), for
each checkout given, side by side in one invocation. Prints seconds per commit (median of
--commits) and the Delta log files each table had; asserts nothing.

    python bench/commit_cost.py --index DIR/index-10000 --index DIR/index-1000000 \
        --src before=/old/checkout --src after=/work/main [--commits 8] [--rows 4096]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _fresh_process import measure  # noqa: E402

TABLES = ("llm_cache", "llm_calls")


def one(index: str, commits: int, rows: int) -> dict:
    """In this process (whose PYTHONPATH picks the checkout): time `commits` commit-sized appends."""
    import json
    import time

    import pyarrow as pa

    from graphwright.storage.delta import IndexStore

    store = IndexStore(index)
    samples = {t: store.read(t).slice(0, rows) for t in TABLES}
    logs = {t: len(os.listdir(Path(index) / "tables" / t / "_delta_log")) for t in TABLES}
    took = []
    for i in range(commits):
        keys = pa.array([f"commit-cost-{i}-{j}" for j in range(rows)])
        started = time.perf_counter()
        for t, sample in samples.items():
            store.append(t, sample.set_column(sample.schema.get_field_index("key"), "key", keys))
        took.append(time.perf_counter() - started)
    print(json.dumps({"median_s": statistics.median(took), "max_s": max(took), "logs": logs}))


def _link_or_copy(src: str, dst: str) -> None:
    # Delta writes new files for commits and checkpoints, but may rewrite _last_checkpoint in place
    (shutil.copy2 if Path(src).name == "_last_checkpoint" else os.link)(src, dst)


def copy_tables(index: str, into: Path) -> str:
    for t in TABLES:
        shutil.copytree(Path(index) / "tables" / t, into / "tables" / t, copy_function=_link_or_copy)
    return str(into)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", action="append", required=True)
    p.add_argument("--src", action="append", required=True, help="LABEL=CHECKOUT")
    p.add_argument("--commits", type=int, default=8)
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        return one(args.one, args.commits, args.rows)
    for index in args.index:
        for spec in args.src:
            label, checkout = spec.split("=", 1)
            with tempfile.TemporaryDirectory(prefix="commit-cost-") as work:
                copy = copy_tables(index, Path(work))
                os.environ["PYTHONPATH"] = str(Path(checkout) / "src")
                r = measure(__file__, "--index", index, "--src", spec, "--one", copy,
                            "--commits", str(args.commits), "--rows", str(args.rows))
            print(f"{Path(index).name:>16} {label:>8} | log files {r['logs']} | one commit's appends: "
                  f"median {r['median_s']:.3f} s, max {r['max_s']:.3f} s", flush=True)


if __name__ == "__main__":
    main()
