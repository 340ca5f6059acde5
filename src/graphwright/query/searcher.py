"""Read access to one published version for the query modes: vectors, lexical indexes, chunks,
entities, relationships, the passage graph and community reports, each read through one method.

Chunks, entities and relationships are fetched by id from the version's lexical indexes, which
store their rows (a lookup that costs the same at any index size), and from the Delta tables
where a version has no lexical index (search_index.lexical: none)."""

from __future__ import annotations

import contextlib
import functools
import re

import numpy as np

from graphwright.engines.embed import make_query_embedder
from graphwright.storage.delta import IndexStore, read_in, sql_list
from graphwright.storage.manifest import PublishedIndex
from graphwright.text.names import normalize_name
from graphwright.util.rows import row_dicts

MODES = ("local", "global", "naive", "fusion", "low", "high", "hybrid", "mix", "graph")


def question_keys(question: str) -> set[str]:
    """Every word n-gram (n <= 6) of the question, normalized like entity keys."""
    words = re.findall(r"[\w'’&\-.]+", question)
    keys = set()
    for n in range(1, 7):
        for i in range(len(words) - n + 1):
            keys.add(normalize_name(" ".join(words[i:i + n])))
    return keys


LAZY_REPORTS_PER_QUERY = 5


class Searcher:
    def __init__(self, index_dir: str, version: int | None = None):
        self.index = PublishedIndex(IndexStore(index_dir), version)
        self.config = self.index.config
        self._embedder = None
        self._vectors = {}
        self._memo = {}
        self._llm = None

    # -- vectors --------------------------------------------------------------------------------

    def has_vectors(self, kind: str) -> bool:
        return kind in self.index.manifest["vector_indexes"]

    def vectors(self, kind: str):
        if kind not in self._vectors:
            if not self.has_vectors(kind):
                raise ValueError(f"version {self.index.version} has no {kind} vectors "
                                 f"(re-index with embed.relationships: true for relation-level search)")
            self._vectors[kind] = self.index.vector_index(kind)
        return self._vectors[kind]

    @property
    def embedder(self):
        """The index's embedding model, loaded on first use (a query that needs no vector does not wait for it)."""
        if self._embedder is None:
            self._embedder = make_query_embedder(self.config.embed)
        return self._embedder

    def encode(self, text: str) -> np.ndarray:
        return self.embedder.encode([text])[0]

    def nearest(self, kind: str, q: np.ndarray, k: int) -> list[tuple[str, float]]:
        index = self.vectors(kind)
        with one_search_thread():
            return index.search(q[None, :], k)[0]

    def similarity(self, kind: str, q: np.ndarray, item_ids) -> dict[str, float]:
        """Cosine similarity of the question to given items, from their stored vectors."""
        vi = self.vectors(kind)
        position = self._positions(kind)
        present = [c for c in item_ids if c in position]
        if not present:
            return {}
        mat = np.vstack([vi.reconstruct(position[c]) for c in present])
        return dict(zip(present, (mat @ q).tolist()))

    def _positions(self, kind: str) -> dict[str, int]:
        return self.memo(("positions", kind), lambda: {c: i for i, c in enumerate(self.vectors(kind).ids)})

    def memo(self, key, build):
        """A value derived from this version, built once per searcher (a version never changes)."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    # -- lexical indexes and the passage graph --------------------------------------------------

    def lexical(self, kind: str):
        """The version's BM25 index of `kind` (chunk, entity, relationship), or None."""
        relative = self.index.manifest["vector_indexes"].get(f"lexical:{kind}")
        if relative is None:
            return None
        from graphwright.engines.lexical import open_version

        return self.memo(("lexical", kind), lambda: open_version(self.index.store.files, relative))

    def lexical_search(self, kind: str, text: str, k: int) -> list[tuple[str, float]]:
        index = self.lexical(kind)
        if index is None:
            raise ValueError(f"version {self.index.version} has no lexical index of {kind}s "
                             f"(search_index.lexical is none, or it was published before lexical indexes: run `graphwright index` again)")
        return index.search(text, k)

    @property
    def graph(self):
        """The version's passage graph (query.passage_graph.PassageGraph)."""
        relative = self.index.manifest["vector_indexes"].get("graph")
        if relative is None:
            raise ValueError(f"version {self.index.version} has no passage graph (published before it was built): "
                             f"run `graphwright index` again to build it")
        from graphwright.query.passage_graph import PassageGraph

        return self.memo("graph", lambda: PassageGraph(self.index.store.files, relative))

    @property
    def has_graph(self) -> bool:
        return "graph" in self.index.manifest["vector_indexes"]

    def entity_chunks(self, entity: dict) -> list[str]:
        """Every chunk an entity row's entity is mentioned in (rows from a lexical index list the first few)."""
        if not self.has_graph:
            return entity["chunk_ids"]
        node = self.graph.entity_nodes([entity["entity_id"]])[0]
        return self.graph.ids(self.graph.chunks_of(node)) if node >= 0 else []

    def community_chunks(self, community: dict) -> list[str]:
        """Every chunk a community's entities are mentioned in, sorted (the communities table
        counts them; the lists are the entities')."""
        members = community["entity_ids"]
        if not self.has_graph:
            rows = self._read_in("entities", "entity_id", members, ["entity_id", "chunk_ids"])
            return sorted({c for r in rows for c in r["chunk_ids"]})
        graph = self.graph
        nodes = [n for n in graph.entity_nodes(members).tolist() if n >= 0]
        found = np.unique(np.concatenate([np.empty(0, np.int64), *(graph.chunks_of(n) for n in nodes)]))
        return sorted(graph.ids(found))

    # -- tables ---------------------------------------------------------------------------------

    def _read_in(self, table: str, column: str, keys, columns: list[str]) -> list[dict]:
        return row_dicts(read_in(self.index.read, table, column, keys, columns))

    def chunks(self, chunk_ids) -> dict[str, dict]:
        """Chunk id -> {chunk_id, doc_id, text} (and title, source_key from a lexical index)."""
        store = self.lexical("chunk")
        if store is not None:
            return {c: {"chunk_id": c, **row} for c, row in store.rows(chunk_ids).items()}
        return {r["chunk_id"]: r for r in self._read_in("chunks", "chunk_id", chunk_ids, ["chunk_id", "doc_id", "text"])}

    def chunk_docs(self, chunk_ids) -> dict[str, str]:
        """Chunk id -> document id."""
        if self.lexical("chunk") is not None:
            return {c: r["doc_id"] for c, r in self.chunks(chunk_ids).items()}
        return {r["chunk_id"]: r["doc_id"] for r in self._read_in("chunks", "chunk_id", chunk_ids, ["chunk_id", "doc_id"])}

    def entities(self, entity_ids) -> dict[str, dict]:
        """Entity id -> row with n_chunks; its chunk_ids may be the first few only (entity_chunks has them all)."""
        store = self.lexical("entity")
        if store is not None:
            return {e: {"entity_id": e, **row} for e, row in store.rows(entity_ids).items()}
        cols = ["entity_id", "name", "type", "description", "degree", "chunk_ids", "doc_ids"]
        return {r["entity_id"]: r | {"n_chunks": len(r["chunk_ids"])} for r in self._read_in("entities", "entity_id", entity_ids, cols)}

    def relationships(self, relationship_ids) -> dict[str, dict]:
        """Relationship id -> row; its chunk_ids may be the first few only (relationship_chunks has them all)."""
        store = self.lexical("relationship")
        if store is not None:
            return {r: {"relationship_id": r, **row} for r, row in store.rows(relationship_ids).items()}
        return {r["relationship_id"]: r for r in self._read_in("relationships", "relationship_id", relationship_ids, REL_COLUMNS)}

    def relationship_chunks(self, rows: list[dict]) -> dict[str, list[str]]:
        """Relationship id -> every chunk that supports it."""
        if self.lexical("relationship") is None:
            return {r["relationship_id"]: r["chunk_ids"] for r in rows}
        full = self._read_in("relationships", "relationship_id", [r["relationship_id"] for r in rows], ["relationship_id", "chunk_ids"])
        return {r["relationship_id"]: r["chunk_ids"] for r in full}

    def relationships_among(self, entity_ids, *, touching: bool = False, limit: int | None = None) -> list[dict]:
        """Relationships with both ends (or, `touching`, at least one end) in `entity_ids`; with
        `limit`, the heaviest (ties by id). From the passage graph and the relationship lexical
        index where the version has them (their chunk_ids and doc_ids are the first few)."""
        entity_ids = sorted(set(entity_ids))
        if not entity_ids or (not touching and len(entity_ids) < 2):
            return []
        store = self.lexical("relationship")
        if store is not None and self.has_graph:
            from graphwright.ids import relationship_id

            graph = self.graph
            nodes = graph.entity_nodes(entity_ids)
            pairs = graph.relationship_pairs(nodes, touching=touching)
            names = graph.ids(sorted({n for a, b, _ in pairs for n in (a, b)}))
            node_id = dict(zip(sorted({n for a, b, _ in pairs for n in (a, b)}), names))
            wanted = sorted(((-w, relationship_id(node_id[a], node_id[b])) for a, b, w in pairs))
            ids = [r for _, r in (wanted[:limit] if limit else wanted)]
            rows = store.rows(ids)
            return [{"relationship_id": r, **rows[r]} for r in ids if r in rows]
        ids = sql_list(entity_ids)
        where = f"source_id IN {ids} OR target_id IN {ids}" if touching else f"source_id IN {ids} AND target_id IN {ids}"
        rows = row_dicts(self.index.read("relationships", columns=REL_COLUMNS, where=where))
        return sorted(rows, key=lambda r: (-r["weight"], r["relationship_id"]))[:limit]

    @functools.cached_property
    def alias_index(self) -> dict[str, set[str]]:
        """Normalized alias -> entity ids."""
        aliases = self.index.read("entity_aliases", columns=["alias", "entity_id"])
        out: dict[str, set[str]] = {}
        for a, e in zip(aliases.column("alias").to_pylist(), aliases.column("entity_id").to_pylist()):
            key = normalize_name(a)
            if len(key) > 2:
                out.setdefault(key, set()).add(e)
        return out

    def named_entities(self, text: str) -> set[str]:
        """Entities whose name or alias occurs in `text` (as a word n-gram)."""
        return {e for key in question_keys(text) for e in self.alias_index.get(key, ())}

    @functools.cached_property
    def n_chunks(self) -> int:
        return max(self.index.manifest["counts"].get("chunks", 1), 1)

    @functools.cached_property
    def entity_communities(self) -> dict[str, list[int]]:
        """Entity id -> positions in `communities` of the communities holding it."""
        out: dict[str, list[int]] = {}
        for i, c in enumerate(self.communities):
            for e in c["entity_ids"]:
                out.setdefault(e, []).append(i)
        return out

    @functools.cached_property
    def communities(self) -> list[dict]:
        return row_dicts(self.index.read("communities", columns=["community_id", "level", "parent_id", "children_ids", "entity_ids", "n_chunks"]))

    def reports(self, community_ids) -> dict[str, dict]:
        """Community reports by id: the one place reports are read (communities below
        report.min_size have none). With `report.mode: lazy` the missing ones are written now,
        with the LLM, and stored for later queries and versions (graphwright.stages.report.llm_reports.ensure_reports)."""
        cols = ["community_id", "level", "title", "summary", "rating", "full_content"]
        if self.config.report.mode == "lazy":
            from graphwright.stages.report.llm_reports import ensure_reports

            rows = ensure_reports(self.index.store, list(community_ids), self.config.report, self.llm,
                                  pins=self.index.manifest["table_versions"])
            return {r["community_id"]: {k: r[k] for k in cols} for r in rows}
        store = self.lexical("report")
        if store is not None:
            return {c: {"community_id": c, **row} for c, row in store.rows(community_ids).items()}
        return {r["community_id"]: r for r in self._read_in("community_reports", "community_id", community_ids, cols)}

    def reports_of_entities(self, entity_ids, limit: int = 5) -> list[dict]:
        """Reports of the communities sharing most entities with `entity_ids`, finest level first on ties."""
        chosen = set(entity_ids)
        if not chosen:
            return []
        shared: dict[int, int] = {}
        for e in chosen:
            for i in self.entity_communities.get(e, ()):
                shared[i] = shared.get(i, 0) + 1
        overlap = [(n, self.communities[i]["level"], self.communities[i]["community_id"]) for i, n in shared.items()]
        ranked = [cid for n, level, cid in sorted(overlap, key=lambda t: (-t[0], -t[1], t[2])) if n]
        # a lazy index writes the reports it is asked for: ask only for those that will be used
        if self.config.report.mode == "lazy":  # each costs an LLM call the first time: the closest few
            eligible = {c["community_id"] for c in self.communities if len(c["entity_ids"]) >= self.config.report.min_size}
            limit = min(limit, LAZY_REPORTS_PER_QUERY)
            wanted = [c for c in ranked if c in eligible][:limit]
        else:
            wanted = ranked[:50]
        by_id = self.reports(wanted)
        return [by_id[c] for c in ranked if c in by_id][:limit]

    # -- results --------------------------------------------------------------------------------

    def chunk_evidence(self, scored: list[tuple[str, float]], via: dict[str, list[str]] | None = None) -> list[dict]:
        """Evidence items for ranked (chunk id, score) pairs, with their document."""
        rows = self.chunks([c for c, _ in scored])
        via = via or {}
        return [{"kind": "chunk", "doc_id": rows[c]["doc_id"], "chunk_id": c, "score": round(float(s), 4),
                 "text": rows[c]["text"], "via_entities": via.get(c, []),
                 **{k: rows[c][k] for k in ("title", "source_key", "n_tokens") if k in rows[c]}} for c, s in scored if c in rows]

    def attach_titles(self, result: dict) -> dict:
        doc_ids = sorted({e["doc_id"] for e in result.get("evidence", []) if "title" not in e})
        if doc_ids:
            meta = {r["doc_id"]: r for r in self._read_in("documents", "doc_id", doc_ids, ["doc_id", "title", "source_key"])}
            for e in result["evidence"]:
                if e["doc_id"] in meta:
                    e["title"] = meta[e["doc_id"]]["title"]
                    e["source_key"] = meta[e["doc_id"]]["source_key"]
        return result

    @property
    def llm(self):
        """The index's LLM settings, overridden by GRAPHWRIGHT_LLM__* environment variables."""
        if self._llm is None:
            self._llm = query_llm(self.config)
        return self._llm

    # -- modes ----------------------------------------------------------------------------------

    def search(self, question: str, mode: str = "local", top_k: int | None = None, **options) -> dict:
        """Ranked evidence (chunks, or reports for `global`) with document and chunk provenance,
        plus the mode's own context. `options`: `level` (global), `use_llm` (global map-reduce,
        LLM keywords for the lightrag modes; default: when an LLM is configured), `steps`
        (graph and local: iterative retrieval with the LLM, query.ircot)."""
        if mode not in MODES:
            raise ValueError(f"unknown query mode {mode!r}; choose from {', '.join(MODES)}")
        top_k = self.config.query.top_chunks if top_k is None else top_k
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        steps = options.pop("steps", None)
        if steps:
            from graphwright.query import ircot

            return ircot.search(self, question, mode, top_k, steps, **options)
        from graphwright.query import fusion, global_search, graph, lightrag, local

        q = self.encode(question)
        result = {"question": question, "mode": mode, "version": self.index.version}
        if mode == "naive":
            result["evidence"] = self.chunk_evidence(self.nearest("chunk", q, top_k))
        elif mode == "fusion":
            result.update(fusion.search(self, question, q, top_k))
        elif mode == "local":
            result.update(local.search(self, question, q, top_k))
        elif mode == "global":
            result.update(global_search.search(self, question, q, top_k, **options))
        elif mode == "graph":
            result.update(graph.search(self, question, q, top_k))
        else:
            result.update(lightrag.search(self, question, q, top_k, mode, **options))
        return result


@contextlib.contextmanager
def one_search_thread():
    """faiss searches one question on this thread alone: its OpenMP threads, one per core, only
    wait for each other on a busy machine (14 ms a search of 15k vectors on 2 busy cores). The
    setting is per thread, and restored."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


REL_COLUMNS = ["relationship_id", "source_id", "target_id", "source", "target", "description", "weight", "chunk_ids", "doc_ids"]


def query_llm(config):
    """The index's LLM settings, overridden by GRAPHWRIGHT_LLM__* environment variables."""
    import os

    from graphwright.config import LLMConfig, env_overrides

    return LLMConfig.model_validate({**config.llm.model_dump(), **env_overrides(dict(os.environ)).get("llm", {})})
