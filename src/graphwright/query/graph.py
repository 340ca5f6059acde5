"""Graph-native retrieval (HippoRAG style): personalized PageRank over the entity graph.

Seeds are the entities named in the question (names and aliases as word n-grams) and the
nearest entities of each name-like key in it (see `seeds`); a seed's reset weight is its similarity to the question
(plus `name_match_bonus` when named) times its rarity, so an entity mentioned everywhere steers
little. PageRank with restarts to the seeds (igraph's personalized_pagerank, relationship weights)
spreads their mass along relationships; a chunk scores the PPR mass of the entities it mentions,
normalized to the best chunk, plus `graph_dense_weight` times its own similarity to the question.

With `query.graph_steiner`, the top-PPR entities are first pruned to a Steiner tree joining the
`graph_steiner_terminals` highest-mass ones (G-Retriever prunes with a prize-collecting Steiner
tree; pcst_fast, its solver, returns wrong indices under numpy 2, so this uses networkx's Steiner
tree approximation, the prize-collecting problem with the terminals' prizes infinite and the
others zero); only the entities in the tree score chunks.
"""

from __future__ import annotations

import math

import numpy as np

from graphwright.query.keywords import question_keywords


def entity_graph(searcher):
    """igraph Graph over all entities with relationships (vertex names are entity ids), and
    entity id -> vertex; built once per searcher."""
    return searcher.memo("entity_graph", lambda: _build_graph(searcher))


def _build_graph(searcher):
    import igraph as ig

    rel = searcher.index.read("relationships", columns=["source_id", "target_id", "weight"])
    src, dst = rel.column("source_id").to_pylist(), rel.column("target_id").to_pylist()
    ids = sorted(set(src) | set(dst))
    position = {e: i for i, e in enumerate(ids)}
    g = ig.Graph(n=len(ids), edges=[(position[a], position[b]) for a, b in zip(src, dst)], directed=False)
    g.vs["name"] = ids
    g.es["weight"] = rel.column("weight").to_pylist()
    return g, position


def seeds(searcher, question: str, q: np.ndarray) -> dict[str, float]:
    """Seed entity -> reset weight. As HippoRAG links each phrase the question names to its
    nearest graph nodes, each low-level key of the question (keywords.question_keywords: names,
    entity names or aliases in it) takes its `graph_seeds_per_key` nearest entities; a question
    without keys takes the question's `graph_seed_entities` nearest entities."""
    qc = searcher.config.query
    keys = question_keywords(searcher, question)["low"]
    scores: dict[str, float] = {}
    if keys:
        for key, v in zip(keys, searcher.embedder.encode(keys)):
            for e, s in searcher.nearest("entity", v, qc.graph_seeds_per_key):
                scores[e] = max(scores.get(e, -1.0), s)
    else:
        scores = dict(searcher.nearest("entity", q, qc.graph_seed_entities))
    named = searcher.named_entities(question)
    for e, s in searcher.similarity("entity", q, sorted(named)).items():
        scores[e] = max(scores.get(e, -1.0), s) + qc.name_match_bonus
    rows = searcher.entities(scores)
    n = searcher.n_chunks
    return {e: max(s, 0.0) * math.sqrt(math.log1p(n / max(len(rows[e]["chunk_ids"]), 1)) / math.log1p(n))
            for e, s in scores.items() if e in rows}


def search(searcher, question: str, q: np.ndarray, top_k: int, **_) -> dict:
    qc = searcher.config.query
    reset = seeds(searcher, question, q)
    g, position = entity_graph(searcher)
    ids = g.vs["name"]
    mass: dict[str, float] = {}
    in_graph = {e: w for e, w in reset.items() if e in position and w > 0}
    if in_graph:
        vector = [0.0] * len(ids)
        for e, w in in_graph.items():
            vector[position[e]] = w
        ppr = g.personalized_pagerank(directed=False, damping=qc.graph_damping, reset=vector, weights="weight")
        top = np.argsort(-np.asarray(ppr))[: qc.graph_top_entities]
        mass = {ids[i]: ppr[i] for i in top if ppr[i] > 0}
    # seeds outside the graph (no relationships) keep their reset weight as mass
    total = sum(in_graph.values()) or 1.0
    for e, w in reset.items():
        if e not in position and w > 0:
            mass[e] = w / total
    tree = None
    if qc.graph_steiner and mass:
        mass, tree = prune_steiner(g, position, mass, qc.graph_steiner_terminals)

    rows = searcher.entities(mass)
    chunk_mass: dict[str, float] = {}
    via: dict[str, list[tuple[float, str]]] = {}
    for e, m in mass.items():
        if e not in rows:
            continue
        for c in rows[e]["chunk_ids"]:
            chunk_mass[c] = chunk_mass.get(c, 0.0) + m
            via.setdefault(c, []).append((m, rows[e]["name"]))
    best = max(chunk_mass.values(), default=0.0) or 1.0
    candidates = {c: m / best for c, m in chunk_mass.items()}
    if qc.graph_dense_weight > 0:
        dense = dict(searcher.nearest("chunk", q, qc.candidate_chunks))
        dense.update(searcher.similarity("chunk", q, [c for c in candidates if c not in dense]))
        candidates = {c: candidates.get(c, 0.0) + qc.graph_dense_weight * s for c, s in dense.items()}
    scored = sorted(candidates.items(), key=lambda cs: (-cs[1], cs[0]))[:top_k]
    names = {c: [n for _, n in sorted(via.get(c, []), key=lambda t: (-t[0], t[1]))][:8] for c, _ in scored}
    ranked_entities = sorted(((e, m) for e, m in mass.items() if e in rows), key=lambda t: (-t[1], t[0]))[:20]
    selected = [e for e, _ in ranked_entities]
    return {
        "evidence": searcher.chunk_evidence(scored, names),
        "seeds": [{"entity_id": e, "name": rows[e]["name"] if e in rows else e, "weight": round(w, 4)}
                  for e, w in sorted(reset.items(), key=lambda t: (-t[1], t[0]))],
        "entities": [{"entity_id": e, "name": rows[e]["name"], "type": rows[e]["type"], "ppr": round(m, 6),
                      "description": rows[e]["description"], "doc_ids": rows[e]["doc_ids"][:10], "chunk_ids": rows[e]["chunk_ids"][:10]}
                     for e, m in ranked_entities],
        "relationships": sorted(({k: v for k, v in r.items() if k not in ("chunk_ids", "doc_ids")} | {"doc_ids": r["doc_ids"][:10], "chunk_ids": r["chunk_ids"][:10]}
                                 for r in searcher.relationships_among(selected)), key=lambda r: (-r["weight"], r["relationship_id"]))[:20],
        **({"tree": tree} if tree is not None else {}),
    }


def prune_steiner(g, position: dict[str, int], mass: dict[str, float], terminals: int):
    """Keep the Steiner tree (networkx's Mehlhorn approximation, one per connected part) that joins
    the `terminals` highest-mass entities within the subgraph induced by the entities in `mass`.
    Returns the pruned mass and the tree's size."""
    import networkx as nx
    from networkx.algorithms.approximation import steiner_tree

    nodes = [e for e in mass if e in position]
    sub = g.induced_subgraph([position[e] for e in nodes])
    names = sub.vs["name"]
    graph = sub.to_networkx()
    top = set(sorted(nodes, key=lambda e: (-mass[e], e))[:terminals])
    kept, edges = set(), 0
    for part in nx.connected_components(graph):
        ends = [i for i in part if names[i] in top]
        if len(ends) == 1:
            kept.update(ends)
        elif ends:
            tree = steiner_tree(graph.subgraph(part), ends, method="mehlhorn")
            kept.update(tree.nodes)
            edges += tree.number_of_edges()
    kept_ids = {names[i] for i in kept}
    pruned = {e: m for e, m in mass.items() if e in kept_ids or e not in position}
    return pruned, {"nodes": len(kept_ids), "edges": edges}
