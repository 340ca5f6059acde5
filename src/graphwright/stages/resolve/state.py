"""Resolve's memory between runs: the mentions and assertions as integer codes, kept per Delta
data file, so that an update codes only the files added since the last run.

A Delta data file never changes once written, so its coded form never does either: a segment per
data file (its rows of the current extractor, as codes into the run's dictionaries, with each
row's place in the file), written once and dropped when the file leaves the table. Dictionaries
of names, chunks, documents and types only grow (codes stay valid), a segment of new values per
run. `state.json`, put last and atomically, lists the segments and dictionary parts that are
current, so a run killed halfway leaves the previous state whole (its extra files are unlisted
and removed later). What resolve derived from the rows (each key's entity, each entity's name and
degree, scored pairs) is kept beside them, so that the next run can tell which rows it must
rebuild (stages.resolve.incremental).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.stages.resolve.codes import Dictionary, read_codes
from graphwright.storage.changes import commit_actions
from graphwright.storage.patch import data_files, read_data_file
from graphwright.text.names import normalize_name, resolution_key
from graphwright.util.threads import side_by_side

FORMAT = 1
ROOT = "state/resolve"
MAX_DICTIONARY_PARTS = 16
CODED = {"mentions": (("name", "type", "chunk_id", "doc_id"), "count"),
         "assertions": (("source", "target", "chunk_id", "doc_id"), "weight")}
DICTIONARY_OF = {"name": "names", "source": "names", "target": "names", "type": "types", "chunk_id": "chunks", "doc_id": "docs"}


@dataclass
class Rows:
    """Coded rows of one table: column -> array (the coded columns, the number, the description's
    hash and length, and `file` and `row`: the data file's code and the row's place in it)."""

    arrays: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.arrays["file"])

    @staticmethod
    def concat(parts: list[dict[str, np.ndarray]], columns: list[str]) -> Rows:
        """One array per column; each part's column is let go once copied (the parts of a
        million-chunk index are 2.7 GB: holding them beside the result doubled resolve's peak)."""
        return Rows({c: np.concatenate([p.pop(c) for p in parts]) if parts else np.empty(0, np.int64) for c in columns})


@dataclass
class ResolveState:
    fingerprint: str
    dictionaries: dict[str, Dictionary]
    segments: dict[str, dict[str, str]]  # table -> data file path -> segment file
    dictionary_parts: dict[str, list[str]] = field(default_factory=dict)
    derived: dict = field(default_factory=dict)  # the previous run's results (see incremental)
    outputs: dict[str, int | None] = field(default_factory=dict)  # output table versions the state produced

    @classmethod
    def empty(cls, fingerprint: str, method: str) -> ResolveState:
        to_key = resolution_key if method == "linked" else normalize_name
        return cls(fingerprint, {"names": Dictionary(to_key), "chunks": Dictionary(), "docs": Dictionary(),
                                 "types": Dictionary()}, {"mentions": {}, "assertions": {}})


def fingerprint(extractor: str, method: str) -> str:
    """What the coded rows depend on: the extractor whose rows they are and the key function."""
    return ids.stable_id("resolve-state", FORMAT, extractor, method)


def peek(files, fingerprint_: str) -> dict | None:
    """state.json of the state the last run left for this fingerprint, or None."""
    try:
        meta = json.loads(files.read_bytes(f"{ROOT}/state.json"))
    except Exception:  # noqa: BLE001 - no state (or a damaged one): resolve from the tables
        return None
    return meta if meta.get("format") == FORMAT and meta.get("fingerprint") == fingerprint_ else None


def load(files, fingerprint_: str, method: str) -> ResolveState | None:
    """The state the last run left, or None (none yet, another extractor or method, unreadable)."""
    meta = peek(files, fingerprint_)
    if meta is None:
        return None
    state = ResolveState.empty(fingerprint_, method)
    for kind, parts in meta["dictionary_parts"].items():
        tables = [files.read_table(part) for part in parts]
        values = pa.concat_arrays([pa.array([], pa.string())] + [c.cast(pa.string()) for t in tables for c in t.column("value").chunks])
        keys = [k for t in tables if "key" in t.column_names for k in t.column("key").to_pylist()]
        state.dictionaries[kind] = Dictionary(state.dictionaries[kind].key, values, keys)  # kept in Arrow (codes.Dictionary)
    state.dictionary_parts = meta["dictionary_parts"]
    state.segments = meta["segments"]
    state.outputs = meta.get("outputs", {})
    state.derived = {name: files.read_table(path) for name, path in meta.get("derived", {}).items()}
    return state


def load_segment(files, relative: str) -> dict[str, np.ndarray]:
    return files.read_arrays(relative)


def code_file(store, table: str, path: str, extractor: str, state: ResolveState) -> dict[str, np.ndarray]:
    """One data file's rows of `extractor` as codes (new values join the dictionaries)."""
    coded, number = CODED[table]
    rows = read_data_file(store, table, path, [*coded, number, "description", "extractor"])
    mine = pc.equal(rows.column("extractor"), extractor)
    place = np.flatnonzero(np.asarray(pc.fill_null(mine, False)))
    rows = rows.filter(pc.fill_null(mine, False))
    arrays = read_codes(lambda columns: rows.select(columns).to_batches(max_chunksize=65_536),
                        {c: state.dictionaries[DICTIONARY_OF[c]] for c in coded}, number)
    arrays["row"] = place.astype(np.int32)
    return arrays


@dataclass
class Advance:
    """The rows now current, and the rows the update removed and added (before cancelling out
    rows a rewritten file kept): `removed` and `added` index nothing, they are rows themselves."""

    current: Rows
    removed: Rows
    added: Rows
    files: list[str]  # data file of each file code in `current`
    new_segments: dict[str, dict[str, np.ndarray]]  # data file path -> its coded rows, not yet saved


def code_new_files(store, state: ResolveState, table: str, extractor: str,
                   since: int | None = None) -> tuple[list[str], dict[str, dict[str, np.ndarray]]]:
    """(the table's current data files, the coded rows of those the state has no segment for).
    New values join the state's dictionaries, so the tables are coded one after the other: their
    codes are then the same whatever else runs. `since`: the table's version the state was made
    from; the files a deletion has moved rows into since are made from the segments of the files
    the rows came from (moved_segments), not coded again."""
    current_files = [path for path, _ in data_files(store, table)]
    had = state.segments.get(table, {})
    moved = moved_segments(store, state, table, since, {p for p in current_files if p not in had})
    return current_files, {p: moved[p] if p in moved else code_file(store, table, p, extractor, state)
                           for p in current_files if p not in had}


def moved_segments(store, state: ResolveState, table: str, since: int | None, wanted: set[str]) -> dict[str, dict[str, np.ndarray]]:
    """The segments of the `wanted` files that a deletion (storage.patch.delete_matching) filled
    with the rows it kept from the files it rewrote, made from those files' segments: the rows
    left out dropped and each kept row's place counted again. Their codes are the ones coding
    the file would give (its values are all in the dictionaries already). At 1.2M chunks a 0.1%
    update's deletions moved 321k mentions and 281k assertions, whose coding (descriptions
    hashed again) took 0.96 s. A file whose commit the log no longer holds, or one of whose
    sources the state has no segment for, is not here (it is coded)."""
    now = store.version(table)
    if since is None or now is None or not wanted:
        return {}
    had, made = state.segments.get(table, {}), {}
    for version in range(since + 1, now + 1):
        commit = commit_actions(store, table, version)
        if commit is None:
            break
        for path, sources in (commit.moved_from or {}).items():
            if not _accounted(commit, path, sources) or not all(source in made or source in had for source, _, _ in sources):
                continue
            segments = [made[source] if source in made else load_segment(store.files, had[source]) for source, _, _ in sources]
            if all(not len(seg["row"]) or int(seg["row"].max()) < rows for seg, (_, rows, _) in zip(segments, sources)):
                made[path] = _kept_segment(segments, sources)
    return {path: segment for path, segment in made.items() if path in wanted}


def _accounted(commit, path: str, sources) -> bool:
    """Whether a commit's account of a moved file adds up: its sources are files the commit
    removed, the positions left out are sorted and inside each one, and the rows kept are the
    file's (else the file is coded, as any file is)."""
    try:
        kept = 0
        for source, rows, left_out in sources:
            gone = np.asarray(left_out, np.int64)
            if source not in commit.removed or len(gone) > rows or (len(gone) and (gone[0] < 0 or gone[-1] >= rows or np.any(gone[1:] <= gone[:-1]))):
                return False
            kept += rows - len(gone)
        return commit.records.get(path) == kept
    except (TypeError, ValueError):  # not the shape delete_matching writes
        return False


def _kept_segment(segments: list[dict[str, np.ndarray]], sources: list) -> dict[str, np.ndarray]:
    """One segment for the rows of `segments` (of the files `sources` names, in order) that were
    not left out, placed as the file that holds them in that order places them."""
    parts, offset = [], 0
    for segment, (_, rows, left_out) in zip(segments, sources):
        gone = np.asarray(left_out, np.int64)
        row = segment["row"].astype(np.int64)
        before = np.searchsorted(gone, row)  # the rows left out ahead of each row
        kept = gone[np.minimum(before, len(gone) - 1)] != row if len(gone) else np.ones(len(row), bool)
        parts.append({**{c: v[kept] for c, v in segment.items() if c != "row"},
                      "row": (offset + row[kept] - before[kept]).astype(np.int32)})
        offset += int(rows) - len(gone)
    return {c: np.concatenate([p[c] for p in parts]) for c in segments[0]}


def advance_both(store, files, state: ResolveState, extractor: str, since: dict[str, int] | None = None) -> dict[str, Advance]:
    """advance() of the mentions and the assertions: coded in turn, then each table's segments
    loaded and joined in a thread of its own (mostly page faults and copies, off the GIL: at 1.2M
    chunks, 18M rows in 0.3-0.5 s side by side against 0.4-1.9 s one after the other). `since`:
    each table's version the state was made from (code_new_files)."""
    since = since or {}
    coded = {t: code_new_files(store, state, t, extractor, since.get(t)) for t in ("mentions", "assertions")}
    adv_m, adv_a = side_by_side(lambda: advance(store, files, state, "mentions", extractor, coded["mentions"]),
                                lambda: advance(store, files, state, "assertions", extractor, coded["assertions"]), "advance")
    return {"mentions": adv_m, "assertions": adv_a}


def advance(store, files, state: ResolveState, table: str, extractor: str,
            coded: tuple[list[str], dict[str, dict[str, np.ndarray]]] | None = None) -> Advance:
    """Bring one table's coded rows to its current version: segments of files that left are
    dropped (their rows are the removed ones), files that joined are coded (the added ones);
    `coded`: code_new_files' answer, when already made."""
    current_files, new_segments = coded or code_new_files(store, state, table, extractor)
    had = state.segments.get(table, {})
    gone = [p for p in had if p not in set(current_files)]
    parts, columns = [], None
    for code, path in enumerate(current_files):
        seg = new_segments[path] if path in new_segments else load_segment(files, had[path])
        seg = dict(seg, file=np.full(len(seg["row"]), code, np.int32))
        columns = columns or list(seg)
        parts.append(seg)
    columns = columns or _columns(table)
    removed = [load_segment(files, had[p]) for p in gone]
    removed = [dict(r, file=np.full(len(r["row"]), -1, np.int32)) for r in removed]
    added = Rows.concat([dict(parts[i]) for i, p in enumerate(current_files) if p in new_segments], columns)
    return Advance(Rows.concat(parts, columns), Rows.concat(removed, columns), added, current_files, new_segments)


def _columns(table: str) -> list[str]:
    coded, number = CODED[table]
    return [*coded, number, "description", "length", "row", "file"]


def save(files, state: ResolveState, run_id: str, advances: dict[str, Advance], dictionary_sizes: dict[str, int],
         derived: dict[str, pa.Table], outputs: dict[str, int | None]) -> None:
    """Write the new segments, the dictionaries' new values and the derived tables, then
    state.json; remove what no longer belongs to the state."""
    old_files = set(_listed(state))
    segments = {}
    for table, adv in advances.items():
        had = state.segments.get(table, {})
        segments[table] = {}
        for path in adv.files:
            if path in adv.new_segments or had[path].endswith(".npz"):  # an .npz segment is rewritten once, as Arrow
                relative = f"{ROOT}/segments/{table}/{ids.stable_id('segment', path, run_id)}.arrow"
                arrays = adv.new_segments[path] if path in adv.new_segments else load_segment(files, had[path])
                files.write_arrays(relative, **{k: v for k, v in arrays.items() if k != "file"})
                segments[table][path] = relative
            else:
                segments[table][path] = had[path]
    parts = {k: list(v) for k, v in state.dictionary_parts.items()}
    for kind, d in state.dictionaries.items():
        start = dictionary_sizes.get(kind, 0)
        if len(parts.get(kind, [])) >= MAX_DICTIONARY_PARTS:  # one part per run would pile up: fold them
            parts[kind], start = [], 0
        if len(d) > start:
            columns = {"value": d.arrow(start)}
            if d.key is not None:
                columns["key"] = pa.array(d._keys[start:], pa.string())
            relative = f"{ROOT}/dictionaries/{kind}-{run_id}.arrow"
            files.write_table(relative, pa.table(columns))
            parts.setdefault(kind, []).append(relative)
    derived_paths = {}
    for name, table in derived.items():
        relative = f"{ROOT}/derived/{name}-{run_id}.arrow"
        files.write_table(relative, table)
        derived_paths[name] = relative
    meta = {"format": FORMAT, "fingerprint": state.fingerprint, "dictionary_parts": parts, "segments": segments,
            "derived": derived_paths, "outputs": outputs}
    files.write_bytes(f"{ROOT}/state.json", json.dumps(meta).encode())
    keep = set(_listed_meta(meta))
    for relative in old_files | set(files.list(ROOT)):
        if relative not in keep and relative != f"{ROOT}/state.json":
            files.delete(relative)


def forget(files) -> None:
    """Drop the state: the next resolve codes the tables again, with fresh dictionaries."""
    files.delete(f"{ROOT}/state.json")


def _listed(state: ResolveState) -> list[str]:
    return [p for seg in state.segments.values() for p in seg.values()] + [p for v in state.dictionary_parts.values() for p in v]


def _listed_meta(meta: dict) -> list[str]:
    return ([p for seg in meta["segments"].values() for p in seg.values()]
            + [p for v in meta["dictionary_parts"].values() for p in v] + list(meta["derived"].values()))
