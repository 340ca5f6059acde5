"""Embed: the vector indexes and the files the query modes search beside them, each built or
updated with what changed: the lexical indexes (lexical), the synonym edges (synonyms) and the
passage graph (passage_graph). Returned by manifest key, pinned by the manifest."""

from __future__ import annotations

import time

from graphwright.stages.embed.lexical import write_lexical_indexes
from graphwright.stages.embed.passage_graph import MANIFEST_KEY as GRAPH_KEY
from graphwright.stages.embed.passage_graph import write_passage_graph
from graphwright.stages.embed.passage_update import known_mentions, updated_chunk_keys
from graphwright.stages.embed.synonyms import MANIFEST_KEY as SYNONYMS_KEY
from graphwright.stages.embed.synonyms import NAME_KIND, write_synonyms
from graphwright.stages.embed.vector_files import write_vector_index
from graphwright.storage import manifest
from graphwright.util.threads import side_by_side


def write_index_files(store, cfg, model: str, kinds, seconds: dict) -> tuple[dict[str, str], dict[str, str]]:
    """Every kind's vector index (vector_files) and the search files: (manifest key -> path, the
    sha256 of each vector file written). `seconds` gets the time each part took (and, under
    "lexical", how each lexical index found what changed).
    Two threads, each mostly in Rust, Arrow and faiss without the GIL: the lexical indexes; beside
    them the entity names' vector index, the synonym edges and the passage graph (which are built
    from those edges). Whichever thread is done first takes the other vector indexes, one at a
    time (a 0.1% update at 1.2M chunks: 9 s of lexical indexes against 8 s of graph)."""
    files, digests = {}, {}
    rest = [k for k in kinds if k != NAME_KIND]

    def vectors(wanted):
        for kind in wanted:
            files[kind], written = write_vector_index(store, kind, model, cfg)
            digests.update(written)

    def take_the_rest():
        while True:
            try:
                kind = rest.pop(0)  # one thread gets each kind: list.pop holds the GIL
            except IndexError:
                return
            vectors([kind])

    def lexical_then_vectors():
        out = _timed(seconds, "lexical_s", write_lexical_indexes, store, cfg, seconds.setdefault("lexical", {}))
        take_the_rest()
        return out

    def names_then_graph():
        vectors([k for k in kinds if k == NAME_KIND])
        graph = _graph_files(store, cfg, model, files.get(NAME_KIND), seconds) if cfg.search_index.passage_graph else {}
        take_the_rest()
        return graph

    out, graph = side_by_side(lexical_then_vectors, names_then_graph, "index-files")
    return {k: files[k] for k in kinds} | out | graph, digests


def _graph_files(store, cfg, model: str, names_file: str | None, seconds: dict) -> dict[str, str]:
    out = {}
    synonyms = _timed(seconds, "synonyms_s", lambda: write_synonyms(store, cfg, model, names_file) if names_file else None)
    if synonyms:
        out[SYNONYMS_KEY] = synonyms
    out[GRAPH_KEY] = _timed(  # the published graph is read only when this state's is not there
        seconds, "passage_graph_s", write_passage_graph, store, synonyms,
        lambda entity_keys, chunk_keys: known_mentions(store, entity_keys, chunk_keys, seconds), seconds,
        lambda: updated_chunk_keys(store, manifest.published(store)))
    return out


def _timed(seconds: dict, name: str, work, *args):
    started = time.perf_counter()
    result = work(*args)
    seconds[name] = round(time.perf_counter() - started, 3)
    return result


def unused_files(files, kept: list[dict]) -> list[str]:
    """The lexical and graph files that none of the `kept` manifests needs (for retention)."""
    from graphwright.stages.embed.pinned_files import files_of, is_search_file

    used = {f for m in kept for relative in m["vector_indexes"].values() if is_search_file(relative)
            for f in files_of(files, relative)}
    return [p for prefix in ("lexical", "graph") for p in files.list(prefix) if p not in used]
