"""Embed stage: embed only the entities, chunks, reports (and, with embed.entity_names, entity
names; with embed.relationships, the relationships) whose text changed, keyed by a hash of model
and text; then write each kind's vector index (vector_files) and the lexical indexes, synonym
edges and passage graph (search_files). The chunks' part starts early, beside resolve (`early`);
the rest, in one pass, at the stage's turn."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.engines.embed import EmbedBatch, model_name
from graphwright.pipeline.executors import BatchStage, actor_threads, pool_of
from graphwright.pipeline.stage import Stage, Where
from graphwright.stages.embed.search_files import write_index_files
from graphwright.storage.changes import changes_since
from graphwright.storage.delta import IndexStore
from graphwright.storage.diff import key_column
from graphwright.storage.memo import StageMemo
from graphwright.storage.patch import delete_matching, read_partition
from graphwright.util.cores import usable_cores

ENTITY_TEXT_CHARS = 600


# The chunk kind's vectors and lexical index need only what ingest and chunk wrote: the runner
# starts them once extract has run (`early`), beside resolve, which leaves a core idle for most
# of its time (started beside extract they slowed its LLM calls by as much as they saved).
EARLY_KINDS = ("chunk",)
EARLY_READS = ("documents", "chunks")


def _memo(run) -> StageMemo:
    cfg = run.config
    # everything the vectors and the search files are built from: titles, aliases and relationships too
    reads = tuple(t for t in STAGE.reads if t != "embeddings")
    settings = cfg.embed.model_dump_json() + cfg.vectors.model_dump_json() + cfg.search_index.model_dump_json()
    return StageMemo(run.store, "embed", reads, ("embeddings",), settings)


def _reusable(store, last: dict | None) -> bool:
    return bool(last) and all(store.files.exists(f) for f in last["vector_indexes"].values() if f)


def _since(memo: StageMemo) -> int | None:
    """The chunks table's version whose chunks the stored chunk vectors are: the one the stage's
    last run read, if nothing wrote the embeddings since (None: not known)."""
    return (memo.last_reads() or {}).get("chunks") if memo.writes_unmoved() else None


def _reused(counts: dict) -> dict:
    return {"embedded": 0, "reused": counts["embedded"] + counts["reused"], "removed": 0}


def _is_early(kind: str) -> bool:
    return kind in EARLY_KINDS


def early(run) -> dict:
    """The stage's early part, EARLY_KINDS' vectors and lexical indexes: {"result", "metrics",
    "reused"}, reused as the last run left them when neither the documents nor the chunks moved;
    None where some of its batches would not run in this process (the stage's one pass, at its
    turn, then embeds what is left with every other kind)."""
    memo = _memo(run)
    last = memo.unchanged(ignoring=tuple(t for t in memo.reads if t not in EARLY_READS))
    if _reusable(run.store, last):
        counts = {k: _reused(c) for k, c in last["counts"].items() if _is_early(k)}
        files = {k: f for k, f in last["vector_indexes"].items() if _is_early(k.removeprefix("lexical:"))}
        total = sum(c["reused"] for c in counts.values())
        return {"result": {"vector_indexes": files, "vector_files": {}, "counts": counts}, "reused": True,
                "metrics": {**counts, "early_reused": True, "rows_in": total, "work_total": total}}
    m: dict = {}
    result = _embed(run, m, _since(memo), _is_early, graph=False, in_process=True)
    return None if result is None else {"result": result, "metrics": m, "reused": False}


def execute(run, m: dict) -> dict:
    started = run.early_result("embed")  # waited for; None if it did not start, or left the work to this pass
    memo = _memo(run)
    last = memo.unchanged()
    if (started is None or started["reused"]) and _reusable(run.store, last):
        counts = {k: _reused(c) for k, c in last["counts"].items()}
        m.update(rows_in=0, rows_out=0, skipped=True, work_unit="items", work_done=0,
                 work_total=sum(c["reused"] for c in counts.values()))
        return {"vector_indexes": last["vector_indexes"], "counts": counts}
    if started is None:  # every kind in one pass, so that an actor pool or the GPU replicas start once
        result = _embed(run, m, _since(memo), lambda kind: True, graph=True)
    else:
        rest = _embed(run, m, None, lambda kind: not _is_early(kind), graph=True)
        result = {name: started["result"][name] | rest[name] for name in ("vector_indexes", "vector_files", "counts")}
        _merged_metrics(m, started["metrics"])
    memo.record(result)
    return result


def _merged_metrics(m: dict, first: dict) -> None:
    """The stage's metrics `m` with its early part's (`first`): counts added, details kept."""
    for key in ("rows_in", "rows_out", "work_done", "work_total"):
        m[key] = m.get(key, 0) + first.get(key, 0)
    for key, value in first.items():
        if key in ("lexical", "vector_index_s"):
            m[key] = value | m.get(key, {})
        elif key == "lexical_s":
            m[key] = round(value + m.get(key, 0.0), 3)
        elif key not in m:
            m[key] = value


def _embed(run, m: dict, since: int | None, wanted, graph: bool, in_process: bool = False) -> dict | None:
    """Embed the kinds `wanted(kind)` accepts and write their indexes (and, with `graph`, the
    synonyms and the passage graph). `since`: the chunks table's version whose chunks the stored
    chunk vectors are (None: not known). With `in_process`, only batches that run in this
    process are embedded, and None is returned if some would not (an actor pool or GPU replicas,
    started for this part, would start again for the rest of the stage): the stage's one pass
    then embeds what is left, with every other kind."""
    store, cfg = run.store, run.config
    model = model_name(cfg.embed)
    counts, todo_parts, keys = {}, [], {}
    changes = changes_since(store, "chunks", since, "chunk_id", ["chunk_id", "text"]) if wanted("chunk") else None
    if wanted("chunk"):
        m["chunk_changes"] = "log" if changes is not None else "table"
    items = have = todo = kept = None
    stale_of = []
    for kind, items in _embedding_inputs(store, cfg.embed, wanted, chunk_ids=changes is None).items():
        have, held = read_partition(store, "embeddings", ["item_id", "text_hash", "model"], {"kind": kind}, "item_id")
        have = have.filter(pc.equal(have.column("model"), model)).select(["item_id", "text_hash"])
        n_items = items.num_rows
        if kind == "chunk" and changes is not None:
            todo, stale = _changed_chunks(model, changes, have.column("item_id"))
            n_items = have.num_rows - len(stale) + todo.num_rows
        elif kind == "chunk":
            todo, stale = _chunks_to_embed(store, model, items.column("item_id"), have)
        else:
            todo, stale = _items_to_embed(model, items, have)
        stale_of.append((kind, stale, held))
        # the kind's keys as the table will hold them once the vectors are appended: its vector
        # index is named and diffed from them instead of reading them again (1.2M chunks: 1.3 s)
        kept = have.filter(pc.invert(pc.is_in(have.column("item_id"), value_set=stale))) if len(stale) else have
        keys[kind] = pa.concat_tables([kept, todo.select(["item_id", "text_hash"]).cast(kept.schema)])
        todo_parts.append(todo.add_column(0, "kind", pa.array([kind] * todo.num_rows, pa.string())))
        counts[kind] = {"embedded": todo.num_rows, "reused": n_items - todo.num_rows, "removed": len(stale)}
    # each kind's inputs go before the sort copies the texts: at 1.2M chunks each copy was 1.3 GB
    del items, have, todo, kept
    if in_process and not run.runs_in_driver(_batch_stage(cfg), sum(t.num_rows for t in todo_parts)):
        return None  # every batch would go to the executor: nothing written, all left to the stage's pass
    for kind, stale, held in stale_of:
        if len(stale):
            delete_matching(store, "embeddings", "item_id", stale, where={"kind": kind, "model": model}, known=held)
    del stale_of
    todo = embedding_order(todo_parts, cfg.execution.commit_every)
    todo_parts.clear()
    pending: list[pa.Table] = []
    embedded, appended = todo.num_rows, 0
    for batch in _embedded(run, todo, driver_only=in_process):
        if not batch.num_rows:
            continue
        appended += batch.num_rows
        pending.append(batch)
        # batches that come back out of order keep windows open: a few windows' rows at most wait
        crowded = sum(t.num_rows for t in pending) >= 4 * cfg.execution.commit_every
        if crowded or _window_of(pending[-1], pc.max) > _window_of(pending[0]):  # a window is complete
            _commit_vectors(store, model, pending, keep_open=not crowded)
    _commit_vectors(store, model, pending)
    if in_process and appended < embedded:
        return None
    del todo  # the texts are not needed while the indexes are built
    if appended != embedded:  # not every item came back with a vector: the indexes read the table's keys
        keys = {}
    files, digests = write_index_files(store, cfg, model, list(counts), m, keys, lexical=wanted, graph=graph)
    total = sum(c["embedded"] + c["reused"] for c in counts.values())
    m.update(rows_in=total, rows_out=embedded, model=model, **counts,
             work_unit="items", work_done=embedded, work_total=total)
    return {"vector_indexes": files, "vector_files": digests, "counts": counts}


def _items_to_embed(model: str, items: pa.Table, have: pa.Table) -> tuple[pa.Table, pa.Array]:
    """(the items whose text has no stored vector, with its text_hash; the stored ids whose
    vector no item's text has now)."""
    items = items.append_column("text_hash", _text_hashes(model, items.column("text")))
    current, existing = key_column(items, ("item_id", "text_hash")), key_column(have, ("item_id", "text_hash"))
    stale = pc.unique(have.column("item_id").filter(pc.invert(pc.is_in(existing, value_set=current))))
    return items.filter(pc.invert(pc.is_in(current, value_set=existing))), stale


def _chunks_to_embed(store: IndexStore, model: str, chunk_ids: pa.ChunkedArray, have: pa.Table) -> tuple[pa.Table, pa.Array]:
    """(the chunks to embed: item_id, text, text_hash; the stored ids no chunk has now). A
    chunk's id derives from its text, so a stored id keeps its vector and only new ids have their
    text read and hashed."""
    stored = have.column("item_id")
    fresh = chunk_ids.filter(pc.invert(pc.is_in(chunk_ids, value_set=stored)))
    stale = pc.unique(stored.filter(pc.invert(pc.is_in(stored, value_set=chunk_ids))))
    new = store.rows_in("chunks", "chunk_id", fresh.to_pylist(), ["chunk_id", "text"])
    # a lookup answers in its own order; `order` is each chunk's place in the table, which
    # embedding_order windows by (the texts are not copied to reorder them here)
    order = pc.index_in(new.column("chunk_id"), value_set=fresh.combine_chunks()).cast(pa.int64())
    return pa.table({"item_id": new.column("chunk_id"), "text": new.column("text"),
                     "text_hash": _text_hashes(model, new.column("text")), "order": order}), stale


def _changed_chunks(model: str, changes, stored: pa.ChunkedArray) -> tuple[pa.Table, pa.Array]:
    """_chunks_to_embed's answer from the chunks added and deleted since the stored vectors' chunks
    (storage.changes): the texts come with the added rows, and neither the chunks table nor every
    stored id is compared with every chunk id (at 1.2M chunks 1.1 s of a 0.1% update). An added
    row may be a chunk already stored (an edited document's unchanged chunks keep their ids)."""
    rows = changes.rows
    added = rows.column("chunk_id").combine_chunks()
    known = stored.filter(pc.is_in(stored, value_set=added))  # a scan of the stored ids against the few added
    fresh = rows.filter(pc.invert(pc.is_in(added, value_set=known.combine_chunks())))
    stale = stored.filter(pc.is_in(stored, value_set=changes.deleted)).combine_chunks()
    return pa.table({"item_id": fresh.column("chunk_id"), "text": fresh.column("text"),
                     "text_hash": _text_hashes(model, fresh.column("text")),
                     "order": pa.array(np.arange(fresh.num_rows, dtype=np.int64))}), pc.unique(stale)


def _embedded(run, todo: pa.Table, driver_only: bool = False):
    """`todo`'s rows with a `vector` instead of their `text`, batch by batch (`driver_only`: those
    that run.map_batches runs in the driver)."""
    cfg = run.config
    if cfg.embed.engine != "vllm":
        yield from run.map_batches("embed", todo, _batch_stage(cfg), driver_only=driver_only)
        return
    from graphwright.engines.embed import make_embedder
    from graphwright.pipeline.staging import Staging

    # one execution of the processor over every text, so that the GPU replicas start once
    rest = todo.drop_columns(["text"])
    staging = Staging(str(run.store.root), run.run_id)
    with run.progress.task("embed", todo.num_rows) as advance:
        for positions, vectors in make_embedder(cfg.embed).stream(todo.column("text").combine_chunks(), cfg.embed.batch_size, staging):
            flat = pa.array(vectors.reshape(-1), type=pa.float32())
            offsets = pa.array(np.arange(0, vectors.size + 1, max(vectors.shape[1], 1), dtype=np.int32))
            advance(len(positions))
            yield rest.take(pa.array(positions)).append_column("vector", pa.ListArray.from_arrays(offsets, flat))


def _batch_stage(cfg) -> BatchStage:
    # an actor's torch threads are capped to its CPUs; the driver, running batches alone, uses all of its cores
    return BatchStage("embed", EmbedBatch, (cfg.embed, actor_threads(cfg.execution.actor_num_cpus)), batch_size=cfg.embed.batch_size,
                      num_cpus=cfg.execution.actor_num_cpus, actors=cfg.execution.actors,
                      driver_args=(cfg.embed, None), weight="text", driver_threads=_driver_threads(cfg.embed))


def _driver_threads(embed) -> int:
    """The cores the embedder keeps busy in the driver: torch's threads, one per core; the others one."""
    if embed.engine != "sentence-transformers":
        return 1
    return usable_cores()


def _embedding_inputs(store: IndexStore, embed, wanted, chunk_ids: bool = True) -> dict[str, pa.Table]:
    """The items of each kind `wanted(kind)` accepts: item_id and text (chunks: their ids alone,
    or, without `chunk_ids`, none: the stage takes them from the chunks table's log)."""
    inputs = {}
    if wanted("entity") or (embed.entity_names and wanted("entity_name")):
        ent = store.read("entities", columns=["entity_id", "name", "type", "description"])
    if wanted("entity"):  # the model reads 256 word-pieces at most; a longer description would only cost time
        entity_text = [f"{n} ({t}): {d[:ENTITY_TEXT_CHARS]}" for n, t, d in zip(*(ent.column(c).to_pylist() for c in ("name", "type", "description")))]
        inputs["entity"] = pa.table({"item_id": ent.column("entity_id"), "text": pa.array(entity_text, pa.string())})
    if wanted("chunk"):  # texts only of new chunks (_embed)
        chunks = store.read("chunks", columns=["chunk_id"]) if chunk_ids else pa.table({"chunk_id": pa.array([], pa.string())})
        inputs["chunk"] = pa.table({"item_id": chunks.column("chunk_id")})
    if wanted("report"):
        reports = store.read("community_reports", columns=["community_id", "full_content"])
        inputs["report"] = pa.table({"item_id": reports.column("community_id"), "text": reports.column("full_content")})
    if embed.entity_names and wanted("entity_name"):  # synonym edges, and the graph mode's links from the question's phrases
        inputs["entity_name"] = pa.table({"item_id": ent.column("entity_id"), "text": ent.column("name")})
    if embed.relationships and wanted("relationship"):  # for the query's relation-level (LightRAG "high") search
        rel = store.read("relationships", columns=["relationship_id", "source", "target", "description"])
        rel_text = [f"{s} - {t}: {d[:ENTITY_TEXT_CHARS]}" for s, t, d in zip(*(rel.column(c).to_pylist() for c in ("source", "target", "description")))]
        inputs["relationship"] = pa.table({"item_id": rel.column("relationship_id"), "text": pa.array(rel_text, pa.string())})
    return inputs


def _text_hashes(model: str, texts: pa.ChunkedArray, batch: int = 65_536) -> pa.ChunkedArray:
    """The key an embedding is reused by: a hash of model and text (a slice of texts at a time)."""
    return pa.chunked_array([pa.array([ids.content_hash(model + "\x1f" + t) for t in texts.slice(o, batch).to_pylist()],
                                      pa.string()) for o in range(0, len(texts), batch)], pa.string())


def embedding_order(parts: list[pa.Table], window: int) -> pa.Table:
    """The items to embed, each kind's in table order (a document's chunks together; a part with
    an `order` column, in that order), cut into windows of `window` rows (a `window` column) and
    sorted by text length inside each window (ties in table order):
    similar lengths in a batch waste less compute on padding, and a window's vectors are
    committed together. So one data file holds the vectors of neighbouring items, and an update's
    DELETE of a document's stale vectors rewrites the file or two that hold them. Sorted by
    length across the whole table, they had been spread over every file of the partition (the
    DELETE took 14 s of a 0.1% update at 1.2M chunks)."""
    tables, places, first = [], [], 0
    for part in parts:
        place = np.arange(part.num_rows, dtype=np.int64)  # table order, or the `order` the part carries
        if "order" in part.column_names:
            place = part.column("order").to_numpy()
            part = part.drop_columns(["order"])
        windows = first + place // max(window, 1)
        first = int(windows.max()) + 1 if part.num_rows else first
        tables.append(part.append_column("window", pa.array(windows, pa.int64())))
        places.append(place)
    todo = pa.concat_tables(tables)
    keys = pa.table({"window": todo.column("window"), "length": pc.utf8_length(todo.column("text")),
                     "place": np.concatenate(places) if places else np.zeros(0, np.int64)})
    return todo.take(pc.sort_indices(keys, sort_keys=[("window", "ascending"), ("length", "ascending"), ("place", "ascending")]))


def _window_of(batch: pa.Table, first_or_last=pc.min) -> int:
    return first_or_last(batch.column("window")).as_py()


def _commit_vectors(store: IndexStore, model: str, pending: list[pa.Table], keep_open: bool = False) -> None:
    """Append the pending vectors: all of them, or (`keep_open`) those of the windows before the
    newest batch's last one (the rest wait: later batches may add to them)."""
    if not pending:
        return
    open_window = _window_of(pending[-1], pc.max)
    table = pa.concat_tables(pending)
    pending.clear()
    if keep_open:
        done = pc.less(table.column("window"), open_window)
        if not pc.all(done).as_py():
            pending.append(table.filter(pc.invert(done)))
        table = table.filter(done)
        if not table.num_rows:
            return
    # appended: the stage deleted these items' stale rows, and a rerun skips items already stored
    store.append("embeddings", pa.table({
        "kind": table.column("kind"),
        "item_id": table.column("item_id"),
        "model": pa.array([model] * table.num_rows, pa.string()),
        "text_hash": table.column("text_hash"),
        "vector": table.column("vector"),
    }))


def gpus(cfg) -> float:
    return cfg.embed.concurrency if cfg.embed.engine == "vllm" else 0


def where(cfg) -> Where:
    emb = cfg.embed
    if emb.engine == "vllm":
        return Where(model_name(emb), "Ray Data LLM job from the driver", f"{emb.concurrency} GPU replicas")
    if emb.engine == "openai":
        return Where(model_name(emb), "driver", f"{emb.concurrency} requests in flight to {emb.base_url}")
    return Where(model_name(emb), pool_of(cfg.execution), f"batches of {emb.batch_size}")


STAGE = Stage(
    "embed", reads=("documents", "entities", "entity_aliases", "chunks", "community_reports", "relationships", "embeddings"),
    writes=("embeddings", "vectors/", "lexical/", "graph/"),
    execute=execute, where=where, gpus=gpus, early=("extract", early),
    summary="embed what changed; update or build each kind's vector and lexical index, the synonyms and the passage graph",
    engines=("embed: sentence-transformers | hashing | openai | vllm", "vectors: faiss | cuvs; lexical: tantivy"),
)
