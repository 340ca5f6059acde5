"""Why networkit's ParallelLeiden is not a cluster engine (yet): it is faster than igraph, and
it does not always terminate. Rerun this when a new networkit is out.

    pip install networkit==11.3 && python bench/networkit_leiden_check.py [--nodes 1000000]

1. Termination: ParallelLeiden (one thread, seeds 0-5) on bench/data/leiden_hang_81.json, an
   81-node community of the entity graph of a 1.2M-chunk index. Each run is a child process
   whose address space is capped: a run that loops without end grows its memory until the
   allocator fails, and is reported as such instead of taking the machine down.
2. Speed: one Leiden run over the whole generated graph of bench/leiden_scale.py (the top level
   of the hierarchy, the part that cannot be split), networkit against igraph: seconds to build
   the graph and to run, and modularity.

Prints figures; asserts nothing. On networkit 11.3 (2026-11-30, 2 cores): seeds 0, 1, 4 and 5
never finished (each passed the 3 GB cap in about 10 s); on 1M nodes / 5M edges networkit built
and ran in 0.9 + 6.6 s (modularity 0.5828, 2 iterations; 1 iteration: 3.9 s, 0.5697) against
igraph's 1.5 + 11.6 s (0.5819, 1 iteration). Upstream's ParallelLeiden loops over levels until a
level merges nothing, with no bound; the icebug fork of networkit bounds it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import resource
import time
from pathlib import Path

import numpy as np

HANG_GRAPH = Path(__file__).parent / "data" / "leiden_hang_81.json"
CAP_BYTES = 3 << 30  # a finishing run on 81 nodes needs a few MB beyond the interpreter


def networkit_graph(n: int, edges: np.ndarray, weights: np.ndarray):
    """Each edge once, as a row of a sparse matrix (networkit stores it from both ends)."""
    import networkit as nk
    from scipy.sparse import csr_matrix

    order = np.argsort(edges[:, 0], kind="stable")
    edges, weights = edges[order], weights[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(edges[:, 0], minlength=n))])
    return nk.graph.GraphFromCsr(csr_matrix((weights, edges[:, 1], indptr), shape=(n, n)), directed=False, weighted=True)


def networkit_leiden(graph, seed: int, iterations: int) -> np.ndarray:
    import networkit as nk

    nk.setNumberOfThreads(1)
    nk.setSeed(seed, False)
    leiden = nk.community.ParallelLeiden(graph, randomize=True, iterations=iterations, gamma=1.0)
    leiden.run()
    return np.asarray(leiden.getPartition().getVector())


def _capped_run(seed: int, results) -> None:
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    used = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()  # address space now
    resource.setrlimit(resource.RLIMIT_AS, (used + CAP_BYTES, hard))
    data = json.loads(HANG_GRAPH.read_text())
    graph = networkit_graph(data["nodes"], np.asarray(data["edges"]), np.asarray(data["weights"]))
    started = time.perf_counter()
    labels = networkit_leiden(graph, seed, iterations=2)
    results.put((len(set(labels.tolist())), time.perf_counter() - started))


def termination(seeds: range, timeout: float) -> None:
    context = multiprocessing.get_context("spawn")
    for seed in seeds:
        results = context.Queue()
        child = context.Process(target=_capped_run, args=(seed, results))
        started = time.perf_counter()
        child.start()
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join()
            print(f"  seed {seed}: still running after {timeout:.0f} s (killed)")
        elif child.exitcode == 0:
            count, seconds = results.get()
            print(f"  seed {seed}: finished in {seconds:.3f} s, {count} communities")
        else:
            print(f"  seed {seed}: did not finish: its memory passed {CAP_BYTES >> 30} GB in "
                  f"{time.perf_counter() - started:.1f} s and the process died (exit {child.exitcode})")


def speed(nodes: int) -> None:
    import igraph as ig
    from leiden_scale import planted_graph

    n, edges, weights = planted_graph(nodes, 10.0, 0.3, 42)
    order = np.argsort(edges[:, 0] * n + edges[:, 1])
    edges, weights = edges[order], weights[order]
    print(f"  graph: {n} nodes, {len(edges)} edges")
    started = time.perf_counter()
    graph = ig.Graph(n=n)
    graph.add_edges(edges)
    built = time.perf_counter() - started
    random.seed(42)
    started = time.perf_counter()
    labels = graph.community_leiden(objective_function="modularity", weights=weights.tolist(), n_iterations=1).membership
    ran = time.perf_counter() - started
    print(f"  igraph, 1 iteration:        build {built:.2f} s, run {ran:.2f} s, "
          f"modularity {graph.modularity(labels, weights=weights.tolist()):.4f}")
    for iterations in (1, 2):
        started = time.perf_counter()
        nk_graph = networkit_graph(n, edges, weights)
        built = time.perf_counter() - started
        started = time.perf_counter()
        labels = networkit_leiden(nk_graph, 42, iterations)
        ran = time.perf_counter() - started
        print(f"  networkit, {iterations} iteration(s): build {built:.2f} s, run {ran:.2f} s, "
              f"modularity {graph.modularity(labels.tolist(), weights=weights.tolist()):.4f}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1_000_000, help="generated graph for the speed part (0: skip it)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a run is killed")
    args = parser.parse_args()
    try:
        import networkit
    except ImportError:
        print("networkit is not installed (pip install networkit==11.3): nothing to check")
        return 0
    print(f"networkit {networkit.__version__}: ParallelLeiden on {HANG_GRAPH.name}, one thread, 2 iterations")
    termination(range(6), args.timeout)
    if args.nodes:
        print("one Leiden run over a whole generated graph (the hierarchy's top level)")
        speed(args.nodes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
