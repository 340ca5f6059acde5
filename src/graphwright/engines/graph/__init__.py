"""Graph engines: Leiden behind one interface, chosen by cluster.engine and imported when chosen.

An engine partitions one graph: `partition(n, edges, weights, *, resolution, seed, n_iterations,
initial=None) -> labels per node`. One that sets `batches_groups` also takes `groups` (a disjoint
union of graphs, each partitioned by its own modularity), so that a level of the hierarchy is a
few engine runs. One that sets `holds_gil` keeps Python's lock while it runs (igraph draws its
random numbers from Python's `random`): work beside it goes to a process, not a thread. The
hierarchy itself lives in graphwright.stages.cluster.hierarchy.

| engine | where | module |
|---|---|---|
| igraph | CPU (default) | igraph_engine |
| leidenalg | CPU | leidenalg_engine |
| cugraph | GPU, the [gpu] extra | cugraph_engine (igraph below `gpu_min_edges`) |
"""

from __future__ import annotations


def make_engine(name: str):
    if name == "igraph":
        from graphwright.engines.graph.igraph_engine import IgraphEngine

        return IgraphEngine()
    if name == "leidenalg":
        from graphwright.engines.graph.leidenalg_engine import LeidenalgEngine

        return LeidenalgEngine()
    if name == "cugraph":
        from graphwright.engines.graph.cugraph_engine import CugraphEngine

        return CugraphEngine()
    raise ValueError(f"unknown graph engine {name!r}")
