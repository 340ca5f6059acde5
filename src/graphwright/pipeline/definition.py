"""The pipeline, declared: the stages an index run walks, in order, and those a deletion walks.
The runner, `graphwright plan`, the cost reports and the architecture diagram read these lists."""

from __future__ import annotations

from graphwright.pipeline.stage import Stage
from graphwright.stages import (
    chunk,
    cluster,
    delete,
    embed,
    export,
    extract,
    ingest,
    publish,
    report,
    resolve,
)

DERIVE: tuple[Stage, ...] = (chunk.STAGE, extract.STAGE, resolve.STAGE, cluster.STAGE, report.STAGE, embed.STAGE,
                             publish.STAGE, export.STAGE)
INDEX: tuple[Stage, ...] = (ingest.STAGE, *DERIVE)  # graphwright index: the sources are read first
DELETE: tuple[Stage, ...] = (delete.STAGE, *DERIVE)  # graphwright delete: the named documents go first

STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in INDEX)
ORDER: tuple[str, ...] = ("delete", *STAGE_NAMES, "llm-engine")  # how cost reports and plots order rows


def by_name(name: str) -> Stage:
    for stage in (*INDEX, delete.STAGE):
        if stage.name == name:
            return stage
    raise KeyError(f"no stage {name!r}; stages: {', '.join(ORDER)}")
