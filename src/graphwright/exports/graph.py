"""What every export reads from one published version: the graph tables as row lists in a fixed
order (by our content-derived ids), and the stored embeddings by kind."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from graphwright.storage.manifest import PublishedIndex
from graphwright.util.rows import row_dicts


@dataclass
class PublishedGraph:
    version: int
    published_at: datetime
    embedding_model: str
    documents: list[dict]
    chunks: list[dict]
    entities: list[dict]
    relationships: list[dict]
    communities: list[dict]
    reports: list[dict]
    index: PublishedIndex

    @classmethod
    def read(cls, index: PublishedIndex) -> PublishedGraph:
        def rows(name: str, columns: list[str], key) -> list[dict]:
            return sorted(row_dicts(index.read(name, columns=columns)), key=key)

        return cls(
            version=index.version,
            published_at=index.manifest["published_at"],
            embedding_model=index.manifest["embedding_model"],
            documents=rows("documents", ["doc_id", "source_key", "source", "title", "text", "metadata"], lambda r: r["doc_id"]),
            chunks=rows("chunks", ["chunk_id", "doc_id", "chunk_index", "text", "n_tokens"], lambda r: (r["doc_id"], r["chunk_index"], r["chunk_id"])),
            entities=rows("entities", ["entity_id", "name", "type", "description", "mention_count", "degree", "chunk_ids", "doc_ids"],
                          lambda r: r["entity_id"]),
            relationships=rows("relationships", ["relationship_id", "source_id", "target_id", "source", "target", "description", "weight",
                                                 "chunk_ids", "doc_ids"], lambda r: r["relationship_id"]),
            communities=rows("communities", ["community_id", "human_id", "level", "parent_id", "children_ids", "entity_ids",
                                             "relationship_ids", "n_chunks", "size"], lambda r: (r["level"], r["human_id"], r["community_id"])),
            reports=rows("community_reports", ["community_id", "level", "title", "summary", "rating", "rating_explanation", "findings",
                                               "full_content"], lambda r: r["community_id"]),
            index=index,
        )

    def extractions(self) -> tuple[list[dict], list[dict], dict[str, str]]:
        """(mentions, assertions, alias -> entity_id): what each chunk contributed, as the
        version's extractor found it, and the entity each surface name was resolved into."""
        from graphwright.stages.extract.extractors import extractor_key

        config = self.index.config
        key = extractor_key(config.extract, config.llm).replace("'", "''")
        mentions = row_dicts(self.index.read("mentions", columns=["chunk_id", "name", "type", "description", "count"],
                                             where=f"extractor = '{key}'"))
        assertions = row_dicts(self.index.read("assertions", columns=["chunk_id", "source", "target", "description", "weight"],
                                               where=f"extractor = '{key}'"))
        aliases = self.index.read("entity_aliases", columns=["alias", "entity_id"])
        return mentions, assertions, dict(zip(aliases.column("alias").to_pylist(), aliases.column("entity_id").to_pylist()))

    def vectors(self, kind: str) -> dict[str, np.ndarray]:
        """The stored vectors of one kind (entity | chunk | report), computed by this version's model."""
        table = self.index.read("embeddings", columns=["item_id", "vector"],
                                where=f"kind = '{kind}' AND model = '{self.embedding_model.replace(chr(39), chr(39) * 2)}'")
        ids = table.column("item_id").to_pylist()
        if not ids:
            return {}
        flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False).astype(np.float32)
        matrix = flat.reshape(len(ids), -1)
        return dict(zip(ids, matrix))

    def embedder(self):
        """The embedder that made the stored vectors, for texts that have none (and for questions)."""
        from graphwright.engines.embed import make_embedder

        return make_embedder(self.index.config.embed)

    @staticmethod
    def findings(report: dict) -> list[dict]:
        return [{"summary": f.get("summary", ""), "explanation": f.get("explanation", "")} for f in json.loads(report["findings"] or "[]")]
