"""What the Ray executor costs the driver per row, apart from the stage's own work: N rows of
text streamed through `RayExecutor.map_batches` (2 actors, batches of 32, as extraction runs)
with a batch function that does almost nothing, so that what is left is the executor. Each
checkout runs in its own process, side by side in one invocation; per size: wall seconds,
rows/s, the driver's CPU seconds, and the input blocks the dataset had.

    python bench/executor_blocks.py [--rows 100000,300000] [--src before=/path/to/old/checkout ...]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Echo:
    """One short result row per input row, as extraction's parsed replies are."""

    def __call__(self, batch):
        import pyarrow as pa
        import pyarrow.compute as pc

        return pa.table({"id": batch.column("id"), "n": pc.utf8_length(batch.column("text"))})


def one(rows: int) -> dict:
    import pyarrow as pa
    import ray.data

    from graphwright.config import load_config
    from graphwright.pipeline.executors import BatchStage, RayExecutor

    text = "lorem ipsum dolor sit amet " * 4
    table = pa.table({"id": pa.array(range(rows), pa.int64()), "text": pa.array([text] * rows, pa.string())})
    executor = RayExecutor(load_config(None, {"execution": {"executor": "ray"}}).execution)
    blocks = []
    from_arrow = ray.data.from_arrow

    def counting(parts):
        blocks.append(len(parts))
        return from_arrow(parts)

    ray.data.from_arrow = counting
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    out = sum(b.num_rows for b in executor.map_batches(table, BatchStage("echo", Echo, (), batch_size=32, num_cpus=1, actors=2)))
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    executor.close()
    assert out == rows
    return {"rows": rows, "wall_s": wall, "driver_cpu_s": after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime,
            "blocks": blocks[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="100000,300000")
    p.add_argument("--src", action="append", default=[], metavar="LABEL=CHECKOUT")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(one(a.one)))
        return
    for rows in (int(r) for r in a.rows.split(",")):
        for label, checkout in [("this", str(HERE.parent)), *(s.split("=", 1) for s in a.src)]:
            env = dict(os.environ, PYTHONPATH=f"{Path(checkout) / 'src'}:{HERE}")
            out = subprocess.run([sys.executable, str(HERE / "executor_blocks.py"), "--one", str(rows)], env=env,
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{label:<8} {rows:>9} rows in {r['blocks']:>6} blocks: {r['wall_s']:7.1f} s, {rows / r['wall_s']:8.0f} rows/s, "
                  f"driver CPU {r['driver_cpu_s']:6.1f} s", flush=True)


if __name__ == "__main__":
    main()
