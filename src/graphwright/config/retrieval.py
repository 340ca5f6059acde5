"""Configuration of retrieval: the search files the embed stage builds and the query modes' settings
(docs/reference.md, Query modes)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from graphwright.config.base import _Section


class SearchIndexConfig(_Section):
    """What the embed stage builds beside the vector indexes (docs/reference.md, Retrieval)."""

    # BM25 over chunks (with their document's title), entity names and aliases, and relationships;
    # also where queries fetch chunk texts and entity rows by id
    lexical: Literal["tantivy", "none"] = "tantivy"
    passage_graph: bool = True  # entities, chunks, relationships and synonyms as one graph (the graph mode)
    # synonym edges between entities whose names embed alike (embed.entity_names); 1 = none
    synonym_threshold: float = Field(0.8, gt=0, le=1)
    synonym_neighbours: int = Field(100, ge=1)


class QueryConfig(_Section):
    top_entities: int = Field(15, ge=1)
    top_chunks: int = Field(10, ge=1)
    candidate_chunks: int = Field(50, ge=1)
    entity_weight: float = Field(0.5, ge=0)
    local_entity_chunks: int = Field(500, ge=1)  # local: chunks of the selected entities scored beside the nearest
    name_match_bonus: float = Field(0.3, ge=0)
    # local: the answer's context budget (chunker tokens), shared in proportions; the rest goes to
    # entities and relationships, half each
    local_context_tokens: int = Field(6000, ge=100)
    local_text_unit_prop: float = Field(0.5, ge=0, le=1)
    local_community_prop: float = Field(0.15, ge=0, le=1)
    # global: community level (None: the coarsest with at least global_min_reports reports)
    global_level: int | None = Field(None, ge=0)
    global_min_reports: int = Field(8, ge=1)
    global_max_reports: int = Field(24, ge=1)  # the reports nearest the question go to the map step
    global_map_tokens: int = Field(2500, ge=100)  # report text per map prompt
    global_reduce_tokens: int = Field(2500, ge=100)  # points in the reduce prompt
    # lightrag modes
    lightrag_top_entities: int = Field(20, ge=1)
    lightrag_top_relationships: int = Field(20, ge=1)
    lightrag_chunks_per_item: int = Field(3, ge=1)
    # fusion: BM25 and vector search over chunks, each this deep, merged by reciprocal rank
    fusion_candidates: int = Field(50, ge=1)
    fusion_dense_weight: float = Field(1.0, ge=0)  # a list's weight in the fusion (0 leaves it out)
    fusion_lexical_weight: float = Field(1.0, ge=0)
    # rrf: by rank; convex: the weighted mean of each list's min-max normalised scores
    fusion_method: Literal["rrf", "convex"] = "rrf"
    # graph: personalized PageRank over the passage graph (query/graph.py, query/graph_seeds.py)
    graph_passage_candidates: int = Field(100, ge=1)  # fused chunks seeded as passages
    graph_passage_weight: float = Field(0.05, ge=0)  # x a passage's min-max normalised fused score (HippoRAG 2)
    graph_facts: int = Field(5, ge=0)  # best-matching relationships whose ends seed the walk
    # the final passage ranking: the PageRank ranking and the fused ranking merged by reciprocal
    # rank, the fused one with this weight (the walk's weight is 1; 0: PageRank alone, as HippoRAG 2)
    graph_fusion_weight: float = Field(1.0, ge=0)
    # linked: only facts with an end the question names or links (a filter without an LLM)
    graph_fact_filter: Literal["none", "linked"] = "none"
    graph_links: bool = True  # also seed the entities the question names or whose names its keys match
    graph_link_top: int = Field(5, ge=1)  # entity seeds kept
    graph_seeds_per_key: int = Field(2, ge=1)  # nearest entity names of each name-like key of the question
    # also link the entities whose names (and aliases) BM25 ranks best for the question, with a
    # link score of 0.9 x their BM25 score over the best one's (a named entity's is 1; node
    # specificity applies to both afterwards) (0: none). "Kynance
    # Sands" for a question about "Kynance Cove": a name the question shares a rare word with
    # (docs/benchmarks.md, Retrieval: 5 to 40 gain the same, 20 is the middle)
    graph_name_matches: int = Field(20, ge=0)
    graph_relationship_weight: float = Field(1.0, ge=0)  # scales relationship edges (0: none)
    graph_synonym_weight: float = Field(1.0, ge=0)  # scales synonym edges (0: none)
    graph_damping: float = Field(0.5, gt=0, lt=1)
    graph_epsilon: float = Field(1e-6, gt=0, lt=1)  # push tolerance: each score within this x the node's degree
    graph_top_entities: int = Field(200, ge=1)
    graph_steiner: bool = False  # prune to a Steiner tree joining the top-PPR entities
    graph_steiner_terminals: int = Field(10, ge=1)
    # no longer used; accepted so that configurations published by earlier versions still load
    graph_seed_entities: int = Field(10, ge=1)
    graph_dense_weight: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _proportions(self):
        if self.local_text_unit_prop + self.local_community_prop > 1:
            raise ValueError("query.local_text_unit_prop + query.local_community_prop must not exceed 1")
        return self
