"""The index's LLM cache (`llm_cache`): every successful answer, keyed by LLMRequest.cache_key,
with the token counts it cost when it was made.

Lookups are made for many keys at once, once per stage (or per round of a stage, or per wave of
reports), never per batch, through a sorted index of the keys' codes kept beside a local
index's table (cache_keys): a binary search per key, then the rows read from the files that hold
a hit, so a miss costs nothing that grows with the cache. (A `key IN (...)` query per batch
scanned the whole key column every time: random sha256 keys defeat Parquet statistics, and the
total grew with the square of the corpus. A hash join per lookup, still what an object store's
index does, reads every key: 0.16-0.24 s for 712 misses at 1.2M cached answers.)

Writes are appends, never MERGEs: a run appends the answers it paid for; a query process
appends its own. Appends do not conflict with each other in Delta, so an index run and a
serving process never fail each other here. Two processes asking the same question at once may
both store it: a key can appear twice, and any of its rows answers it."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from graphwright.engines.llm import cache_keys
from graphwright.engines.llm.interface import LLMRequest, LLMResponse
from graphwright.storage.delta import IndexStore

ANSWER_COLUMNS = ["key", "response", "prompt_tokens", "completion_tokens"]
ANSWER_SCHEMA = pa.schema([("key", pa.string()), ("response", pa.string()), ("prompt_tokens", pa.int64()),
                           ("completion_tokens", pa.int64())])


def lookup(store: IndexStore, keys: Iterable[str] | pa.Array, stats: dict | None = None) -> pa.Table:
    """The cached answers among `keys`: one row per key found (key, response, prompt_tokens,
    completion_tokens), in no particular order. `stats`, when given, gains the seconds spent and the keys asked."""
    import time

    started = time.perf_counter()
    wanted = pc.unique(pa.array(keys, pa.string()) if not isinstance(keys, (pa.Array, pa.ChunkedArray)) else keys)
    wanted = wanted.combine_chunks() if isinstance(wanted, pa.ChunkedArray) else wanted
    found = ANSWER_SCHEMA.empty_table()
    if len(wanted) and store.exists("llm_cache"):
        hit = False if store.is_remote else _indexed(store, wanted, stats)
        if hit is False:  # an object store's, or a file compacted and removed after it was listed
            hit = _joined(store, wanted)
        if hit is not None:
            found = hit.cast(ANSWER_SCHEMA)
    if stats is not None:
        stats["lookup_s"] = stats.get("lookup_s", 0.0) + time.perf_counter() - started
        stats["lookup_keys"] = stats.get("lookup_keys", 0) + len(wanted)
    return found


def _indexed(store: IndexStore, wanted: pa.Array, stats: dict | None):
    """The answers through the key index (cache_keys); None for none, False where the files
    it names are not all there any more."""
    try:
        return cache_keys.answers(store, cache_keys.key_index(store), wanted, ANSWER_COLUMNS)
    except FileNotFoundError:
        if stats is not None:
            stats["lookup_fallbacks"] = stats.get("lookup_fallbacks", 0) + 1
        return False


def _joined(store: IndexStore, wanted: pa.Array) -> pa.Table | None:
    """lookup's answers by a hash join against every key of the cache (what the key index saves)."""
    version = store.version("llm_cache")  # both passes read one snapshot
    hits = pc.unique(store.semi_join("llm_cache", "key", wanted, ["key"], version=version).column("key").combine_chunks())
    if not len(hits):
        return None
    return cache_keys.first_rows(store.semi_join("llm_cache", "key", hits, ANSWER_COLUMNS, version=version))


def cached_answers(store: IndexStore, keys: list[str], stats: dict | None = None) -> dict[str, dict]:
    """lookup() as {key: row}, for callers with few keys."""
    return {r["key"]: r for r in lookup(store, keys, stats).to_pylist()} if keys else {}


def response_of(row: dict) -> LLMResponse:
    return LLMResponse(text=row["response"], prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
                       attempts=0)


def complete_through_cache(store: IndexStore, engine: Callable[[], object], requests: list[LLMRequest],
                           model: str, stats: dict | None = None) -> list[tuple[str, LLMResponse, bool]]:
    """(key, response, cache_hit) per request, answering from one cache lookup; identical
    requests are asked once. `engine` is called only if some request misses (starting an engine
    takes seconds to minutes)."""
    keys = [r.cache_key(model) for r in requests]
    cached = cached_answers(store, keys, stats)
    first_of: dict[str, int] = {}
    misses = [first_of.setdefault(k, i) for i, k in enumerate(keys) if k not in cached and k not in first_of]
    fresh = dict(zip(misses, engine().complete([requests[i] for i in misses]))) if misses else {}
    out = []
    for i, key in enumerate(keys):
        if key in cached:
            out.append((key, response_of(cached[key]), True))
        else:
            out.append((key, fresh[first_of[key]], False))
    return out


class CallLog:
    """Writes a run's (or a query process's) LLM calls: new answers appended to `llm_cache`, and
    one `llm_calls` row per (stage, key), appended. A key is written once per log however many
    batches or commits see it, so appends never repeat a primary key."""

    def __init__(self, store: IndexStore, llm, run_id: str):
        self.store, self.llm, self.run_id = store, llm, run_id
        self._cached: set[str] = set()
        self._recorded: set[tuple[str, str]] = set()
        self.commit_s = 0.0

    def mark_cached(self, keys) -> None:
        """Keys whose answers were appended to llm_cache elsewhere in this run (a batch
        collection): their calls are recorded without caching them again."""
        self._cached.update(keys)

    def recorded_keys(self, stage: str) -> set[str]:
        return {k for s, k in self._recorded if s == stage}

    def record_answers(self, answers: list[tuple[str, LLMRequest, LLMResponse]]) -> None:
        """Only the new answers, into llm_cache (queries keep no call records)."""
        self.record("", [{"key": k, "item_id": "", "prompt_version": r.prompt_version, "response": resp.text, "cache_hit": False,
                          "prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens,
                          "latency_s": resp.latency_s, "attempts": resp.attempts, "error": None} for k, r, resp in answers],
                    write_calls=False)

    def record(self, stage: str, calls: list[dict], *, write_calls: bool = True) -> list[dict]:
        """`calls`: dicts with key, item_id, prompt_version, response, cache_hit, prompt_tokens,
        completion_tokens, latency_s, attempts, error, and optionally cache (False: a partial
        answer, used but not cached) and batch_id (when a batch collected in this run answered it).
        Failed and unusable answers (error set), and those marked cache=False, are not cached: the
        next run asks again. Returns the llm_calls rows written."""
        import time

        if not calls:
            return []
        started = time.perf_counter()
        fresh: dict[str, dict] = {}
        for r in calls:
            if (not r["cache_hit"] and r["error"] is None and r["response"] is not None and r.get("cache", True) is not False
                    and r["key"] not in self._cached):
                fresh.setdefault(r["key"], r)
        if fresh:
            self.store.append("llm_cache", pa.Table.from_pylist([
                {"key": k, "model": self.llm.model, "prompt_version": r["prompt_version"], "response": r["response"],
                 "prompt_tokens": r["prompt_tokens"], "completion_tokens": r["completion_tokens"], "run_id": self.run_id}
                for k, r in fresh.items()]))
            self._cached.update(fresh)
        records = {}
        for r in calls if write_calls else ():  # identical inputs share a request: one record per key
            if (stage, r["key"]) in self._recorded:
                continue
            records.setdefault(r["key"], {
                "run_id": self.run_id, "stage": stage, "key": r["key"], "item_id": r["item_id"], "engine": self.llm.engine,
                "model": self.llm.model, "cache_hit": r["cache_hit"], "status": "ok" if r["error"] is None else "failed",
                "prompt_tokens": r["prompt_tokens"], "completion_tokens": r["completion_tokens"],
                "latency_s": r["latency_s"], "attempts": r["attempts"], "error": r["error"], "batch_id": r.get("batch_id"),
            })
        if records:
            self.store.append("llm_calls", pa.Table.from_pylist(list(records.values())))
            self._recorded.update((stage, k) for k in records)
        self.commit_s += time.perf_counter() - started
        return list(records.values())


def record_calls(store: IndexStore, llm, run_id: str, stage: str, calls: list[dict]) -> list[dict]:
    """CallLog.record for a caller that writes once (a query's lazy reports)."""
    return CallLog(store, llm, run_id).record(stage, calls)
