"""Exports of a published version in other engines' on-disk formats, so that their own query
code can read our index: `graphrag` (Microsoft GraphRAG 3.3 output layout) and `lightrag`
(LightRAG 1.5 working directory). An export of version N lives in
`<index>/exports/<format>/v<N>/` and never changes: a published version is immutable, and every
id and row order in an export derives from the version's content."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import PublishedIndex

FORMATS = ("graphrag", "lightrag")
SUMMARY = "export.json"  # written last: its presence marks a complete export


def export_dir(index_dir: str | Path, fmt: str, version: int) -> Path:
    from graphwright.storage.location import is_uri

    if is_uri(index_dir):
        raise ValueError(f"{index_dir} is on an object store: give the export a local directory (--out)")
    return Path(index_dir) / "exports" / fmt / f"v{version}"


def export(index_dir: str | Path, fmt: str, version: int | None = None, out: str | Path | None = None) -> dict:
    """Write `fmt` for a published version (default: the latest) to `out` (default:
    export_dir). An existing complete export of that version is kept as it is."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose from {', '.join(FORMATS)}")
    index = PublishedIndex(IndexStore(index_dir), version)
    out = Path(out) if out is not None else export_dir(index_dir, fmt, index.version)
    if (out / SUMMARY).exists():
        summary = json.loads((out / SUMMARY).read_text())
        if summary.get("version") == index.version:
            return {**summary, "path": str(out), "written": False}
        raise FileExistsError(f"{out} holds an export of version {summary.get('version')}, not {index.version}")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not an export of version {index.version}")
    started = time.perf_counter()
    from graphwright.exports.graph import PublishedGraph

    graph = PublishedGraph.read(index)
    writer = _writer(fmt)
    # write next to the target and rename, so a killed export never looks complete
    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        summary = writer(graph, staging)
        summary["seconds"] = round(time.perf_counter() - started, 2)
        (staging / SUMMARY).write_text(json.dumps(summary, indent=1, sort_keys=True))
        if out.exists():
            out.rmdir()
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {**summary, "path": str(out), "written": True}


def _writer(fmt: str):
    if fmt == "graphrag":
        from graphwright.exports.graphrag import write
    else:
        from graphwright.exports.lightrag import write
    return write
