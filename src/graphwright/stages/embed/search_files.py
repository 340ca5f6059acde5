"""Embed: the files the query modes search beside the vector indexes, each built or updated
with what changed: the lexical indexes (lexical), the synonym edges (synonyms) and the passage
graph (passage_graph). Returned by manifest key, pinned by the manifest with the vector indexes."""

from __future__ import annotations

import time

from graphwright.stages.embed.lexical import write_lexical_indexes
from graphwright.stages.embed.passage_graph import MANIFEST_KEY as GRAPH_KEY
from graphwright.stages.embed.passage_graph import write_passage_graph
from graphwright.stages.embed.passage_update import updated_mentions
from graphwright.stages.embed.synonyms import MANIFEST_KEY as SYNONYMS_KEY
from graphwright.stages.embed.synonyms import NAME_KIND, write_synonyms
from graphwright.storage import manifest


def write_search_files(store, cfg, model: str, vector_files: dict[str, str], seconds: dict) -> dict[str, str]:
    """Manifest key -> path; `seconds` gets the time each part took (and, under "lexical", how
    each lexical index found what changed)."""
    started = time.perf_counter()
    out = write_lexical_indexes(store, cfg, seconds.setdefault("lexical", {}))
    seconds["lexical_s"] = round(time.perf_counter() - started, 3)
    if cfg.search_index.passage_graph:
        started = time.perf_counter()
        synonyms = write_synonyms(store, cfg, model, vector_files[NAME_KIND]) if NAME_KIND in vector_files else None
        if synonyms:
            out[SYNONYMS_KEY] = synonyms
        seconds["synonyms_s"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        out[GRAPH_KEY] = write_passage_graph(  # the published graph is read only when this state's is not there
            store, synonyms, lambda entity_keys, chunk_keys: updated_mentions(store, manifest.published(store), entity_keys, chunk_keys),
            seconds)
        seconds["passage_graph_s"] = round(time.perf_counter() - started, 3)
    return out


def unused_files(files, kept: list[dict]) -> list[str]:
    """The lexical and graph files that none of the `kept` manifests needs (for retention)."""
    from graphwright.stages.embed.pinned_files import files_of, is_search_file

    used = {f for m in kept for relative in m["vector_indexes"].values() if is_search_file(relative)
            for f in files_of(files, relative)}
    return [p for prefix in ("lexical", "graph") for p in files.list(prefix) if p not in used]
