"""Delete stage (graphwright delete): remove documents named by doc_id or source key, or by a
source-key glob; the stages after it remove everything only they supported."""

from __future__ import annotations

import fnmatch

from graphwright.pipeline.stage import Stage, Where


def execute(run, m: dict) -> dict:
    doc_ids, source_globs = list(run.request.doc_ids), list(run.request.source_globs)
    docs = run.store.read("documents", columns=["doc_id", "source_key"])
    wanted = set(doc_ids)
    chosen = sorted(
        d for d, k in zip(docs.column("doc_id").to_pylist(), docs.column("source_key").to_pylist())
        if d in wanted or k in wanted or any(fnmatch.fnmatchcase(k, g) for g in source_globs)
    )
    missing = sorted(wanted - set(chosen) - set(docs.column("source_key").to_pylist()) - set(docs.column("doc_id").to_pylist()))
    for ident in missing:
        run.log(f"[yellow]not indexed[/] {ident}")
    deleted = run.store.delete_in("documents", "doc_id", chosen) if chosen else 0
    m.update(rows_in=docs.num_rows, rows_out=deleted, deleted=deleted, not_found=len(missing))
    return {"diff": {"new": 0, "changed": 0, "unchanged": docs.num_rows - deleted, "deleted": deleted, "relabeled": 0}, "errors": [],
            "not_found": missing}


STAGE = Stage(
    "delete", reads=("documents",), writes=("documents",), execute=execute,
    where=lambda cfg: Where("by doc id, source key or glob"),
    summary="remove the named documents",
)
