"""Does the incremental clustering drift? Three chains of updates, each step clustered by the update
path (stages.cluster.incremental: only touched entities move) from the chain's previous hierarchy:
`units` without the refresh check (cluster.refresh_gain null), `checked` with it (0.001), and
`warm`, whose check compares with a Leiden run over all entities started from the previous step's
reference (one iteration: a fifth of a cold five-iteration run's cost) instead of a cold one, at every step
(the update checks only where the top level was partitioned again); all against a fresh
hierarchical Leiden of the same graph at every step.

    python bench/cluster_drift.py --index /tmp/gw-scale/index-120000 --steps 20 --share 0.01
    python bench/cluster_drift.py --nodes 50000 --degree 10 --steps 20 --share 0.01

Each step edits `share` of the nodes as documents do: an edited node loses half its edges and
gains as many to nodes two hops away (new text about its neighbourhood), and share / 2 new nodes
join the neighbourhood of a random node. Prints per step: touched nodes, the fresh clustering's
top-level modularity, and per chain its gap to it (the bound is 0.002), how many communities (all
levels) the step gave new members, that is new ids and new reports, and the update's seconds
(`*`: the check took Leiden over all entities), and the warm reference's gap to the fresh top
level. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from graphwright.config import ClusterConfig
from graphwright.engines.graph import make_engine
from graphwright.engines.graph.graphs import modularity
from graphwright.stages.cluster.hierarchy import hierarchical_leiden, listing, sorted_edges
from graphwright.stages.cluster.incremental import as_previous, graph_changes, incremental_levels, top_labels
from graphwright.stages.resolve.pair_cache import stable_hashes


def _graph(a) -> tuple[int, np.ndarray, np.ndarray]:
    if a.index:
        from graphwright.stages.cluster.update import current_graph
        from graphwright.storage.delta import IndexStore

        ids, edges, weights, _ = current_graph(IndexStore(a.index))
        return len(ids), edges.astype(np.int64), weights
    from leiden_scale import planted_graph

    return planted_graph(a.nodes, a.degree, 0.3, a.seed)


def _edit(n: int, edges: np.ndarray, weights: np.ndarray, share: float, rng) -> tuple[int, np.ndarray, np.ndarray]:
    """The next graph: `share` of the nodes rewired towards their two-hop neighbourhood, share / 2 new."""
    both = np.concatenate([edges, edges[:, ::-1]])
    order = np.argsort(both[:, 0], kind="stable")
    both = both[order]
    start = np.searchsorted(both[:, 0], np.arange(n + 1))

    def neighbour(u: int) -> int:
        return int(both[rng.integers(start[u], start[u + 1]), 1]) if start[u + 1] > start[u] else int(rng.integers(n))

    edited = rng.choice(n, max(1, int(share * n)), replace=False)
    drop = np.isin(edges[:, 0], edited) & (rng.random(len(edges)) < 0.5)
    added = [(u, neighbour(neighbour(u))) for u in edited.tolist() for _ in range(max(1, int((start[u + 1] - start[u]) // 4)))]
    for k in range(max(1, int(share * n / 2))):
        anchor = int(rng.integers(n))
        added += [(n + k, neighbour(anchor)) for _ in range(3)] + [(n + k, anchor)]
    grown = n + max(1, int(share * n / 2))
    new = np.array([(min(u, v), max(u, v)) for u, v in added if u != v], dtype=np.int64).reshape(-1, 2)
    pairs = np.concatenate([edges[~drop], new])
    code, at = np.unique(pairs[:, 0] * grown + pairs[:, 1], return_inverse=True)
    w = np.bincount(at, np.concatenate([weights[~drop], np.ones(len(new))]), len(code))
    return grown, np.column_stack([code // grown, code % grown]), w


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index")
    p.add_argument("--nodes", type=int, default=50_000)
    p.add_argument("--degree", type=float, default=10)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--share", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    engine, rng = make_engine("igraph"), np.random.default_rng(a.seed)
    configs = {"units": ClusterConfig(refresh_gain=None), "checked": ClusterConfig(), "warm": ClusterConfig(refresh_gain=None)}
    n, edges, weights = _graph(a)
    first = hierarchical_leiden(n, edges, weights, configs["checked"], engine)
    chains = {name: first for name in configs}
    reference = top_labels(first, n)  # the warm chain's: each step's starts from the last one's
    print(f"graph: {n:,} nodes, {len(edges):,} edges; {len(first):,} communities", flush=True)
    print(f"{'step':>4} {'touched':>8} {'Q fresh':>8} | " + " | ".join(f"{name:>7}: {'gap':>8} {'changed':>7} {'s':>5}" for name in configs)
          + f" | {'warm reference gap':>18}")
    for step in range(1, a.steps + 1):
        m, new_edges, new_weights = _edit(n, edges, weights, a.share, rng)
        ids, new_ids = [f"{i:09d}" for i in range(n)], [f"{i:09d}" for i in range(m)]
        touched, *_ = graph_changes(pa.array(ids), edges, weights, new_ids, new_edges, new_weights)
        fresh = hierarchical_leiden(m, new_edges, new_weights, configs["checked"], engine)
        q_fresh = modularity(m, new_edges, new_weights, top_labels(fresh, m))
        cells = []
        for name, config in configs.items():
            started = time.perf_counter()
            levels, stats = incremental_levels(m, new_edges, new_weights, config, engine, as_previous(chains[name]), touched,
                                               stable_hashes(new_ids))
            if name == "warm":
                start = np.concatenate([reference, reference.max() + 1 + np.arange(m - n)])  # new nodes alone
                reference = engine.partition(m, *sorted_edges(m, new_edges, new_weights), seed=config.seed,
                                             resolution=config.resolution, n_iterations=1, initial=start)
                units = top_labels(listing(levels), m)
                gain = modularity(m, new_edges, new_weights, reference) - modularity(m, new_edges, new_weights, units)
                if gain > configs["checked"].refresh_gain:
                    levels, stats = incremental_levels(m, new_edges, new_weights, config, engine, as_previous(chains[name]),
                                                       touched, stable_hashes(new_ids), given_top=reference)
                    stats["refreshed"] = True
            seconds = time.perf_counter() - started
            before = {(c.level, tuple(c.members)) for c in chains[name]}
            chains[name] = listing(levels)
            changed = sum((c.level, tuple(c.members)) not in before for c in chains[name])
            gap = modularity(m, new_edges, new_weights, top_labels(chains[name], m)) - q_fresh
            cells.append(f"{'':>7}  {gap:>+8.5f} {changed:>7,} {seconds:>5.2f}{'*' if stats.get('refreshed') else ' '}")
        warm_gap = modularity(m, new_edges, new_weights, reference) - q_fresh
        print(f"{step:>4} {int(touched.sum()):>8,} {q_fresh:>8.5f} | " + " | ".join(cells) + f" | {warm_gap:>+18.5f}", flush=True)
        n, edges, weights = m, new_edges, new_weights


if __name__ == "__main__":
    main()
