"""Embed: the files the query modes search beside the vector indexes, each built or updated
with what changed: the lexical indexes (lexical), the synonym edges (synonyms) and the passage
graph (passage_graph). Returned by manifest key, pinned by the manifest with the vector indexes."""

from __future__ import annotations

import time

from graphwright.stages.embed.lexical import write_lexical_indexes
from graphwright.stages.embed.passage_graph import MANIFEST_KEY as GRAPH_KEY
from graphwright.stages.embed.passage_graph import write_passage_graph
from graphwright.stages.embed.synonyms import MANIFEST_KEY as SYNONYMS_KEY
from graphwright.stages.embed.synonyms import NAME_KIND, write_synonyms


def write_search_files(store, cfg, model: str, vector_files: dict[str, str], seconds: dict) -> dict[str, str]:
    """Manifest key -> path; `seconds` gets the time each part took."""
    started = time.perf_counter()
    out = write_lexical_indexes(store, cfg)
    seconds["lexical_s"] = round(time.perf_counter() - started, 3)
    if cfg.search_index.passage_graph:
        started = time.perf_counter()
        synonyms = write_synonyms(store, cfg, model, vector_files[NAME_KIND]) if NAME_KIND in vector_files else None
        if synonyms:
            out[SYNONYMS_KEY] = synonyms
        seconds["synonyms_s"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        out[GRAPH_KEY] = write_passage_graph(store, synonyms)
        seconds["passage_graph_s"] = round(time.perf_counter() - started, 3)
    return out


def unused_files(files, kept: list[dict]) -> list[str]:
    """The lexical and graph files that none of the `kept` manifests needs (for retention)."""
    from graphwright.engines.lexical import files_in_use
    from graphwright.stages.embed.synonyms import covered_path

    pinned = [path for m in kept for path in m["vector_indexes"].values()]
    used = files_in_use(files, [p for p in pinned if p.startswith("lexical/")])
    for path in pinned:
        if path.startswith("graph/synonyms-"):
            used |= {path, covered_path(path)}
        elif path.startswith("graph/passage-"):
            used |= {p for p in files.list(path.rsplit("/", 1)[0])}
    return [p for prefix in ("lexical", "graph") for p in files.list(prefix) if p not in used]
