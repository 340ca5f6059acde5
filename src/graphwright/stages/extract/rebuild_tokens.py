"""What extracting every current chunk from scratch would cost, in tokens (the cost report's
full-rebuild estimate): for each chunk, the token counts of the calls that extracted it (gleaning
rounds included), from the latest run that extracted it, each prompt counted once (with its
largest counts, should two rows of one prompt differ). The counts are the calls' own (llm_calls: a cache hit records what the call cost when it was made), so the
cache is not read.

The calls counted are kept between runs (`state/extract/rebuild-calls.arrow`, with the
`llm_calls` version they describe), so that a run reads only the calls appended since, from the
Delta log, instead of every extract call of the index (at 1.2M chunks 1.9 s instead of 2.8 s).
They are kept with their chunk and prompt as 64-bit codes (id_codes), not as the ids' text:
at 1.2M chunks the state is 71 MB instead of 163 MB, and an update's filters and joins compare
numbers (a 0.1% update's load, update and save of the 1.2M calls: 0.09 s, where the text took 0.83 s).
The sum is kept with them, with the chunks table's version the calls were counted for: a run
takes the chunks deleted since from that table's log too, and recounts only the prompts whose
calls were added or dropped, so neither every chunk id nor every call is filtered, grouped and
summed again (at 1.2M chunks about 0.6 s of each update).
Where the log cannot say what was appended (a commit gone, or one that removed rows other than
by compaction), the calls are read whole, as they are the first time; where it cannot say which
chunks went, the kept calls are filtered by every chunk id and summed again."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from graphwright.ids import id_codes
from graphwright.storage.changes import changes_since, commit_actions
from graphwright.storage.patch import read_data_file

FORMAT = 2  # 2: item and key as codes. The sum and the chunks version are optional keys
STATE = "state/extract/rebuild-calls.arrow"
SCHEMA = pa.schema([("item_id", pa.int64()), ("key", pa.int64()), ("run_id", pa.string()),
                    ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64())])
COLUMNS = SCHEMA.names
COUNTED = "stage = 'extract' AND status = 'ok'"


def _coded(calls: pa.Table) -> pa.Table:
    """Calls read from llm_calls (ids as text) in SCHEMA, the calls for no item left out."""
    calls = calls.filter(pc.is_valid(calls.column("item_id")))
    return pa.table([id_codes(calls.column("item_id")), id_codes(calls.column("key")), *(calls.column(c) for c in COLUMNS[2:])],
                    schema=SCHEMA) if calls.num_rows else SCHEMA.empty_table()


def full_rebuild_tokens(store, chunk_ids=None) -> int:
    """The estimate for the current chunks (`chunk_ids`: the chunks table's ids, all of them, read
    when not given and needed); keeps the calls it counted, and their sum, for the next run."""
    chunks_now = store.version("chunks")
    kept, meta = _load(store)
    new = _appended_since(store, meta["llm_calls"]) if kept is not None else None
    changes = changes_since(store, "chunks", meta.get("chunks"), "chunk_id", ["chunk_id"]) if new is not None else None
    if changes is not None and meta.get("total") is not None:
        calls, total = _updated(kept, meta["total"], new, id_codes(changes.deleted))
    else:
        if chunk_ids is None:
            chunk_ids = store.read("chunks", columns=["chunk_id"]).column("chunk_id")
        calls = counted_calls(store, id_codes(chunk_ids), kept, new)
        total = _total(calls)
    _save(store, calls, total, chunks_now)
    return total


def _total(calls: pa.Table) -> int:
    if not calls.num_rows:
        return 0
    once = calls.group_by("key").aggregate([("prompt_tokens", "max"), ("completion_tokens", "max")])  # a prompt asked for several chunks or runs: once
    return int((pc.sum(once.column("prompt_tokens_max")).as_py() or 0) + (pc.sum(once.column("completion_tokens_max")).as_py() or 0))


def _updated(kept: pa.Table, total: int, new: pa.Table, gone: pa.Array) -> tuple[pa.Table, int]:
    """The counted calls and their sum after `new` calls were appended and the chunks `gone` were
    deleted: only the prompts of the rows dropped or added are summed again. A call appended since
    is for a chunk that existed when it was made, after the kept calls' chunks version: current
    unless deleted since."""
    calls, dropped, replaced = _replaced(kept, new, gone)
    keys = pc.unique(pa.concat_arrays([dropped.column("key").combine_chunks(), replaced.column("key").combine_chunks()]))
    before = _total(kept.filter(pc.is_in(kept.column("key"), value_set=keys)))
    after = _total(calls.filter(pc.is_in(calls.column("key"), value_set=keys)))
    return calls, total - before + after


def _replaced(kept: pa.Table, new: pa.Table, gone: pa.Array) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(the counted calls, the kept rows dropped, the rows that replaced some) once the calls of
    the items `gone` are dropped and each item with `new` calls keeps those of its latest run."""
    new = new.filter(pc.invert(pc.is_in(new.column("item_id"), value_set=gone)))
    touched = pc.unique(new.column("item_id").combine_chunks())
    drop = pc.is_in(kept.column("item_id"), value_set=pa.concat_arrays([gone, touched]))
    dropped = kept.filter(drop)
    replaced = _latest(pa.concat_tables([dropped.filter(pc.is_in(dropped.column("item_id"), value_set=touched)), new]))
    return pa.concat_tables([kept.filter(pc.invert(drop)), replaced]), dropped, replaced


def counted_calls(store, chunk_codes: pa.Array, kept: pa.Table | None = None, new: pa.Table | None = None) -> pa.Table:
    """Per current chunk (`chunk_codes`: the chunk ids' id_codes), its extract calls that
    succeeded, of the latest run that made some (`kept`: the calls counted last time, `new`:
    those appended since; all read without them)."""
    if kept is None or new is None:
        calls = _coded(store.read("llm_calls", columns=COLUMNS, where=COUNTED))
        return _latest(calls.filter(pc.is_in(calls.column("item_id"), value_set=chunk_codes)))
    items = pa.concat_arrays([kept.column("item_id").combine_chunks(), new.column("item_id").combine_chunks()])
    gone = pc.unique(items.filter(pc.invert(pc.is_in(items, value_set=chunk_codes))))  # the items no chunk is now
    return _replaced(kept, new, gone)[0]


def _latest(calls: pa.Table) -> pa.Table:
    """The rows of each item's latest run."""
    if not calls.num_rows:
        return calls
    latest = calls.group_by("item_id").aggregate([("run_id", "max")])
    latest = pa.table({"item_id": latest.column("item_id"), "run_id": latest.column("run_id_max")})
    return calls.join(latest, ["item_id", "run_id"], join_type="inner").select(COLUMNS)


def _appended_since(store, since: int) -> pa.Table | None:
    """The counted calls the commits after version `since` appended; None when the log cannot say."""
    now = store.version("llm_calls")
    if now is None or since > now:
        return None
    parts = [SCHEMA.empty_table()]
    for version in range(since + 1, now + 1):
        commit = commit_actions(store, "llm_calls", version)
        if commit is None or (commit.removed and (commit.added or not commit.moved)):
            return None  # gone from the log, or rows removed (a compaction only moves them)
        for path in commit.added:
            rows = read_data_file(store, "llm_calls", path, [*COLUMNS, "stage", "status"])
            counted = pc.and_(pc.equal(rows.column("stage"), "extract"), pc.equal(rows.column("status"), "ok"))
            parts.append(_coded(rows.filter(pc.fill_null(counted, False)).select(COLUMNS)))
    return pa.concat_tables(parts)


def _load(store) -> tuple[pa.Table | None, dict]:
    try:
        table = store.files.read_table(STATE)
    except Exception:  # noqa: BLE001 - none yet, or unreadable: the calls are read whole
        return None, {}
    meta = json.loads((table.schema.metadata or {}).get(b"graphwright", b"{}"))
    if meta.get("format") != FORMAT or meta.get("llm_calls") is None:
        return None, {}
    return table.cast(SCHEMA), meta


def _save(store, calls: pa.Table, total: int, chunks: int | None) -> None:
    meta = {"format": FORMAT, "llm_calls": store.version("llm_calls"), "chunks": chunks, "total": total}
    table = calls.select(COLUMNS).cast(SCHEMA).replace_schema_metadata({"graphwright": json.dumps(meta)})
    store.files.write_table(STATE, table)
