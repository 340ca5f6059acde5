"""Hierarchical Leiden at scale: graphwright's engine against graspologic-native's
`hierarchical_leiden` (what Microsoft GraphRAG uses) on the same seeded graphs.

    nice -n 10 python bench/leiden_scale.py --nodes 200000 --degree 10 [--max-cluster-size 25] [--engine igraph]
    python bench/leiden_scale.py --index /tmp/gw-scale/index-1000000 --iterations 1 --seeds 5

The graph is a degree-corrected planted partition (LFR-like): power-law community sizes and
power-law node degrees, a share `--mixing` of each node's edges leaving its community, positive
weights. Isolated nodes are dropped, so both libraries see the same node set. `--index` reads the
entity graph of a built index instead (bench/pipeline_scale.py builds them).

Prints, for each side: wall and CPU seconds of the clustering call (graspologic's input conversion to string
tuples is timed apart), communities at the top level and at the leaves, and the weighted
modularity (resolution 1) of the top-level partition and of the leaf partition, both computed by
igraph from the same edge list. With --seeds K, each side runs with K seeds (interleaved), and a
summary gives the median seconds and the modularities' mean and spread: one seed's modularity
differs from another's by more than the sides differ. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from graphwright.config import ClusterConfig
from graphwright.engines.graph import make_engine
from graphwright.engines.graph.graphs import modularity
from graphwright.stages.cluster.hierarchy import hierarchical_leiden


def planted_graph(nodes: int, degree: float, mixing: float, seed: int) -> tuple[int, np.ndarray, np.ndarray]:
    """(n, edges [m, 2], weights [m]) with about nodes * degree / 2 distinct undirected edges."""
    rng = np.random.default_rng(seed)
    sizes = []
    while sum(sizes) < nodes:  # community sizes ~ s^-2 between 10 and 2000 (LFR's tau2 = 2)
        sizes.extend((10 / np.sqrt(rng.random(1024) * (1 - (10 / 2000) ** 2) + (10 / 2000) ** 2)).astype(int).tolist())
    sizes = np.asarray(sizes)
    sizes = sizes[: np.searchsorted(np.cumsum(sizes), nodes) + 1]
    sizes[-1] -= sizes.sum() - nodes
    community = np.repeat(np.arange(len(sizes)), sizes)
    start = np.concatenate([[0], np.cumsum(sizes)])
    theta = np.minimum((1 - rng.random(nodes)) ** (-1 / 1.5), 1000.0)  # degree propensity ~ d^-2.5
    cum = np.concatenate([[0.0], np.cumsum(theta)])

    def draw(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """A node in [lo, hi) per row, with probability proportional to theta."""
        u = cum[lo] + rng.random(len(lo)) * (cum[hi] - cum[lo])
        return np.minimum(np.searchsorted(cum, u, side="right") - 1, hi - 1)

    want = int(nodes * degree / 2)
    pairs = np.empty((0, 2), dtype=np.int64)
    while len(pairs) < want:  # duplicates and self-loops are dropped: draw until there are enough
        draws = int((want - len(pairs)) * 1.3) + 1000
        src = draw(np.zeros(draws, dtype=np.int64), np.full(draws, nodes))
        c = community[src]
        outside = rng.random(draws) < mixing
        tgt = np.where(outside, draw(np.zeros(draws, dtype=np.int64), np.full(draws, nodes)), draw(start[c], start[c + 1]))
        new = np.sort(np.column_stack([src, tgt]), axis=1)
        pairs = np.unique(np.concatenate([pairs, new[new[:, 0] != new[:, 1]]]), axis=0)
    pairs = pairs[rng.permutation(len(pairs))[:want]]
    used, edges = np.unique(pairs, return_inverse=True)  # drop isolated nodes
    weights = 1.0 + np.round(rng.exponential(1.0, len(pairs)), 2)
    return len(used), edges.reshape(-1, 2).astype(np.int64), weights


def index_graph(index: str) -> tuple[int, np.ndarray, np.ndarray]:
    """The entity graph of a built index, as the cluster stage sees it, less its isolated entities
    (graspologic only sees nodes with edges)."""
    from graphwright.stages.cluster.communities import entity_positions
    from graphwright.storage.delta import IndexStore

    store = IndexStore(index)
    entity_ids = sorted(store.read("entities", columns=["entity_id"]).column("entity_id").to_pylist())
    rels = store.read("relationships", columns=["source_id", "target_id", "weight"])
    edges = np.column_stack([entity_positions(rels.column(c), entity_ids) for c in ("source_id", "target_id")])
    used, edges = np.unique(edges, return_inverse=True)
    return len(used), edges.reshape(-1, 2).astype(np.int64), rels.column("weight").to_numpy()


def memberships(n: int, rows) -> tuple[np.ndarray, np.ndarray]:
    """Top-level and leaf labels per node from (level, members, is_leaf) rows."""
    top, leaf = np.full(n, -1), np.full(n, -1)
    for label, (level, members, is_leaf) in enumerate(rows):
        if level == 0:
            top[members] = label
        if is_leaf:
            leaf[members] = label
    assert (top >= 0).all() and (leaf >= 0).all()
    return top, leaf


def run_ours(n, edges, weights, max_size, seed, engine, iterations, workers):
    cfg = ClusterConfig(max_cluster_size=max_size, seed=seed, engine=engine, n_iterations=iterations)
    usage = {"worker_cpu_s": 0.0}
    started, cpu = time.perf_counter(), time.process_time()
    communities = hierarchical_leiden(n, edges, weights, cfg, make_engine(engine), workers=workers, usage=usage)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu + usage["worker_cpu_s"]
    return seconds, cpu, 0.0, memberships(n, [(c.level, c.members, not c.children) for c in communities])


def run_graspologic(n, edges, weights, max_size, seed):
    from graspologic_native import hierarchical_leiden as gn_leiden

    started = time.perf_counter()
    as_strings = [(str(a), str(b), w) for (a, b), w in zip(edges.tolist(), weights.tolist())]
    convert = time.perf_counter() - started
    started, cpu = time.perf_counter(), time.process_time()
    # the arguments Microsoft GraphRAG passes (graphrag/index/utils/graphs.py)
    result = gn_leiden(as_strings, max_cluster_size=max_size, seed=seed, resolution=1.0, randomness=0.001,
                       use_modularity=True, iterations=1, starting_communities=None)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    clusters: dict[tuple[int, int], list[int]] = {}
    final: set[tuple[int, int]] = set()
    for p in result:
        clusters.setdefault((p.level, p.cluster), []).append(int(p.node))
        if p.is_final_cluster:
            final.add((p.level, p.cluster))
    rows = [(level, np.asarray(members), (level, c) in final) for (level, c), members in clusters.items()]
    return seconds, cpu, convert, memberships(n, rows)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--index", help="cluster the entity graph of this index instead of a generated graph")
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--degree", type=float, default=10.0, help="mean degree (edges = nodes * degree / 2)")
    parser.add_argument("--mixing", type=float, default=0.3)
    parser.add_argument("--max-cluster-size", type=int, default=25)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--seeds", type=int, default=1, help="run each side with this many seeds from --seed on, and summarize")
    parser.add_argument("--engine", default="igraph")
    parser.add_argument("--iterations", default=str(ClusterConfig().n_iterations),
                        help="our n_iterations; a comma-separated list runs ours once per value")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="processes for our levels below the top")
    parser.add_argument("--sides", default="ours,graspologic")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    if args.index:
        n, edges, weights = index_graph(args.index)
        print(f"graph: {n} entities, {len(edges)} relationships of {args.index} "
              f"(read in {time.perf_counter() - started:.1f} s); max_cluster_size {args.max_cluster_size}")
    else:
        n, edges, weights = planted_graph(args.nodes, args.degree, args.mixing, args.seed)
        print(f"graph: {n} nodes, {len(edges)} edges, mixing {args.mixing}, seed {args.seed} "
              f"(generated in {time.perf_counter() - started:.1f} s); max_cluster_size {args.max_cluster_size}")
    import graspologic_native  # noqa: F401  (imports are outside every timing)
    import igraph  # noqa: F401

    runs = [("ours", int(i)) for i in args.iterations.split(",")] if "ours" in args.sides else []
    runs = [run for side in args.sides.split(",") for run in (runs if side == "ours" else [(side, None)])]
    results: dict[str, list[dict]] = {}
    # seeds interleaved across sides, so that a change in the machine's load falls on every side
    for seed in range(args.seed, args.seed + args.seeds):
        for side, iterations in runs:
            if side == "ours":
                seconds, cpu, convert, (top, leaf) = run_ours(n, edges, weights, args.max_cluster_size, seed,
                                                              args.engine, iterations, args.workers)
                side = f"graphwright/{args.engine}/it{iterations}/w{args.workers}"
            else:
                seconds, cpu, convert, (top, leaf) = run_graspologic(n, edges, weights, args.max_cluster_size, seed)
                side = "graspologic-native"
            results.setdefault(side, []).append({
                "seed": seed, "seconds": seconds, "cpu_seconds": cpu, "input_conversion_s": convert,
                "top_communities": len(np.unique(top)), "leaf_communities": len(np.unique(leaf)),
                "largest_leaf": int(np.bincount(np.unique(leaf, return_inverse=True)[1]).max()),
                "modularity_top": modularity(n, edges, weights, top),
                "modularity_leaf": modularity(n, edges, weights, leaf),
            })
    if args.json:
        print(json.dumps({"nodes": n, "edges": len(edges), **results}))
        return 0
    print(f"{'side':<24} {'seconds':>8} {'cpu s':>8} {'(+input)':>8} {'top':>7} {'leaves':>7} {'max leaf':>8} {'Q top':>7} {'Q leaf':>7}")
    for side, rows in results.items():
        for r in rows:
            print(f"{side:<24} {r['seconds']:>8.2f} {r['cpu_seconds']:>8.2f} {r['input_conversion_s']:>8.2f} {r['top_communities']:>7} "
                  f"{r['leaf_communities']:>7} {r['largest_leaf']:>8} {r['modularity_top']:>7.4f} {r['modularity_leaf']:>7.4f}"
                  + (f"  seed {r['seed']}" if args.seeds > 1 else ""))
    if args.seeds > 1:
        print(f"\nover seeds {args.seed}..{args.seed + args.seeds - 1}: median seconds, modularity mean ± standard deviation")
        reference = float(np.median([r["seconds"] for r in results.get("graspologic-native", [])] or [np.nan]))
        for side, rows in results.items():
            seconds = float(np.median([r["seconds"] for r in rows]))
            q = {k: (np.mean([r[k] for r in rows]), np.std([r[k] for r in rows])) for k in ("modularity_top", "modularity_leaf")}
            print(f"{side:<24} {seconds:>8.2f} s ({seconds / reference:.2f}x graspologic)  "
                  f"Q top {q['modularity_top'][0]:.4f} ± {q['modularity_top'][1]:.4f}  Q leaf {q['modularity_leaf'][0]:.4f} ± {q['modularity_leaf'][1]:.4f}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
