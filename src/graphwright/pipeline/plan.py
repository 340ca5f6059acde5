"""The resolved plan of a run, printed before running it: each declared stage, the engine it
uses, where it runs (the driver or a pool of Ray actors), what it reserves, and the tables it
reads and writes."""

from __future__ import annotations

from graphwright.config import PipelineConfig
from graphwright.pipeline import definition


def describe(cfg: PipelineConfig) -> list[dict]:
    """One row per stage an index run walks: {stage, engine, runs_on, resources, reads, writes}."""
    rows = []
    for stage in definition.INDEX:
        if not stage.enabled(cfg):
            continue
        where = stage.where(cfg)
        rows.append({"stage": stage.name, "engine": where.engine, "runs_on": where.runs_on, "resources": where.resources,
                     "reads": list(stage.reads), "writes": list(stage.writes), "early_after": stage.early_after(cfg)})
    return rows


def executor_line(cfg: PipelineConfig) -> str:
    ex = cfg.execution
    if ex.executor == "local":
        return "local: every stage in this process"
    where = f"the Ray cluster at {ex.address}" if ex.address else "a local Ray started for the run"
    return f"ray: {where}; commits every {ex.commit_every} rows from the driver"
