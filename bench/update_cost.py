"""What a nightly update costs, before and after a code change, side by side from the same index:
per-stage seconds and peak memory of a no-op rerun and of updates changing a share of the
documents, as a share of the full build's time; and, for the code under test, whether the
update equals a fresh resolve of the same state and how its communities compare with a fresh
full clustering (top-level modularity, membership changes outside the touched communities).

    python bench/update_cost.py --index DIR/index-120000 --corpus DIR/corpus-120000 --work /tmp/uc \\
        --base-src /path/to/old/src --shares 0,0.001,0.01 --full-build-s 240 [--fresh 0.01]

Every run starts from a copy of --index (data files hard-linked: Delta never rewrites a file) in a
fresh process. The code under test is this checkout; --base-src is the other code's `src`. Its
first run on an index built by older code builds its state (state/): that run is measured apart,
as "priming", and the updates start from the primed copy. --fresh also builds the edited corpus
from scratch for the shares it names and compares every table (slow: a full build each).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))

from pipeline_scale import _restore, edited_corpus  # noqa: E402

STAGES = ("ingest", "chunk", "extract", "resolve", "cluster", "report", "embed", "publish")


def copy_index(source: Path, target: Path) -> None:
    """A copy whose large files are hard links (Delta and the state put new files, never rewrite)."""
    shutil.rmtree(target, ignore_errors=True)
    for folder, _, names in os.walk(source):
        out = target / Path(folder).relative_to(source)
        out.mkdir(parents=True, exist_ok=True)
        for name in names:
            f = Path(folder) / name
            if f.stat().st_size > 1 << 20 and name != "run.lock":
                os.link(f, out / name)
            else:
                shutil.copy2(f, out / name)


def run_update(src: Path, corpus: Path, index: Path) -> dict:
    """One index run in a fresh process with `src` first on the path (pipeline_scale's --one)."""
    env = dict(os.environ, PYTHONPATH=str(src))
    script = src.parent / "bench" / "pipeline_scale.py"
    if not script.exists():
        script = HERE / "pipeline_scale.py"
    out = subprocess.run([sys.executable, str(script), "--one", str(corpus), str(index)], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"the run on {index} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check(index: Path, previous: Path, work: Path) -> dict:
    """In a fresh process with this checkout: the update against a fresh full resolve of its state,
    and its communities against a fresh full clustering."""
    out = subprocess.run([sys.executable, __file__, "--check", str(index), str(previous), str(work)],
                         env=dict(os.environ, PYTHONPATH=str(SRC)), capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"the check of {index} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check(index: Path, previous: Path, work: Path, overrides: dict | None = None) -> dict:
    import numpy as np
    import pyarrow as pa

    from graphwright.config import load_config
    from graphwright.engines.graph import make_engine
    from graphwright.engines.graph.graphs import modularity
    from graphwright.pipeline import definition
    from graphwright.pipeline.context import Request, Run
    from graphwright.pipeline.progress import StageProgress
    from graphwright.stages.cluster.hierarchy import hierarchical_leiden
    from graphwright.stages.cluster.update import current_graph
    from graphwright.storage.delta import IndexStore

    config = load_config(None, {"embed": {"engine": "hashing"}, "execution": {"executor": "local", "commit_every": 4096},
                                **(overrides or {})})
    fresh = work / "fresh-resolve"
    copy_index(index, fresh)
    shutil.rmtree(fresh / "state", ignore_errors=True)
    started = time.perf_counter()
    definition.by_name("resolve").execute(Run(IndexStore(fresh), config, "run-check", StageProgress(False), lambda m: None,
                                              Request()), {})
    resolve_s = time.perf_counter() - started
    exact = {}
    for table, key in (("entities", "entity_id"), ("entity_aliases", "alias"), ("relationships", "relationship_id")):
        a, b = IndexStore(index).read(table).sort_by(key), IndexStore(fresh).read(table).sort_by(key)
        exact[table] = {"rows": a.num_rows, "equal": a.equals(b)}
    shutil.rmtree(fresh)
    store = IndexStore(index)
    entity_ids, edges, weights, _ = current_graph(store)
    position = {e: i for i, e in enumerate(entity_ids)}
    n = len(entity_ids)

    def top_labels(table: pa.Table) -> np.ndarray:
        label = np.full(n, -1, dtype=np.int64)
        rows = table.filter(pa.compute.equal(table.column("level"), 0))
        for k, members in enumerate(rows.column("entity_ids").to_pylist()):
            label[[position[e] for e in members if e in position]] = k
        return label

    updated = store.read("communities", columns=["level", "entity_ids"])
    before = IndexStore(previous).read("communities", columns=["level", "entity_ids"])
    started = time.perf_counter()
    full = hierarchical_leiden(n, edges, weights, config.cluster, make_engine(config.cluster.engine), None, 2)
    leiden_s = time.perf_counter() - started
    full_top = np.full(n, -1, dtype=np.int64)
    for k, c in enumerate(c for c in full if c.level == 0):
        full_top[c.members] = k
    q_update, q_fresh = modularity(n, edges, weights, top_labels(updated)), modularity(n, edges, weights, full_top)
    # confinement: an entity whose top-level community's members changed must have been in a
    # touched community (one holding an entity the graph change touched) or be new
    with np.load(previous / "state" / "cluster" / "graph.npz") as z:
        old_edges, old_weights = z["edges"].astype(np.int64), z["weights"]
    import pyarrow.ipc as ipc

    with ipc.open_file(previous / "state" / "cluster" / "entities.arrow") as r:
        old_ids = r.read_all().column("entity_id").combine_chunks()
    from graphwright.stages.cluster.incremental import graph_changes

    touched, *_ = graph_changes(old_ids, old_edges, old_weights, entity_ids, edges, weights)
    old_members = {tuple(sorted(m)) for lvl, m in zip(before.column("level").to_pylist(), before.column("entity_ids").to_pylist()) if lvl == 0}
    new_members = [tuple(sorted(m)) for lvl, m in zip(updated.column("level").to_pylist(), updated.column("entity_ids").to_pylist()) if lvl == 0]
    moved = {e for m in new_members if m not in old_members for e in m}
    touched_ids = {entity_ids[i] for i in np.flatnonzero(touched)}
    touched_tops = {m for m in old_members if touched_ids.intersection(m)}
    allowed = touched_ids | {e for m in touched_tops for e in m}
    all_levels = {(lvl, tuple(sorted(m))) for lvl, m in zip(updated.column("level").to_pylist(), updated.column("entity_ids").to_pylist())}
    kept = sum(1 for lvl, m in zip(before.column("level").to_pylist(), before.column("entity_ids").to_pylist())
               if (lvl, tuple(sorted(m))) in all_levels)
    return {"exact": exact, "fresh_resolve_s": round(resolve_s, 1), "fresh_leiden_s": round(leiden_s, 1),
            "modularity_update": round(q_update, 5), "modularity_fresh": round(q_fresh, 5),
            "top_communities": [len(old_members), len(new_members)], "touched_entities": len(touched_ids),
            "entities_in_changed_top_communities": len(moved), "outside_touched_communities": len(moved - allowed),
            "communities_kept": f"{kept} of {before.num_rows}"}


def _fresh_tables(index: Path, corpus: Path, work: Path) -> dict:
    """The edited corpus indexed from scratch (this checkout), compared table by table."""
    fresh = work / "fresh-build"
    shutil.rmtree(fresh, ignore_errors=True)
    run_update(SRC, corpus, fresh)
    out = subprocess.run([sys.executable, "-c", _COMPARE, str(index), str(fresh)], env=dict(os.environ, PYTHONPATH=str(SRC)),
                         capture_output=True, text=True, check=True)
    shutil.rmtree(fresh)
    return json.loads(out.stdout.strip().splitlines()[-1])


_COMPARE = """
import json, sys
from graphwright.storage.delta import IndexStore
a, b = IndexStore(sys.argv[1]), IndexStore(sys.argv[2])
keys = {"documents": "doc_id", "chunks": "chunk_id", "mentions": "mention_id", "assertions": "assertion_id",
        "entities": "entity_id", "entity_aliases": "alias", "relationships": "relationship_id"}
cols = {"documents": ["doc_id", "source_key", "title", "text", "content_hash", "metadata", "n_chars"]}
out = {}
for t, k in keys.items():
    x, y = a.read(t, columns=cols.get(t)).sort_by(k), b.read(t, columns=cols.get(t)).sort_by(k)
    out[t] = {"rows": x.num_rows, "equal": x.equals(y)}
print(json.dumps(out))
"""


def _line(label: str, r: dict, full_s: float | None) -> str:
    stages = " ".join(f"{s} {r['stages'].get(s, {}).get('wall_s', 0):.1f}" for s in STAGES)
    share = f" ({r['wall_s'] / full_s:.2%} of the build)" if full_s else ""
    return f"  {label:<7} total {r['wall_s']:7.1f} s{share}  peak {r['peak_rss_mb'] / 1024:5.2f} GiB | {stages}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path)
    p.add_argument("--corpus", type=Path)
    p.add_argument("--work", type=Path, default=Path("/tmp/graphwright-update-cost"))
    p.add_argument("--base-src", type=Path, help="the other code's src folder (its bench/ beside it, if any)")
    p.add_argument("--shares", default="0,0.001,0.01")
    p.add_argument("--base-primed", action="store_true",
                   help="start the base code's runs from the primed index too (two versions of the incremental path)")
    p.add_argument("--full-build-s", type=float, help="the full build's wall seconds, for the ratios")
    p.add_argument("--fresh", default="", metavar="SHARES",
                   help="for these shares, also index the edited corpus from scratch and compare every table (a full build each)")
    p.add_argument("--check", nargs="+", help=argparse.SUPPRESS)  # INDEX PREVIOUS WORK [CONFIG OVERRIDES AS JSON]
    a = p.parse_args()
    if a.check:
        print(json.dumps(_check(*(Path(x) for x in a.check[:3]), json.loads(a.check[3]) if len(a.check) > 3 else None)))
        return
    a.work.mkdir(parents=True, exist_ok=True)
    _restore(a.corpus)
    results: dict = {"priming": None, "updates": []}
    primed = a.work / "primed"
    copy_index(a.index, primed)
    results["priming"] = run_update(SRC, a.corpus, primed)  # builds the state: a no-op for the tables
    print(_line("priming", results["priming"], a.full_build_s), flush=True)
    state = {d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in (primed / "state").iterdir() if d.is_dir()}
    results["state_bytes"] = state
    print("  state after priming (MB): " + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in sorted(state.items())), flush=True)
    for share in (float(x) for x in a.shares.split(",")):
        row = {"share": share}
        with edited_corpus(a.corpus, share) if share else _nothing() as edit:
            row["edit"] = edit
            print(f"share {share:g}: {edit}", flush=True)
            for label, src, start in (("before", a.base_src, primed if a.base_primed else a.index), ("after", SRC, primed)):
                if src is None:
                    continue
                target = a.work / f"run-{label}"
                copy_index(start, target)
                row[label] = run_update(src, a.corpus, target)
                print(_line(label, row[label], a.full_build_s), flush=True)
                if label == "after":
                    row["check"] = check(target, primed, a.work)
                    print("   ", json.dumps(row["check"]), flush=True)
                    if share in {float(x) for x in a.fresh.split(",") if x}:
                        row["fresh"] = _fresh_tables(target, a.corpus, a.work)
                        print("    fresh build:", json.dumps(row["fresh"]), flush=True)
                shutil.rmtree(target)
        results["updates"].append(row)
        (a.work / "results.json").write_text(json.dumps(results))
    shutil.rmtree(primed)


class _nothing:
    def __enter__(self):
        return {"changed": 0, "deleted": 0, "new": 0}

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
