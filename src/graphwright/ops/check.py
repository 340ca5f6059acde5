"""`graphwright check`: whether an index's published version and the tables the next run builds
on can be read, and the repair for what cannot.

For the published version, every data table at its pinned Delta version: the commits a reader
replays exist, are not empty and parse (storage.health), every data file the version lists
exists with its recorded size, and the rows add up to the manifest's count; every vector file
exists with the sha256 the manifest recorded. For each table's latest version (what the next
run appends to): the same log check. Each problem names the table or file, the version, and the
repair; `repair` carries them out:

- broken commits at the end of a log are moved to <index>/quarantine/ (the table reads at its
  last good version again); missing or truncated data files are dropped from the table's
  latest version (Delta's FSCK; a truncated file is quarantined first);
- a missing or wrong vector file is rebuilt from the embeddings table at the pinned version;
- if a data table was repaired, the index is rolled back to the newest published version that
  is intact (it republishes that state; the next index run recomputes what came after), and
  if none is, the tables to rebuild are named with the command that rebuilds them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from urllib.parse import unquote

from graphwright.storage import contracts, health
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import DATA_TABLES, manifests

QUARANTINE = "quarantine"


@dataclass
class Problem:
    table: str  # a table, or "vectors"
    version: int | None  # its Delta version (vectors: the published version)
    scope: str  # "published" (queries fail) | "latest" (the next run fails)
    what: str  # "log" | "files" | "rows" | "vector"
    detail: str
    repair: str
    files: tuple[str, ...] = ()  # the broken commit or data files (relative to the table), or the vector files


def _broken_log(store: IndexStore, name: str, version: int | None, scope: str) -> list[Problem]:
    import obstore

    files = store.table_files(name)
    try:
        entries = health.log_entries(files)
    except Exception as exc:  # noqa: BLE001 - any listing failure is the finding
        return [Problem(name, version, scope, "log", f"its log cannot be listed: {health.first_line(exc)}", "", ())]
    if not entries:
        return [Problem(name, version, scope, "log", "its Delta log (_delta_log) is gone",
                        "restore the table folder from a backup, or rebuild the table (see below)", ())]
    found = health.log_problems(entries, version, read=lambda p: bytes(obstore.get(files, p).bytes()))
    return [Problem(name, v, scope, "log", reason, f"move commit {v} and any after it to {QUARANTINE}/ (the table then "
                                                   f"reads at version {v - 1})", (f"{health.LOG}/{v:020d}.json",))
            for v, reason in found]


def _table_problems(store: IndexStore, name: str, version: int, expected_rows: int | None) -> list[Problem]:
    """The log, data files and row count of one table at one version."""
    import obstore
    import pyarrow as pa
    from deltalake import DeltaTable

    problems = _broken_log(store, name, version, "published")
    if problems:
        return problems
    lost = health.placeholder_reason(bytes(obstore.get(store.table_files(name), f"{health.LOG}/{version:020d}.json").bytes())) \
        if f"{version:020d}.json" in health.log_entries(store.table_files(name)) else None
    if lost:
        return [Problem(name, version, "published", "log", f"version {version} was lost ({lost}); a placeholder stands in for it",
                        "roll back to an intact published version (check --repair), or re-index")]
    try:
        dt = DeltaTable(store.path(name), version=version, storage_options=store.storage_options)
        actions = pa.table(dt.get_add_actions(flatten=True))
    except Exception as exc:  # noqa: BLE001
        return [Problem(name, version, "published", "log", f"version {version} cannot be opened: {health.first_line(exc)}",
                        "roll back to an intact published version (check --repair)")]
    listed = {unquote(m["path"]): m["size"] for batch in obstore.list(store.table_files(name)) for m in batch
              if not m["path"].startswith(health.LOG)}
    missing, truncated = [], []
    for path, size in zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()):
        path = unquote(path)
        if path not in listed:
            missing.append(path)
        elif size is not None and listed[path] != size:
            truncated.append(path)
    if missing or truncated:
        detail = "; ".join(part for part in (
            f"{len(missing)} data file(s) missing: {', '.join(missing[:5])}" if missing else "",
            f"{len(truncated)} data file(s) truncated (size differs from the log's): {', '.join(truncated[:5])}" if truncated else "",
        ) if part)
        problems.append(Problem(name, version, "published", "files", detail,
                                "drop them from the table (FSCK), then roll back or rebuild (check --repair)",
                                tuple(missing + truncated)))
    elif expected_rows is not None and "num_records" in actions.column_names:
        rows = sum(n or 0 for n in actions.column("num_records").to_pylist())
        if rows != expected_rows and None not in actions.column("num_records").to_pylist():
            problems.append(Problem(name, version, "published", "rows", f"holds {rows} rows, the manifest recorded {expected_rows}",
                                    "roll back to an intact published version (check --repair)"))
    return problems


def _vector_problems(store: IndexStore, manifest: dict) -> list[Problem]:
    from graphwright.stages.embed.pinned_files import files_of, is_search_file

    recorded = manifest.get("vector_files") or {}
    problems = []
    for kind, relative in sorted(manifest["vector_indexes"].items()):
        search = is_search_file(relative)
        what = "search" if search else "vector"
        for path in files_of(store.files, relative):
            if not store.files.exists(path):
                detail = f"{kind} {what} file {path} is missing"
            elif path in recorded and health.file_digest(store.files, path) != recorded[path]:
                detail = f"{kind} {what} file {path} does not have the sha256 the manifest recorded (changed or corrupt)"
            else:
                continue
            # search files are built from several tables' history, not one table: an intact version is the way back
            repair = ("roll back to an intact published version (check --repair)" if search
                      else "rebuild it from the embeddings table (check --repair)")
            problems.append(Problem("vectors", manifest["version"], "published", what, detail, repair, (path, kind)))
    return problems


def check_version(store: IndexStore, manifest: dict) -> list[Problem]:
    problems = []
    for name in DATA_TABLES:
        pinned = manifest["table_versions"].get(name)
        if pinned is not None:
            problems += _table_problems(store, name, pinned, manifest["counts"].get(name))
    return problems + _vector_problems(store, manifest)


def check(store: IndexStore, version: int | None = None) -> dict:
    """The published version (the latest, or `version`) and every table's latest version."""
    problems: list[Problem] = []
    rows: list[dict] = []
    manifest_log = _broken_log(store, "index_manifest", None, "published") if store.exists("index_manifest") else []
    if manifest_log:
        problems += manifest_log
    else:
        try:
            rows = manifests(store)
        except health.StorageError as exc:
            problems.append(Problem("index_manifest", None, "published", "log", str(exc), "check --repair"))
    published = next((m for m in reversed(rows) if version in (None, m["version"])), None)
    if published is not None:
        problems += check_version(store, published)
    seen = {(p.table, p.version) for p in problems if p.what == "log"}
    for name in sorted(contracts.all_schemas()):
        if name != "index_manifest" and _has_log(store, name):
            problems += [p for p in _broken_log(store, name, None, "latest") if (p.table, p.version) not in seen]
    return {"index": str(store.root), "published_version": None if published is None else published["version"],
            "ok": not problems, "problems": [asdict(p) for p in problems]}


def _has_log(store: IndexStore, name: str) -> bool:
    try:
        return bool(health.log_entries(store.table_files(name)))
    except Exception:  # noqa: BLE001 - no folder: the table was never written
        return False
