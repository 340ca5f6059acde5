"""Graph-native retrieval, HippoRAG 2 style: personalized PageRank over the passage graph
(stages.embed.passage_graph: entity and chunk nodes, chunk-entity, relationship and synonym
edges), restarting at the entities of the facts and names the question matches and at the
passages the fused dense + BM25 ranking finds (graph_seeds). The answer's passages are the
PageRank ranking of the chunks merged by reciprocal rank fusion with that fused ranking
(`graph_fusion_weight` its weight, the walk's 1; 0: chunks rank by their PageRank alone, as in
HippoRAG 2): the walk is one more ranked list beside BM25 and vectors, so a passage that direct
search ranks first is not pushed down by the mass that flows to the seed entities' other chunks,
which grows with the corpus (hub entities, names shared by unrelated pages).

PageRank runs by forward push (query.ppr), so its cost follows the seeds' neighbourhoods, not
the index's size. `graph_relationship_weight` and `graph_synonym_weight` scale those edge
kinds (0 leaves them out).

With `query.graph_steiner`, the `graph_top_entities` highest-mass entities are pruned to a
Steiner tree joining the `graph_steiner_terminals` highest-mass ones (G-Retriever prunes with a
prize-collecting Steiner tree; pcst_fast, its solver, returns wrong indices under numpy 2, so
this uses networkx's Steiner tree approximation, the prize-collecting problem with the
terminals' prizes infinite and the others zero), and only chunks that mention an entity of the
tree are kept.
"""

from __future__ import annotations

import numpy as np

from graphwright.query.fusion import RRF_K
from graphwright.query.graph_seeds import entity_seeds, passage_seeds
from graphwright.util.numeric import sorted_index

VIA_NAMES = 8  # entity names listed per evidence chunk


def search(searcher, question: str, q: np.ndarray, top_k: int, **_) -> dict:
    qc = searcher.config.query
    graph = searcher.graph
    entities, facts = entity_seeds(searcher, question, q)
    passages, fused = passage_seeds(searcher, question, q)
    reset = {**passages}
    for node, w in entities.items():
        reset[node] = reset.get(node, 0.0) + w
    seeds = np.fromiter(reset, dtype=np.int64, count=len(reset))
    weights = np.fromiter(reset.values(), dtype=np.float64, count=len(reset))
    nodes, mass = graph.pagerank(seeds, weights, qc.graph_damping, qc.graph_epsilon,
                                 relationship=qc.graph_relationship_weight, synonym=qc.graph_synonym_weight)
    on_chunk = graph.is_chunk(nodes)
    entity_order = np.lexsort((nodes[~on_chunk], -mass[~on_chunk]))[: qc.graph_top_entities]
    top_entities, entity_mass = nodes[~on_chunk][entity_order], mass[~on_chunk][entity_order]
    chunk_nodes, chunk_mass = nodes[on_chunk], mass[on_chunk]
    tree = None
    if qc.graph_steiner and len(top_entities):
        kept, tree = prune_steiner(graph, top_entities, entity_mass, qc.graph_steiner_terminals)
        keep = np.array([bool(set(graph.entities_of(c).tolist()) & kept) for c in chunk_nodes.tolist()], dtype=bool)
        chunk_nodes, chunk_mass = chunk_nodes[keep], chunk_mass[keep]
        mask = np.isin(top_entities, list(kept))
        top_entities, entity_mass = top_entities[mask], entity_mass[mask]
    scored = final_ranking(graph, chunk_nodes, chunk_mass, fused, top_k, qc.graph_fusion_weight, pruned=qc.graph_steiner)

    entity_mass_of = dict(zip(top_entities.tolist(), entity_mass.tolist()))
    chunk_node_of = {c: n for (c, _), n in zip(scored, graph.chunk_nodes([c for c, _ in scored]).tolist()) if n >= 0}
    via_nodes = {c: sorted(graph.entities_of(chunk_node_of[c]).tolist(), key=lambda e: -entity_mass_of.get(e, 0.0))[:VIA_NAMES]
                 for c, _ in scored if c in chunk_node_of}
    shown = top_entities[:20]
    named = set(shown.tolist()) | {e for es in via_nodes.values() for e in es} | set(entities)
    id_of = dict(zip(sorted(named), graph.ids(sorted(named))))
    rows = searcher.entities(id_of.values())
    name_of = {n: rows[i]["name"] for n, i in id_of.items() if i in rows}
    selected = [id_of[n] for n in shown.tolist()]
    return {
        "evidence": searcher.chunk_evidence(scored, {c: [name_of[e] for e in es if e in name_of] for c, es in via_nodes.items()}),
        "seeds": [{"entity_id": id_of[n], "name": name_of.get(n, id_of[n]), "weight": round(w, 6)}
                  for n, w in sorted(entities.items(), key=lambda t: (-t[1], t[0]))],
        "facts": facts,
        "entities": [{"entity_id": id_of[n], "name": rows[id_of[n]]["name"], "type": rows[id_of[n]]["type"], "ppr": round(m, 6),
                      "description": rows[id_of[n]]["description"], "doc_ids": rows[id_of[n]]["doc_ids"][:10],
                      "chunk_ids": rows[id_of[n]]["chunk_ids"][:10]}
                     for n, m in zip(shown.tolist(), entity_mass[:20].tolist()) if id_of[n] in rows],
        "relationships": [{k: v for k, v in r.items() if k not in ("chunk_ids", "doc_ids")} | {"doc_ids": r["doc_ids"][:10], "chunk_ids": r["chunk_ids"][:10]}
                          for r in searcher.relationships_among(selected, limit=20)],
        **({"tree": tree} if tree is not None else {}),
    }


def final_ranking(graph, nodes: np.ndarray, mass: np.ndarray, fused: list[tuple[str, float]], top_k: int,
                  fusion_weight: float, pruned: bool = False) -> list[tuple[str, float]]:
    """The top_k (chunk id, score): the chunk `nodes` (ascending) by PageRank `mass` (ties by id),
    merged by reciprocal rank fusion with the `fused` ranking weighted `fusion_weight` (the fused
    score is then the score; the same figures as fusion.reciprocal_rank_fusion over the two
    lists); with weight 0, by mass alone. When the chunks were `pruned` (Steiner), only those the
    tree kept may rank; otherwise, with nothing reached, the fused ranking as it is.

    The walk reaches tens of thousands of chunks on a large index; only the ids that can rank are
    decoded: the fused chunks and the walk's first top_k (a chunk below those that the fused list
    does not hold scores less than each of them)."""
    if not len(nodes):
        return [] if pruned else fused[:top_k]
    order = np.lexsort((nodes, -mass))  # node order is id order: the graph's chunk ids are sorted
    if fusion_weight <= 0 or not fused:
        top = order[:top_k]
        return list(zip(graph.ids(nodes[top]), mass[top].tolist()))
    found = list(dict.fromkeys(c for c, _ in fused))
    found_nodes = graph.chunk_nodes(found)
    at = sorted_index(nodes, found_nodes)
    reached = at >= 0
    if pruned:
        found = [c for c, r in zip(found, reached.tolist()) if r]
        at = at[reached]
        reached = reached[reached]
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(1, len(order) + 1)
    head = order[:top_k]
    walk_rank = dict(zip(graph.ids(nodes[head]), range(1, len(head) + 1)))
    walk_rank |= {c: int(rank[a]) for c, a, r in zip(found, at.tolist(), reached.tolist()) if r}
    scores = {c: 1.0 / (RRF_K + r) for c, r in walk_rank.items()}
    for r, c in enumerate(found, 1):
        scores[c] = scores.get(c, 0.0) + fusion_weight / (RRF_K + r)
    return sorted(scores.items(), key=lambda t: (-t[1], t[0]))[:top_k]


def prune_steiner(graph, entities: np.ndarray, mass: np.ndarray, terminals: int) -> tuple[set[int], dict]:
    """The entity nodes of the Steiner tree (networkx's Mehlhorn approximation, one per connected
    part) joining the `terminals` highest-mass `entities` within the relationship subgraph among
    `entities`, and the tree's size."""
    import networkx as nx
    from networkx.algorithms.approximation import steiner_tree

    sub = nx.Graph()
    sub.add_nodes_from(entities.tolist())
    sub.add_weighted_edges_from(graph.relationship_pairs(entities))
    top = set(entities[:terminals].tolist())  # `entities` are in mass order
    kept, edges = set(), 0
    for part in nx.connected_components(sub):
        ends = [n for n in part if n in top]
        if len(ends) == 1:
            kept.update(ends)
        elif ends:
            tree = steiner_tree(sub.subgraph(part), ends, method="mehlhorn")
            kept.update(tree.nodes)
            edges += tree.number_of_edges()
    return kept, {"nodes": len(kept), "edges": edges}
