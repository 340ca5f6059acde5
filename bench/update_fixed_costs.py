"""Fixed costs of an update that grow with the index, timed one by one, side by side for several
checkouts on the same index (read only): what end-to-end update timings cannot separate from the
noise of a shared machine (+-6 s between identical 1.2M-chunk updates).

    python bench/update_fixed_costs.py --index DIR/index-1000000 --src before=/old/checkout --src after=/new/checkout \\
        [--state-copy /tmp/fc-state] [--repeat 2]

Per checkout, in a fresh process each, alternating checkouts `--repeat` times:
- `graph`: the passage graph's arrays built from the tables and the published synonym edges
  (stages.embed.passage_graph.build; mention edges from every entity's chunk list);
- `rows_in`: the texts of 3,000 chunks by id, what report planning asks for (IndexStore.rows_in);
- `state`: resolve's coded rows loaded (state.load, then state.advance of mentions and
  assertions with nothing changed), from the index's state as it is and, with --state-copy, from
  a hard-linked copy whose segments are rewritten as Arrow files (the format a checkout that
  writes them keeps; a checkout that cannot read them reports an error for that row).
Prints seconds per checkout (the minimum of the repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

STEP = r'''
import json, random, sys, time
import pyarrow as pa
index, what = sys.argv[1], sys.argv[2]
from graphwright.storage.delta import IndexStore
store = IndexStore(index)
started = time.perf_counter()
if what == "graph":
    from graphwright.stages.embed import passage_graph
    from graphwright.storage.manifest import load_manifest
    arrays, meta = passage_graph.build(store, load_manifest(store)["vector_indexes"].get("synonyms"))
    size = meta["entries"]
elif what == "rows_in":
    ids = store.read("chunks", columns=["chunk_id"]).column("chunk_id").to_pylist()
    wanted = random.Random(7).sample(ids, 3000)
    started = time.perf_counter()
    size = store.rows_in("chunks", "chunk_id", wanted, ["chunk_id", "text"]).num_rows
else:
    from graphwright.stages.resolve import state
    meta = json.loads(store.files.read_bytes("state/resolve/state.json"))
    st = state.load(store.files, meta["fingerprint"], "linked")
    size = sum(len(state.advance(store, store.files, st, t, "-").current.arrays["row"]) for t in ("mentions", "assertions"))
print(json.dumps({"s": time.perf_counter() - started, "size": size}))
'''


def arrow_state_copy(index: Path, into: Path, src: Path) -> Path:
    """A hard-linked copy of `index` whose resolve segments are Arrow files (written by `src`)."""
    if not into.exists():
        subprocess.run(["cp", "-al", str(index), str(into)], check=True)
        code = r'''
import json, os, sys
from graphwright.storage.location import IndexFiles
root = sys.argv[1]
files, path = IndexFiles(root), os.path.join(sys.argv[1], "state/resolve/state.json")
meta = json.load(open(path))
for segments in meta["segments"].values():
    for data_file, relative in segments.items():
        if relative.endswith(".npz"):
            segments[data_file] = relative[:-4] + ".arrow"
            files.write_arrays(segments[data_file], **files.read_arrays(relative))
            os.unlink(os.path.join(root, relative))
os.unlink(path)  # a hard link: written anew, not through
open(path, "w").write(json.dumps(meta))
'''
        subprocess.run([sys.executable, "-c", code, str(into)], check=True, env=dict(os.environ, PYTHONPATH=str(src)))
    return into


def run(checkout: Path, index: Path, what: str) -> dict:
    out = subprocess.run([sys.executable, "-c", STEP, str(index), what], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(checkout / "src")))
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1].split(":")[0]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--src", action="append", required=True, metavar="LABEL=CHECKOUT")
    p.add_argument("--state-copy", type=Path, help="where to make the copy with Arrow segments (hard links)")
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    checkouts = [(label, Path(path)) for label, path in (s.split("=", 1) for s in a.src)]
    steps = [("graph", a.index), ("rows_in", a.index), ("state", a.index)]
    if a.state_copy:
        steps.append(("state (Arrow segments)", arrow_state_copy(a.index, a.state_copy, checkouts[-1][1] / "src")))
    for name, index in steps:
        got: dict[str, list[dict]] = {label: [] for label, _ in checkouts}
        for r in range(a.repeat):
            for label, checkout in checkouts if r % 2 == 0 else checkouts[::-1]:
                got[label].append(run(checkout, index, name.split(" ")[0]))
        cells = []
        for label, results in got.items():
            timed = [r for r in results if "s" in r]
            best = min(timed, key=lambda r: r["s"]) if timed else results[0]
            cells.append(f"{label} " + (f"{best['s']:6.2f} s ({best['size']:,})" if timed else best["error"]))
        print(f"{name:<24}" + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
