"""Export stage: write the just-published version in the formats of publish.exports (GraphRAG's
output layout, a LightRAG working directory). The version is published already, so a failed
export is reported, not a failed run; an export missing from an earlier run is written now."""

from __future__ import annotations

from graphwright.pipeline.stage import Stage, Where


def execute(run, m: dict) -> dict:
    from graphwright.exports import export

    version = run.results["publish"]["version"]
    written, errors = {}, {}
    for fmt in run.config.publish.exports:
        try:
            written[fmt] = export(run.store.root, fmt, version)
        except Exception as exc:
            errors[fmt] = f"{type(exc).__name__}: {exc}"
            run.log(f"[yellow]export {fmt} of version {version} failed[/]: {exc}")
    m.update(rows_out=sum(int(w["written"]) for w in written.values()), version=version,
             paths={f: w["path"] for f, w in written.items()}, errors=errors,
             work_unit="exports", work_done=sum(int(w["written"]) for w in written.values()), work_total=len(run.config.publish.exports))
    return {"errors": errors, "written": written}


STAGE = Stage(
    "export", reads=("index_manifest",), writes=("exports/",), execute=execute,
    where=lambda cfg: Where(", ".join(cfg.publish.exports)), enabled=lambda cfg: bool(cfg.publish.exports),
    summary="the published version in GraphRAG's and LightRAG's own formats",
)
