"""Resolve stage (fan-in, on the driver): entities, entity_aliases and relationships from the
current extractor's mentions and assertions (core.resolve_parts), with descriptions over budget
summarized by the LLM when resolve.summarize is on. Each table is replaced only if a row changed."""

from __future__ import annotations

import pyarrow as pa

from graphwright.pipeline.stage import Stage, Where
from graphwright.stages.extract.extractors import extractor_key
from graphwright.stages.resolve.incremental import resolve_update
from graphwright.storage.patch import patch_changed, patch_table
from graphwright.util.threads import side_by_side


def execute(run, m: dict) -> dict:
    store = run.store
    key = extractor_key(run.config.extract, run.config.llm)
    overflow: dict | None = {} if run.config.resolve.summarize else None
    linking: dict = {}
    update = resolve_update(store, run.config.resolve, key, run.run_id, embed=_embedder(run), adjudicate=_adjudicator(run),
                            overflow=overflow, link_stats=linking, depends=settings_outside(run.config))
    entities = _summarize_descriptions(run, overflow, update.entities, "entities", "entity_id")
    update.laps.restart()

    def relationship_parts():  # each part's overflow is summarized before the part is written
        for part in update.relationship_parts:
            yield _summarize_descriptions(run, overflow, part, "relationships", "relationship_id")

    if update.stats.get("unchanged"):  # neither the input tables nor the outputs moved since the last resolve
        diffs = {t: {"unchanged": True} for t in ("entities", "entity_aliases", "relationships")}
    elif update.patch:  # only the rows the update touched are written, into new files
        # the entities' patch (reading and rewriting the files of their chunk lists, mostly in
        # Arrow, without the GIL) beside the relationships': resolve 36.4 -> 33.6 s in a 0.1% update at 1.2M
        laps = update.laps  # each side's own seconds beside write_s, the two together
        patched, diffs = side_by_side(
            laps.timed("write_entities_s", lambda: patch_table(store, "entities", update.removed_entities, [entities])),
            laps.timed("write_relationships_s", lambda: {
                "relationships": patch_table(store, "relationships", update.removed_relationships, relationship_parts()),
                "entity_aliases": patch_changed(store, "entity_aliases", update.aliases)}),
            "patch-entities")
        diffs["entities"] = patched
    else:
        diffs = {"entities": store.replace_if_changed("entities", entities),
                 "entity_aliases": store.replace_if_changed("entity_aliases", update.aliases),
                 "relationships": store.replace_parts_if_changed("relationships", relationship_parts())}
    update.laps.lap("write_s")  # the relationships' parts are built as they are written
    update.finish(store)
    update.laps.lap("save_state_s")
    linking["seconds"] = update.laps.seconds
    m.update(rows_in=update.stats["mentions_changed"] + update.stats["assertions_changed"], rows_out=entities.num_rows + update.stats["relationships_rebuilt"],
             entities=update.n_entities, relationships=update.n_relationships, aliases=update.aliases.num_rows,
             changes=diffs, linking=linking, work_unit="mentions",
             work_done=update.stats["mentions_changed"] if update.stats.get("incremental") else update.stats["mentions_total"],
             work_total=update.stats.get("mentions_total", 0))
    return diffs


def settings_outside(config) -> str:
    """The settings outside the resolve section that its rows depend on: the embedder's where
    linking scores embeddings, the LLM's where it adjudicates or summarizes ("" otherwise)."""
    from graphwright.engines.embed import model_name

    parts = []
    if config.resolve.embeddings:
        parts.append(f"embed:{model_name(config.embed)}")  # the vectors' identity, as the embed stage keys them
    if config.resolve.adjudicate or config.resolve.summarize:
        parts.append(config.llm.answer_settings())
    return "\n".join(parts)


def _embedder(run):
    if not run.config.resolve.embeddings:
        return None
    from graphwright.engines.embed import make_embedder

    return make_embedder(run.config.embed).encode


def _adjudicator(run):
    """Borderline pairs to the LLM, through the cache; the calls are recorded."""
    if not run.config.resolve.adjudicate:
        return None
    run.config.llm.require("resolve.adjudicate")
    from graphwright.stages.resolve.adjudicate import adjudicate

    def decide(pairs):
        verdicts, calls = adjudicate(run.store, pairs, run.config.llm, run.llm.engine)
        run.record_llm_calls("resolve", pa.Table.from_pylist(calls))
        return verdicts

    return decide


def _summarize_descriptions(run, overflow: dict | None, table: pa.Table, name: str, key: str) -> pa.Table:
    """`table` with the descriptions in `overflow` (emptied after) replaced by LLM summaries."""
    if not overflow:
        return table
    from graphwright.stages.resolve.summarize import summarize

    run.config.llm.require("resolve.summarize")
    summaries, calls = summarize(run.store, overflow, run.config.resolve.description_max_chars, run.config.llm, run.llm.engine)
    overflow.clear()
    run.record_llm_calls("resolve", pa.Table.from_pylist(calls))
    ids_ = table.column(key).to_pylist()
    texts = [summaries.get((name, i), d) for i, d in zip(ids_, table.column("description").to_pylist())]
    return table.set_column(table.schema.get_field_index("description"), "description", pa.array(texts, pa.string()))


def where(cfg) -> Where:
    extras = [x for x, on in (("embeddings", cfg.resolve.embeddings), ("LLM adjudication", cfg.resolve.adjudicate),
                              ("LLM summaries", cfg.resolve.summarize)) if on]
    return Where(cfg.resolve.method + (f" + {', '.join(extras)}" if extras else ""))


STAGE = Stage(
    "resolve", reads=("mentions", "assertions", "chunks", "documents"), writes=("entities", "entity_aliases", "relationships"),
    execute=execute, where=where,
    summary="merge name variants into entities; assertions into relationships, with lineage",
    engines=("vectors.neighbours: faiss | cuvs", "llm (optional: adjudication, summaries)"),
)
