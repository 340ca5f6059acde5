"""Query a published version.

- `naive`: vector search over chunks.
- `local`: GraphRAG-style local search. The question selects entities (vector similarity of
  name + description, plus a bonus when an entity's name or alias occurs in the question); the
  chunks that support those entities join the chunks nearest to the question; each chunk scores
  its own similarity plus `entity_weight` times the best score of the selected entities it
  mentions. Relationships among the selected entities and the reports of their communities come
  back as context. Every item carries its provenance (document and chunk ids).
"""

from __future__ import annotations

import math
import re

import numpy as np

from graphwright.embed import make_embedder
from graphwright.names import normalize_name
from graphwright.publish import PublishedIndex
from graphwright.store import IndexStore, sql_list

MODES = ("local", "naive")


def _question_keys(question: str) -> set[str]:
    """Every word n-gram (n <= 6) of the question, normalized like entity keys."""
    words = re.findall(r"[\w'’&\-.]+", question)
    keys = set()
    for n in range(1, 7):
        for i in range(len(words) - n + 1):
            keys.add(normalize_name(" ".join(words[i:i + n])))
    return keys


class Searcher:
    def __init__(self, index_dir: str, version: int | None = None):
        self.index = PublishedIndex(IndexStore(index_dir), version)
        self.config = self.index.config
        self.embedder = make_embedder(self.config.embed)
        self._vectors = {}
        self._chunks = None

    def vectors(self, kind: str):
        if kind not in self._vectors:
            self._vectors[kind] = self.index.vector_index(kind)
        return self._vectors[kind]

    def _chunk_rows(self, chunk_ids: list[str]) -> dict[str, dict]:
        if not chunk_ids:
            return {}
        rows = {}
        for o in range(0, len(chunk_ids), 1000):
            part = self.index.read("chunks", columns=["chunk_id", "doc_id", "text"], where=f"chunk_id IN {sql_list(chunk_ids[o:o + 1000])}")
            rows.update({r["chunk_id"]: r for r in part.to_pylist()})
        return rows

    def _similarity(self, kind: str, q: np.ndarray, item_ids: list[str]) -> dict[str, float]:
        """Cosine similarity of the question to given items, from their stored vectors."""
        vi = self.vectors(kind)
        position = {c: i for i, c in enumerate(vi.ids)}
        present = [c for c in item_ids if c in position]
        if not present:
            return {}
        mat = np.vstack([vi.index.reconstruct(position[c]) for c in present])
        return dict(zip(present, (mat @ q).tolist()))

    def search(self, question: str, mode: str = "local", top_k: int | None = None) -> dict:
        if mode not in MODES:
            raise ValueError(f"unknown query mode {mode!r}; choose from {', '.join(MODES)}")
        qc = self.config.query
        top_k = qc.top_chunks if top_k is None else top_k
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        q = self.embedder.encode([question])[0]
        result = {"question": question, "mode": mode, "version": self.index.version}
        if mode == "naive":
            hits = self.vectors("chunk").search(q[None, :], top_k)[0]
            rows = self._chunk_rows([c for c, _ in hits])
            result["evidence"] = [self._evidence(rows[c], s, []) for c, s in hits]
            return result

        # 1. entities: vector hits plus names that occur in the question
        entity_scores: dict[str, float] = {e: s for e, s in self.vectors("entity").search(q[None, :], qc.top_entities)[0]}
        keys = _question_keys(question)
        aliases = self.index.read("entity_aliases", columns=["alias", "entity_id"])
        named = {e for a, e in zip(aliases.column("alias").to_pylist(), aliases.column("entity_id").to_pylist())
                 if normalize_name(a) in keys and len(normalize_name(a)) > 2}
        if named:
            for e, s in self._similarity("entity", q, sorted(named)).items():
                entity_scores[e] = max(entity_scores.get(e, -1.0), s) + qc.name_match_bonus
        ents = self.index.read("entities", columns=["entity_id", "name", "type", "description", "chunk_ids", "doc_ids"],
                               where=f"entity_id IN {sql_list(entity_scores)}") if entity_scores else None
        entities = sorted(ents.to_pylist() if ents is not None else [], key=lambda e: -entity_scores[e["entity_id"]])

        # 2. candidate chunks: nearest to the question, and those supporting the selected entities
        chunk_entities: dict[str, list[str]] = {}
        for e in entities:
            for c in e["chunk_ids"]:
                chunk_entities.setdefault(c, []).append(e["entity_id"])
        candidates = dict(self.vectors("chunk").search(q[None, :], qc.candidate_chunks)[0])
        candidates.update(self._similarity("chunk", q, [c for c in chunk_entities if c not in candidates]))
        name_of = {e["entity_id"]: e["name"] for e in entities}
        # an entity found in most chunks says little about which chunk answers: weight by rarity
        n_chunks = max(self.index.manifest["counts"].get("chunks", 1), 1)
        rarity = {e["entity_id"]: math.sqrt(math.log1p(n_chunks / max(len(e["chunk_ids"]), 1)) / math.log1p(n_chunks)) for e in entities}
        scored = sorted(
            ((c, s + qc.entity_weight * max((entity_scores[e] * rarity[e] for e in chunk_entities.get(c, [])), default=0.0))
             for c, s in candidates.items()),
            key=lambda cs: (-cs[1], cs[0]),
        )[:top_k]
        rows = self._chunk_rows([c for c, _ in scored])
        result["evidence"] = [self._evidence(rows[c], s, [name_of[e] for e in chunk_entities.get(c, [])]) for c, s in scored]

        # 3. context: the selected entities, relationships among them, their communities' reports
        selected = [e["entity_id"] for e in entities]
        result["entities"] = [
            {"entity_id": e["entity_id"], "name": e["name"], "type": e["type"], "score": round(entity_scores[e["entity_id"]], 4),
             "description": e["description"], "doc_ids": e["doc_ids"][:10], "chunk_ids": e["chunk_ids"][:10]}
            for e in entities
        ]
        result["relationships"] = self._relationships(selected)
        result["reports"] = self._reports(selected)
        return result

    def _relationships(self, entity_ids: list[str], limit: int = 20) -> list[dict]:
        if len(entity_ids) < 2:
            return []
        rel = self.index.read("relationships", columns=["relationship_id", "source", "target", "description", "weight", "chunk_ids", "doc_ids"],
                              where=f"source_id IN {sql_list(entity_ids)} AND target_id IN {sql_list(entity_ids)}")
        rows = sorted(rel.to_pylist(), key=lambda r: (-r["weight"], r["relationship_id"]))[:limit]
        for r in rows:
            r["chunk_ids"], r["doc_ids"] = r["chunk_ids"][:10], r["doc_ids"][:10]
        return rows

    def _reports(self, entity_ids: list[str], limit: int = 5) -> list[dict]:
        if not entity_ids:
            return []
        comms = self.index.read("communities", columns=["community_id", "level", "entity_ids"])
        chosen = set(entity_ids)
        overlap = [(len(chosen.intersection(c["entity_ids"])), c["level"], c["community_id"]) for c in comms.to_pylist()]
        ranked = [cid for n, level, cid in sorted(overlap, key=lambda t: (-t[0], -t[1], t[2])) if n]
        if not ranked:
            return []
        columns = ["community_id", "level", "title", "summary", "rating"]
        if self.config.report.mode == "lazy":  # written now, for the communities this query returns
            from graphwright.reports import ensure_reports

            sizes = {c["community_id"]: len(c["entity_ids"]) for c in comms.to_pylist()}
            touched = [c for c in ranked if sizes[c] >= self.config.report.min_size][:limit]
            rows = ensure_reports(self.index.store, touched, self.config.report, _query_llm(self.config),
                                  pins=self.index.manifest["table_versions"])
            return [{k: r[k] for k in columns} for r in rows]
        reports = self.index.read("community_reports", columns=columns, where=f"community_id IN {sql_list(ranked[:50])}")
        by_id = {r["community_id"]: r for r in reports.to_pylist()}
        return [by_id[c] for c in ranked if c in by_id][:limit]

    def _evidence(self, row: dict, score: float, via: list[str]) -> dict:
        return {"doc_id": row["doc_id"], "chunk_id": row["chunk_id"], "score": round(float(score), 4), "text": row["text"], "via_entities": via}

    def attach_titles(self, result: dict) -> dict:
        doc_ids = sorted({e["doc_id"] for e in result.get("evidence", [])})
        if doc_ids:
            docs = self.index.read("documents", columns=["doc_id", "title", "source_key"], where=f"doc_id IN {sql_list(doc_ids)}")
            meta = {r["doc_id"]: r for r in docs.to_pylist()}
            for e in result["evidence"]:
                e["title"] = meta[e["doc_id"]]["title"]
                e["source_key"] = meta[e["doc_id"]]["source_key"]
        return result


def query(index_dir: str, question: str, mode: str = "local", top_k: int | None = None, version: int | None = None,
          answer: bool | None = None, searcher: Searcher | None = None) -> dict:
    """Evidence for `question`; with an LLM configured (llm.model, from the index's configuration
    or GRAPHWRIGHT_LLM__* variables) and `answer` not False, also an answer citing it. A caller
    answering many questions passes a loaded `searcher` (of `index_dir` at `version`)."""
    searcher = searcher or Searcher(index_dir, version)
    result = searcher.attach_titles(searcher.search(question, mode, top_k))
    llm = _query_llm(searcher.config)
    if answer or (answer is None and llm.model):
        if not llm.model:
            raise ValueError("no LLM configured for answers: set llm.model (or GRAPHWRIGHT_LLM__MODEL and GRAPHWRIGHT_LLM__BASE_URL)")
        from graphwright.answer import synthesize

        result = synthesize(question, result, llm, searcher.index.store)
    return result


def _query_llm(config):
    """The index's LLM settings, overridden by GRAPHWRIGHT_LLM__* environment variables."""
    import os

    from graphwright.config import LLMConfig, env_overrides

    return LLMConfig.model_validate({**config.llm.model_dump(), **env_overrides(dict(os.environ)).get("llm", {})})
