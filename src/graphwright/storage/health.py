"""Whether an index's stored state can be trusted: the Delta log of a table up to a version,
its data files, and the vector files. IndexStore verifies a table's log the first time it opens
each version (an emptied commit file is otherwise read as a commit that changed nothing, and a
table silently served without its rows); `graphwright check` (ops.check) verifies everything.

Storage failures surface as StorageError: one line naming the table or file, the version, the
reason (the first line of delta-rs' message, never its Rust backtrace) and the way out.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading

LOG = "_delta_log"
COMMIT = re.compile(r"^(\d{20})\.json$")
CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d+\.\d+)?\.parquet$")
ACTIONS = {"add", "remove", "metaData", "protocol", "commitInfo", "txn", "cdc", "domainMetadata", "checkpointMetadata",
           "sidecar"}


class StorageError(RuntimeError):
    """A table or file of an index cannot be read (the message says which, why, and what to run)."""

    def __init__(self, message: str, *, table: str | None = None, version: int | None = None):
        super().__init__(message)
        self.table, self.version = table, version


class DataFileMissing(StorageError, FileNotFoundError):
    """A data file a table's log lists is not there (a caller that can do without it, such as the
    LLM cache's key index, catches FileNotFoundError)."""


_NOT_FOUND = re.compile(r"Object at location (\S+) not found")
_TRUNCATED = re.compile(r"for file (\S+?): .*(?:EOF|out of specification|Invalid Parquet|file size|corrupt|Requested range)", re.IGNORECASE)


def first_line(exc: BaseException | str) -> str:
    """The first line of an error (delta-rs appends a Rust backtrace to some), with a data file
    that is gone or truncated named as such."""
    text = str(exc).strip()
    if found := _NOT_FOUND.search(text):
        return f"its data file {found.group(1).rsplit('/', 1)[-1]} is missing"
    if found := _TRUNCATED.search(text):
        return f"its data file {found.group(1).rsplit('/', 1)[-1]} is truncated or corrupt"
    return (text.splitlines() or [type(exc).__name__])[0].strip()


def table_error(root, table: str, version: int | None, reason) -> StorageError:
    at = f" at Delta version {version}" if version is not None else ""
    return StorageError(f"table {table}{at} of {root} cannot be read: {first_line(reason)}. "
                        f"Run `graphwright check --index {root}` to see what is broken and how to repair it",
                        table=table, version=version)


def data_file_error(root, table: str, path: str, exc: BaseException) -> StorageError:
    """table_error for one of the table's data files that could not be read."""
    from obstore.exceptions import NotFoundError  # obstore's errors are not OSErrors

    name, said = path.rsplit("/", 1)[-1], first_line(exc)
    missing = isinstance(exc, (FileNotFoundError, NotFoundError)) or said.endswith(" is missing")
    reason = said if said.startswith("its data file") else f"its data file {name} is {'missing' if missing else 'unreadable'} ({said})"
    error = table_error(root, table, None, reason)
    return DataFileMissing(str(error), table=table) if missing else error


def log_entries(table_store) -> dict[str, int]:
    """File name -> size of everything in a table's _delta_log (one listing)."""
    import obstore

    return {meta["path"].rsplit("/", 1)[-1]: meta["size"] for batch in obstore.list(table_store, f"{LOG}/") for meta in batch}


def log_versions(entries: dict[str, int]) -> tuple[dict[int, int], list[int]]:
    """({commit version: file size}, checkpoint versions) of a table's log listing."""
    commits = {int(m.group(1)): size for name, size in entries.items() if (m := COMMIT.match(name))}
    return commits, [int(m.group(1)) for name in entries if (m := CHECKPOINT.match(name))]


def log_problems(entries: dict[str, int], version: int | None, read=None) -> list[tuple[int, str]]:
    """(commit version, what is wrong) for the commits a reader of `version` (None: the latest)
    replays: those after the newest checkpoint at or before it. `read(name) -> bytes` also parses
    each commit (without it only presence and emptiness are checked)."""
    commits, checkpoints = log_versions(entries)
    if not commits:
        return []
    version = max(commits) if version is None else version
    checkpoints = [v for v in checkpoints if v <= version]
    first = max(checkpoints) + 1 if checkpoints else 0
    problems = []
    for v in range(first, version + 1):
        name = f"{v:020d}.json"
        if v not in commits:
            problems.append((v, f"commit file {LOG}/{name} is missing"))
        elif commits[v] == 0:
            problems.append((v, f"commit file {LOG}/{name} is empty"))
        elif read is not None:
            reason = commit_problem(read(f"{LOG}/{name}"))
            if reason:
                problems.append((v, f"commit file {LOG}/{name} {reason}"))
    return problems


def commit_problem(raw: bytes) -> str | None:
    """Why a commit file is not a readable Delta commit (each line one JSON action), or None."""
    lines = [line for line in raw.split(b"\n") if line.strip()]
    if not lines:
        return "holds no actions"
    for number, line in enumerate(lines, 1):
        try:
            action = json.loads(line)
        except ValueError:
            return f"is truncated or corrupt (line {number} is not JSON)"
        if not isinstance(action, dict) or not set(action) & ACTIONS:
            return f"is corrupt (line {number} is not a Delta action)"
    return None


PLACEHOLDER = "graphwright-repair"  # the operation of a commit that stands in for a lost one


def placeholder_commit(reason: str) -> bytes:
    """A commit that changes nothing, written in place of a lost one so that version numbers are
    never reused (a published version pinning it must not read other rows under its number)."""
    import time

    info = {"timestamp": int(time.time() * 1000), "operation": PLACEHOLDER, "operationParameters": {"reason": reason}}
    return json.dumps({"commitInfo": info}).encode() + b"\n"


def placeholder_reason(raw: bytes) -> str | None:
    """Why a commit is a placeholder for a lost one, or None for a real commit."""
    if PLACEHOLDER.encode() not in raw:
        return None
    try:
        info = json.loads(raw.split(b"\n", 1)[0]).get("commitInfo") or {}
    except ValueError:
        return None
    return (info.get("operationParameters") or {}).get("reason", "lost") if info.get("operation") == PLACEHOLDER else None


class LogVerifier:
    """Verifies each (table, version) once per process, before a reader opens it."""

    def __init__(self):
        self._verified: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def verify(self, root, table: str, path: str, table_store, version: int, pinned: bool) -> None:
        """`pinned`: the version was asked for (a published version's); it must not be a
        placeholder for a lost commit."""
        import obstore

        key = (path, version, pinned)
        if key in self._verified:
            return
        entries = log_entries(table_store)
        problems = log_problems(entries, version)
        if problems:
            v, reason = problems[0]
            raise table_error(root, table, version, f"{reason} (needed to read version {version})")
        name = f"{LOG}/{version:020d}.json"
        if pinned and name.rsplit("/", 1)[-1] in entries:
            lost = placeholder_reason(bytes(obstore.get(table_store, name).bytes()))
            if lost:
                raise table_error(root, table, version, f"this version was lost ({lost}) and `graphwright check --repair` "
                                                        "left a placeholder: a published version that pins it cannot be served")
        with self._lock:
            self._verified.add(key)


VERIFIER = LogVerifier()


def file_digest(files, relative: str) -> str:
    """sha256 of a file of the index (local or on an object store), read in pieces."""
    digest = hashlib.sha256()
    with files.local(relative) as path, open(path, "rb") as fh:
        for block in iter(lambda: fh.read(8 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
