"""The LLM engine interface: a request (messages, schema, sampling) and its response. An engine
takes a list of requests and returns one response per request, never raising for a single
request's failure: the response carries the error instead."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LLMRequest:
    messages: tuple[tuple[str, str], ...]  # (role, content) pairs
    json_schema: dict | None = None  # constrain the output to this JSON schema when the backend can
    max_tokens: int = 1024
    temperature: float = 0.0
    prompt_version: str = ""
    # each model's key, made once: a report's request is keyed for its cache lookup and again when
    # its answer is recorded (a report prompt's JSON and SHA-256 cost about 0.5 ms)
    _keys: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def cache_key(self, model: str) -> str:
        """Identifies a call: model, prompt version, sampling parameters and the input."""
        key = self._keys.get(model)
        if key is None:
            key = self._keys[model] = self._key(model)
        return key

    def _key(self, model: str) -> str:
        payload = json.dumps(
            {"model": model, "prompt_version": self.prompt_version, "max_tokens": self.max_tokens,
             "temperature": self.temperature, "schema": self.json_schema, "messages": self.messages},
            sort_keys=True, ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class LLMResponse:
    text: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = 1
    error: str | None = None
    meta: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None
