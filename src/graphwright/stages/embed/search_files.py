"""Embed: the vector indexes and the files the query modes search beside them, each built or
updated with what changed: the lexical indexes (lexical), the synonym edges (synonyms) and the
passage graph (passage_graph). Returned by manifest key, pinned by the manifest."""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable

from graphwright.stages.embed.lexical import lexical_work
from graphwright.stages.embed.passage_graph import MANIFEST_KEY as GRAPH_KEY
from graphwright.stages.embed.passage_graph import write_passage_graph
from graphwright.stages.embed.passage_update import known_mentions, updated_chunk_keys
from graphwright.stages.embed.synonyms import MANIFEST_KEY as SYNONYMS_KEY
from graphwright.stages.embed.synonyms import NAME_KIND, write_synonyms
from graphwright.stages.embed.vector_files import write_vector_index
from graphwright.storage import manifest
from graphwright.util.threads import side_by_side


# the pieces whose work grows with the corpus (their item lists and ids are read and written whole)
FIRST = ("lexical:relationship", "lexical:chunk", "chunk")


def write_index_files(store, cfg, model: str, kinds, seconds: dict, keys: dict | None = None,
                      lexical: Callable[[str], bool] = lambda kind: True, graph: bool = True) -> tuple[dict[str, str], dict[str, str]]:
    """Every kind's vector index (vector_files) and the search files: (manifest key -> path, the
    sha256 of each vector file written). `seconds` gets the time each part took (and, under
    "lexical", how each lexical index found what changed and how long it took).
    Two threads, each mostly in Rust, Arrow and faiss without the GIL. One builds the entity
    names' vector index, the synonym edges and the passage graph (built from those edges); the
    lexical indexes and the other vector indexes are one queue of independent pieces that both
    threads take from, the ones that grow with the corpus first (FIRST), so that no large piece
    is left for one thread at the end while the other waits (a 0.1% update at 1.2M chunks: 4 s of
    lexical indexes, 3.5 s of names and graph, 2 s of other vector indexes; one thread taking
    every lexical index left the other waiting 1.4 s). `keys`: each kind's (item_id, text_hash)
    rows as the embeddings table holds them, where the caller has them (write_vector_index).
    `lexical(kind)`: whether to write that kind's lexical index; `graph`: whether to write the
    synonyms and the passage graph (the embed stage writes the chunk kind's apart, early)."""
    files, digests, out = {}, {}, {}
    lexical_s, vector = seconds.setdefault("lexical", {}), seconds.setdefault("vector_index_s", {})

    def vectors(kind: str) -> None:
        files[kind], written = _timed(vector, kind, lambda: write_vector_index(store, kind, model, cfg, keys=(keys or {}).get(kind)))
        digests.update(written)

    def lexical_index(kind: str, key: str, work) -> None:
        out[key] = _timed(lexical_s[kind], "s", work)

    pieces = [(key, functools.partial(lexical_index, kind, key, work)) for kind, key, work in lexical_work(store, cfg, lexical_s, lexical)]
    pieces += [(kind, functools.partial(vectors, kind)) for kind in kinds if kind != NAME_KIND]
    pieces.sort(key=lambda piece: FIRST.index(piece[0]) if piece[0] in FIRST else len(FIRST))  # stable
    queue = deque(piece for _, piece in pieces)

    def take_the_rest() -> None:
        while True:
            try:
                piece = queue.popleft()  # one thread gets each piece: deque.popleft is atomic
            except IndexError:
                return
            piece()

    def names_then_graph():
        if NAME_KIND in kinds:
            vectors(NAME_KIND)
        made = _graph_files(store, cfg, model, files.get(NAME_KIND), seconds) if graph and cfg.search_index.passage_graph else {}
        take_the_rest()
        return made

    _, made = side_by_side(take_the_rest, names_then_graph, "index-files")
    seconds["lexical_s"] = round(sum(v.get("s", 0.0) for v in lexical_s.values()), 3)
    return {k: files[k] for k in kinds} | out | made, digests


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
