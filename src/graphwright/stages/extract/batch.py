"""LLM extraction through a batch engine (llm.engine openai-batch), the driver's part: every
round the cache cannot answer goes out as batches for all chunks at once, round after round (a
gleaning round's request holds the previous round's answer, so round r+1 is sent once round r's
answers are in). The workers then replay every round from what the driver hands them and make
no call: a request whose batch refused it comes to them as its failure (`Answered`).

An answer is checked as the workers will read it before it is cached (a reply they cannot use
is not cached, so the next run asks again, as with a synchronous engine), and a gleaning round
is not asked for after an answer they would not read on from."""

from __future__ import annotations

import pyarrow as pa

from graphwright.engines.llm.batch.files import NOT_CACHED
from graphwright.engines.llm.interface import LLMRequest, LLMResponse
from graphwright.stages.extract.parse import ParseError, parse_extraction
from graphwright.stages.extract.prompts import system_prompt
from graphwright.stages.extract.requests import WORK_SCHEMA, extraction_request, next_history


class Answered:
    """The engine of extraction workers after the driver's batches: a request they ask about is
    one that failed, and they get its failure. Picklable (it goes to Ray actors)."""

    def __init__(self, failures: dict[str, LLMResponse], model: str):
        self.failures, self.model = failures, model

    def complete(self, requests: list[LLMRequest]) -> list[LLMResponse]:
        out = []
        for request in requests:
            failure = self.failures.get(request.cache_key(self.model))
            out.append(LLMResponse(text=failure.text, prompt_tokens=failure.prompt_tokens,
                                   completion_tokens=failure.completion_tokens, error=failure.error) if failure
                       else LLMResponse(text=None, error="not sent: no batch answer for it (a bug: please report it)"))
        return out


def usable(answer: str, text: str, config, trusted: bool = True) -> str | None:
    """Why the extractor could not read `answer` for a chunk of `text`, or None; NOT_CACHED for
    a reply that needed repairs, unless `trusted` (the chunk's last reply needed them too): the
    workers use it as partial and the next run asks once more, as on the synchronous path."""
    notes: dict = {}
    try:
        parse_extraction(answer, config.entity_types, text, config, notes)
    except ParseError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - as the worker's last line of defence would
        return f"could not read the reply: {type(exc).__name__}: {str(exc)[:200]}"
    return NOT_CACHED if notes and not trusted else None


def answer_in_batches(run, work: pa.Table) -> tuple[pa.Table, Answered]:
    """`work` (requests.WORK_SCHEMA, as planned from the cache) with every round answered through
    the run's batch engine, and the engine the workers get. Raises WaitingOnBatch."""
    cfg = run.config
    engine = run.llm.engine()
    system = system_prompt(cfg.extract.entity_types)
    rows = work.to_pylist()
    failures: dict[str, LLMResponse] = {}
    for round_ in range(1 + cfg.extract.gleanings):
        asking, requests = [], []
        for row in rows:
            cached = row["cached"]
            if len(cached) != round_ or (cached and usable(cached[-1]["response"], row["text"], cfg.extract) is not None):
                continue
            history: tuple = (("user", row["text"]),)
            for answer in cached:
                history = next_history(history, answer["response"])
            asking.append(row)
            requests.append(extraction_request(system, history, cfg.llm))
        if not requests:
            continue
        responses = engine.complete(requests, check=lambda i, answer: usable(answer, asking[i]["text"], cfg.extract,
                                                                         asking[i]["retried"]))
        for row, request, response in zip(asking, requests, responses):
            key = request.cache_key(cfg.llm.model)
            if response.ok:
                row["cached"].append({"key": key, "response": response.text, "prompt_tokens": response.prompt_tokens,
                                      "completion_tokens": response.completion_tokens})
            else:
                failures[key] = response
    return pa.Table.from_pylist(rows, schema=WORK_SCHEMA), Answered(failures, cfg.llm.model)
