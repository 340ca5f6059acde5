"""Extraction with an LLM, the workers' part: each chunk's first round is the chunk alone,
each gleaning round asks what was missed. Rounds the driver found in the cache
(requests.plan_extraction) are replayed; the rest go to the engine, one batch per round. A
chunk whose request or answer still fails after retries comes back with status 'failed' and the
reason; nothing is dropped silently. The driver writes the new answers and the call records."""

from __future__ import annotations

import json

import pyarrow as pa

from graphwright.config import ExtractConfig, LLMConfig
from graphwright.engines.llm import make_llm
from graphwright.engines.llm.interface import LLMResponse
from graphwright.stages.extract.parse import ParseError, parse_extraction
from graphwright.stages.extract.prompts import PROMPT_VERSION, system_prompt
from graphwright.stages.extract.requests import extraction_request, next_history
from graphwright.stages.extract.rows import EXTRACTION_BATCH_SCHEMA


def merge_relationships(relationships: list[dict]) -> list[dict]:
    """One assertion per (source, target): models repeat a relationship (small ones loop, and
    gleaning rounds restate); keep the strongest weight and every distinct description."""
    merged: dict[tuple[str, str], dict] = {}
    for r in relationships:
        key = (r["source"], r["target"])
        if key not in merged:
            merged[key] = dict(r)
            continue
        m = merged[key]
        m["weight"] = max(m["weight"], r["weight"])
        if r["description"] and r["description"] not in m["description"]:
            m["description"] = (m["description"] + " " + r["description"]).strip()
    return list(merged.values())


class LLMExtractor:
    """Batch function over requests.WORK_SCHEMA rows. `engine`: the session's engine when this
    runs on the driver; workers build their own client from `llm` (once per actor)."""

    def __init__(self, config: ExtractConfig, llm: LLMConfig, key: str, engine=None, ledger: tuple[str, str] | None = None):
        """`ledger`: (index root, run id) to write intent records of the requests sent to."""
        self.config, self.llm_config = config, llm
        self.key = key  # extractors.extractor_key: what the completion markers name
        self._engine = engine
        self.ledger = None
        if ledger is not None:
            from graphwright.engines.llm.ledger import CallLedger

            self.ledger = CallLedger(*ledger)
        self.system = system_prompt(config.entity_types)

    @property
    def engine(self):
        if self._engine is None:  # built on the first request the cache could not answer
            self._engine = make_llm(self.llm_config)
        return self._engine

    def __call__(self, chunks: pa.Table) -> pa.Table:
        ids = list(zip(chunks.column("chunk_id").to_pylist(), chunks.column("doc_id").to_pylist()))
        texts = chunks.column("text").to_pylist()
        cached = chunks.column("cached").to_pylist() if "cached" in chunks.column_names else [[] for _ in texts]
        retried = chunks.column("retried").to_pylist() if "retried" in chunks.column_names else [False] * len(texts)
        histories = [(("user", text),) for text in texts]
        results = [{"chunk_id": c, "doc_id": d, "extractor": self.key, "status": "ok", "error": None,
                    "mentions": {}, "assertions": [], "calls": [], "notes": {}} for c, d in ids]
        active = list(range(len(results)))
        for round_ in range(1 + self.config.gleanings):
            if not active:
                break
            requests = [extraction_request(self.system, histories[i], self.llm_config) for i in active]
            asked = [n for n, i in enumerate(active) if round_ >= len(cached[i] or ())]
            if asked and self.ledger is not None:
                self.ledger.intend([requests[n].cache_key(self.llm_config.model) for n in asked])
            fresh = dict(zip(asked, self.engine.complete([requests[n] for n in asked]))) if asked else {}
            still = []
            for n, i in enumerate(active):
                if n in fresh:
                    key, resp, hit = requests[n].cache_key(self.llm_config.model), fresh[n], False
                else:
                    c = cached[i][round_]
                    key, hit = c["key"], True
                    resp = LLMResponse(text=c["response"], prompt_tokens=c["prompt_tokens"],
                                       completion_tokens=c["completion_tokens"], attempts=0)
                if self._take(results[i], round_, key, resp, hit, texts[i]):
                    histories[i] = next_history(histories[i], resp.text)
                    still.append(i)
            active = still
        for res, trusted in zip(results, retried):
            if res["status"] == "ok" and res["notes"] and not trusted:
                # a reply that needed repairs is used now and asked once more next run (not
                # cached), so that a broken answer is not final; the second one is trusted
                res["status"] = "partial"
                for call in res["calls"]:
                    call["cache"] = False
            ok = res["status"] in ("ok", "partial")
            res["mentions"] = sorted(res["mentions"].values(), key=lambda m: m["name"]) if ok else []
            res["assertions"] = merge_relationships(res["assertions"]) if ok else []
            res["notes"] = json.dumps(res["notes"], sort_keys=True) if res["notes"] else None
        return pa.Table.from_pylist(results, schema=EXTRACTION_BATCH_SCHEMA)

    def _take(self, res: dict, round_: int, key: str, resp: LLMResponse, hit: bool, text: str) -> bool:
        """Add one round's answer to the chunk's result; whether a gleaning round may follow. A
        reply that breaks the reader in a way no rule foresaw fails its chunk, not the run."""
        try:
            return self._read(res, round_, key, resp, hit, text)
        except Exception as exc:  # noqa: BLE001 - the last line of defence for one chunk
            res["status"], res["error"] = "failed", f"could not read the reply: {type(exc).__name__}: {str(exc)[:200]}"
            res["mentions"], res["assertions"] = {}, []
            if res["calls"]:
                res["calls"][-1]["error"] = res["error"]
            return False

    def _read(self, res: dict, round_: int, key: str, resp: LLMResponse, hit: bool, text: str) -> bool:
        res["calls"].append({
            "key": key, "prompt_version": PROMPT_VERSION, "response": resp.text, "cache_hit": hit,
            "prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens,
            "latency_s": resp.latency_s, "attempts": resp.attempts, "error": resp.error, "cache": True,
        })
        if not resp.ok:
            if round_ == 0:  # a failed gleaning round keeps what the first round found
                res["status"], res["error"] = "failed", f"LLM request failed: {resp.error}"
            return False
        notes: dict = {}
        try:
            entities, relationships = parse_extraction(resp.text, self.config.entity_types, text, self.config, notes)
        except ParseError as exc:
            if round_ == 0:
                res["status"], res["error"] = "failed", f"unusable answer: {exc}"
            res["calls"][-1]["error"] = str(exc)  # not cached: the next run asks again
            return False
        for e in entities:
            prior = res["mentions"].setdefault(e["name"], {**e, "count": 0})
            prior["count"] += e["count"]
        res["assertions"].extend(relationships)
        for k, v in notes.items():  # what validation dropped from the reply, kept on the marker
            res["notes"][k] = res["notes"].get(k, 0) + v
        return True
