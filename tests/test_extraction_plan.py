"""The driver's part of LLM extraction (stages.extract.requests.plan_extraction): each distinct
text is sent once, and the rows sent are the chunks' own Arrow buffers, not a copy (at 1.2M
chunks the copy was 1.5 GB of the driver's peak)."""

import pyarrow as pa
import pytest

from graphwright.config import ExtractConfig, LLMConfig
from graphwright.stages.extract.requests import plan_extraction
from graphwright.storage.delta import IndexStore


def chunks(texts):
    return pa.table({"chunk_id": [f"c{i}" for i in range(len(texts))], "doc_id": ["d"] * len(texts), "text": texts})


def test_distinct_texts_are_sent_from_the_chunks_own_buffers(tmp_path):
    table = chunks([f"Text number {i}." for i in range(50)])
    plan = plan_extraction(IndexStore(tmp_path / "index"), table, ExtractConfig(), LLMConfig(model="m"))
    assert plan.work.select(["chunk_id", "doc_id", "text"]).to_pylist() == table.to_pylist() and not plan.copies
    sent, given = plan.work.column("text").chunks, table.column("text").chunks
    assert [c.buffers()[2].address for c in sent] == [c.buffers()[2].address for c in given]


def test_a_repeated_text_is_sent_once_and_copied(tmp_path):
    table = chunks(["Alpha.", "Beta.", "Alpha.", "Gamma.", "Beta."])
    plan = plan_extraction(IndexStore(tmp_path / "index"), table, ExtractConfig(), LLMConfig(model="m"))
    assert plan.work.column("chunk_id").to_pylist() == ["c0", "c1", "c3"]
    assert plan.copies == {"c0": [("c2", "d")], "c1": [("c4", "d")]} and plan.stats["duplicates"] == 2


def _answers(table, llm, size=8, rounds=1, answered=None) -> list[dict]:
    """llm_cache rows: answers of the first `rounds` rounds for the chunks at `answered` (all by
    default); prompt_tokens holds the chunk's position, completion_tokens the round."""
    import hashlib

    from graphwright.stages.extract.prompts import system_prompt
    from graphwright.stages.extract.requests import extraction_request, next_history

    system = system_prompt(ExtractConfig().entity_types)
    rows = []
    for i, text in enumerate(table.column("text").to_pylist()):
        if answered is not None and i not in answered:
            continue
        history = (("user", text),)
        for r in range(rounds):
            key = extraction_request(system, history, llm).cache_key(llm.model)
            answer = f"{hashlib.sha256(key.encode()).hexdigest()[:8]}:r{r}:" + "x" * size
            rows.append({"key": key, "model": llm.model, "prompt_version": "v", "response": answer,
                         "prompt_tokens": i, "completion_tokens": r, "run_id": "r"})
            history = next_history(history, answer)
    return rows


def _cache(store, rows: list[dict]) -> None:
    for start in range(0, len(rows), 4096):  # several commits, as the cache is written
        store.append("llm_cache", pa.Table.from_pylist(rows[start:start + 4096]))


def test_cached_answers_of_every_round_come_back_in_order_across_slices(tmp_path, monkeypatch):
    from graphwright.stages.extract import requests

    monkeypatch.setattr(requests, "SLICE", 7)  # rows of one chunk's answers across slice edges
    store, llm = IndexStore(tmp_path / "index"), LLMConfig(model="m")
    table = chunks([f"Text number {i}." for i in range(40)] + ["Text number 3."])
    answered = {i for i in range(40) if i % 3}
    # round 2 of chunk 5 is missing: its list stops after round 1
    rows = [r for r in _answers(table, llm, rounds=2, answered=answered)
            if not (r["prompt_tokens"] == 5 and r["completion_tokens"] == 1)]
    _cache(store, rows)
    plan = plan_extraction(store, table, ExtractConfig(gleanings=2), llm)
    got = dict(zip(plan.work.column("chunk_id").to_pylist(), plan.work.column("cached").to_pylist()))
    assert len(got) == 40 and plan.copies == {"c3": [("c40", "d")]}
    for i in range(40):
        want = [{k: r[k] for k in ("key", "response", "prompt_tokens", "completion_tokens")}
                for r in rows if r["prompt_tokens"] == i]
        assert got[f"c{i}"] == sorted(want, key=lambda r: r["completion_tokens"]), i
    assert plan.stats["cached_rounds"] == sum(len(v) for v in got.values()) == 2 * len(answered) - 1


@pytest.mark.slow
def test_a_plan_whose_cached_answers_pass_2_gb_keeps_them_in_arrow(tmp_path):
    """A rerun whose every answer is cached (1.2M chunks: 2.5 GB of answers): the plan's `cached`
    column holds them all, in chunks under the 2 GB a string array can address (pa.array splits
    the column; this guards it, as the cache lookup's own 2 GB case once failed)."""
    store, llm = IndexStore(tmp_path / "index"), LLMConfig(model="m")
    n, size = 36_000, 64 << 10
    table = chunks([f"Text number {i}." for i in range(n)])
    _cache(store, _answers(table, llm, size=size))
    plan = plan_extraction(store, table, ExtractConfig(), llm)
    cached = plan.work.column("cached")
    assert len(cached) == n and all(len(c.values.field("response").buffers()[2] or b"") < 2**31 for c in cached.chunks)
    first, last = cached[0].as_py(), cached[n - 1].as_py()
    assert first[0]["prompt_tokens"] == 0 and last[0]["prompt_tokens"] == n - 1 and len(last[0]["response"]) > size


def test_one_lookup_in_the_chunk_ids_finds_the_stale_rows_and_the_chunks_to_extract():
    import random

    import pyarrow as pa

    from graphwright.stages.extract.todo import _against_chunks

    rng = random.Random(5)
    chunk_ids = [f"c{n:05d}" for n in rng.sample(range(20_000), 5_000)]
    held = [sorted({f"c{rng.randrange(20_000):05d}" for _ in range(4_000)}) for _ in range(3)] + [[]]
    done = [c for c in chunk_ids if rng.random() < 0.9] + ["c99999"]  # a marker of a chunk that went
    gone, todo = _against_chunks(pa.array(chunk_ids), [pa.array(h, pa.string()) for h in held], pa.array(done))
    assert gone == [sorted(set(h) - set(chunk_ids)) for h in held]
    assert todo == sorted(set(chunk_ids) - set(done))
