"""Which engine does resolve's heavy joins best on one machine: plain Arrow on the driver, Dask
(dataframe, local threads) or Ray Data (local cluster)?

The joins, on mentions from bench/resolve_scale.py's generator with their name keys:
  1. mentions grouped by key: total count and rows;
  2. distinct (key, chunk) support pairs;
  3. assertions joined twice to key -> entity, grouped by entity pair: total weight;
  4. distinct (entity pair, chunk) support pairs.
Every engine computes the same four results (row counts are printed to show it). Each engine and
size runs in a fresh process; seconds exclude generating the input and starting the engine (Ray's
start is printed apart). CPU seconds are the driver process's (Dask's threads included; Ray's
workers are other processes, so its figure is only the driver's share); so is peak RSS.

    python bench/resolve_joins.py [--sizes 1000000,5000000] [--engines arrow,dask,ray]

(dask is in the `bench` extra: pip install -e .[bench].) Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).parent))
from _fresh_process import MeasurementFailed, measure
from resolve_scale import generate

from graphwright.text.names import resolution_key


def inputs(n: int) -> tuple[pa.Table, pa.Table, pa.Table]:
    mentions, assertions = generate(n)
    names = pc.unique(pa.concat_arrays([mentions.column("name").combine_chunks()]))
    keys = pa.array([resolution_key(x) for x in names.to_pylist()], pa.string())
    key_of = lambda col: keys.take(pc.index_in(col, names))
    mentions = mentions.append_column("key", key_of(mentions.column("name")))
    assertions = assertions.append_column("source_key", key_of(assertions.column("source")))
    assertions = assertions.append_column("target_key", key_of(assertions.column("target")))
    distinct = pc.unique(keys)
    entity = pa.table({"key": distinct, "entity": pc.binary_join_element_wise("e:", distinct, "")})
    return mentions.select(["key", "count", "chunk_id"]), assertions.select(["source_key", "target_key", "weight", "chunk_id"]), entity


def run_arrow(m: pa.Table, a: pa.Table, e: pa.Table) -> list[int]:
    agg = m.group_by("key").aggregate([("count", "sum"), ("count", "count")])
    support = m.group_by(["key", "chunk_id"]).aggregate([])
    j = a.join(e.rename_columns(["source_key", "source"]), "source_key").join(e.rename_columns(["target_key", "target"]), "target_key")
    rel = j.group_by(["source", "target"]).aggregate([("weight", "sum")])
    rel_support = j.group_by(["source", "target", "chunk_id"]).aggregate([])
    return [agg.num_rows, support.num_rows, rel.num_rows, rel_support.num_rows]


def run_dask(m: pa.Table, a: pa.Table, e: pa.Table) -> list[int]:
    import dask
    import dask.dataframe as dd

    dask.config.set(scheduler="threads")
    parts = 4
    md, ad = dd.from_pandas(m.to_pandas(), npartitions=parts), dd.from_pandas(a.to_pandas(), npartitions=parts)
    ed = e.to_pandas()
    agg = md.groupby("key")["count"].agg(["sum", "count"])
    support = md[["key", "chunk_id"]].drop_duplicates()
    j = ad.merge(ed.rename(columns={"key": "source_key", "entity": "source"}), on="source_key")
    j = j.merge(ed.rename(columns={"key": "target_key", "entity": "target"}), on="target_key")
    rel = j.groupby(["source", "target"])["weight"].sum()
    rel_support = j[["source", "target", "chunk_id"]].drop_duplicates()
    return [int(x) for x in dask.compute(agg.shape[0], support.shape[0], rel.shape[0], rel_support.shape[0])]


def run_ray(m: pa.Table, a: pa.Table, e: pa.Table) -> list[int]:
    import ray

    md, ad, ed = ray.data.from_arrow(m), ray.data.from_arrow(a), ray.data.from_arrow(e)
    agg = md.groupby("key").sum("count")
    support = md.groupby(["key", "chunk_id"]).count()
    src = ed.rename_columns({"key": "source_key", "entity": "source"})
    tgt = ed.rename_columns({"key": "target_key", "entity": "target"})
    j = ad.join(src, join_type="inner", num_partitions=4, on=("source_key",))
    j = j.join(tgt, join_type="inner", num_partitions=4, on=("target_key",)).materialize()
    rel = j.groupby(["source", "target"]).sum("weight")
    rel_support = j.groupby(["source", "target", "chunk_id"]).count()
    return [agg.count(), support.count(), rel.count(), rel_support.count()]


def one(n: int, engine: str) -> dict:
    m, a, e = inputs(n)
    start = 0.0
    if engine == "ray":
        import ray

        t = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        start = time.perf_counter() - t
    fn = {"arrow": run_arrow, "dask": run_dask, "ray": run_ray}[engine]
    t, cpu = time.perf_counter(), time.process_time()
    rows = fn(m, a, e)
    return {"mentions": n, "engine": engine, "seconds": round(time.perf_counter() - t, 2),
            "cpu_s": round(time.process_time() - cpu, 2), "start_s": round(start, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000000,5000000")
    parser.add_argument("--engines", default="arrow,dask,ray")
    parser.add_argument("--one", type=int)
    parser.add_argument("--engine")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.engine)))
        return 0
    print(f"{'mentions':>9} {'engine':<6} {'seconds':>8} {'cpu s':>7} {'start s':>8} {'peak MiB':>9}  rows (key agg, key-chunk, pair agg, pair-chunk)")
    for n in (int(s) for s in args.sizes.split(",")):
        for engine in args.engines.split(","):
            try:
                r = measure(__file__, "--one", str(n), "--engine", engine)
            except MeasurementFailed as exc:
                print(f"{n:>9} {engine:<6} failed: {exc}", flush=True)
                continue
            print(f"{n:>9} {engine:<6} {r['seconds']:>8.2f} {r['cpu_s']:>7.2f} {r['start_s']:>8.1f} {r['peak_rss_mib']:>9}  {r['rows']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
