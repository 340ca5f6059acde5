"""The passage graph's mention edges of an index, read from every entity's chunk list (a build)
and carried from the published graph with the entities changed since (an update,
stages.embed.passage_update), in one process, alternating; checks both give the same edges.

    python bench/passage_graph_update.py --index DIR/index-1000000 [--repeat 2]

On an index whose tables did not move since its publish the update carries every edge and reads
no list: the least an update pays. Prints figures; exits non-zero if the edges differ.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from graphwright.stages.embed.passage_graph import mention_pairs, node_keys  # noqa: E402
from graphwright.stages.embed.passage_update import updated_mentions  # noqa: E402
from graphwright.storage.delta import IndexStore  # noqa: E402
from graphwright.storage.manifest import load_manifest  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    store = IndexStore(a.index)
    published = load_manifest(store)
    entity_keys, chunk_keys = node_keys(store)
    times: dict[str, list[float]] = {"table": [], "changes": []}
    got = {}
    for _ in range(a.repeat):
        for label in times:
            started = time.perf_counter()
            got[label] = (mention_pairs(store, entity_keys, chunk_keys) if label == "table"
                          else updated_mentions(store, published, entity_keys, chunk_keys))
            times[label].append(time.perf_counter() - started)
    if got["changes"] is None:
        raise SystemExit("the published graph cannot say what changed since (no versions, or the log is gone)")
    width = len(chunk_keys)
    same = np.array_equal(*(np.sort(owner * width + chunk) for owner, chunk in (got["table"], got["changes"])))
    print(f"{len(entity_keys)} entities, {width} chunks, {len(got['table'][0])} mention edges")
    for label, spent in times.items():
        print(f"  from the {label:<8} {min(spent):6.2f} s (of {', '.join(f'{s:.2f}' for s in spent)})")
    print(f"  the same edges: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
