"""Batch request files and their results, in the OpenAI Batch API's format, which `vllm run-batch`
reads and writes too.

A request line is `{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}`: the
custom_id is the request's llm_cache key, the body the one the `openai` engine sends. vLLM
aborts a whole run on one line its pydantic classes reject, so every line is built here and
nowhere else.

Results come back as lines `{"id", "custom_id", "response": {"status_code", "request_id",
"body"} | null, "error": ... | null}`: OpenAI puts successes in the output file and failures in
the error file (an HTTP error as a response with status_code >= 400, or `error: {code,
message}` with code batch_expired, batch_cancelled or request_timeout); vLLM puts both in one
file, its errors an `{"error": {...}}` object or a plain string. Lines come in any order and are
joined on custom_id. They are hostile input like any reply: a line that is not JSON, names no
request of the batch or repeats one is skipped, and its request counts as unanswered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from graphwright.engines.llm.interface import LLMRequest, LLMResponse
from graphwright.engines.llm.openai_engine import RETRY_STATUS, chat_body, chat_response
from graphwright.text.safe import clean_text

ENDPOINT = "/v1/chat/completions"
# the error codes of requests a batch did not get to; asked again in a new batch
NOT_RUN = frozenset({"batch_expired", "batch_cancelled", "request_timeout"})


@dataclass
class RequestFile:
    keys: list[str]
    data: bytes
    estimated_prompt_tokens: int
    max_completion_tokens: int


NOT_CACHED = "usable now, not cached"  # what a request check returns for an answer to use but not store


@dataclass
class Outcome:
    """A request's result in a batch: an answer, or an error; `retry` when a new batch may answer
    it (the batch did not get to it, or the provider failed transiently)."""

    response: LLMResponse
    retry: bool = False
    cache: bool = True  # False: usable now, but not stored (a reply that needed repairs is asked once more)


def request_line(key: str, request: LLMRequest, config) -> bytes:
    body = chat_body(request, config)
    body["messages"] = [{**m, "content": clean_text(m["content"])} for m in body["messages"]]  # no lone surrogates
    line = {"custom_id": key, "method": "POST", "url": ENDPOINT, "body": body}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def estimated_tokens(request: LLMRequest) -> int:
    """Prompt tokens before the provider counts them: characters / 4."""
    return sum(len(content) for _, content in request.messages) // 4


def split_requests(lines: list[tuple[str, bytes, int, int]], max_requests: int, max_bytes: int) -> tuple[list[RequestFile], list[str]]:
    """(key, line, estimated prompt tokens, max_tokens) in order -> request files within the
    provider's limits, and the keys of lines that alone exceed `max_bytes`."""
    files: list[RequestFile] = []
    too_big: list[str] = []
    keys: list[str] = []
    parts: list[bytes] = []
    size = tokens = completion = 0
    for key, line, estimate, max_tokens in lines:
        if len(line) > max_bytes:
            too_big.append(key)
            continue
        if keys and (len(keys) >= max_requests or size + len(line) > max_bytes):
            files.append(RequestFile(keys, b"".join(parts), tokens, completion))
            keys, parts, size, tokens, completion = [], [], 0, 0, 0
        keys.append(key)
        parts.append(line)
        size, tokens, completion = size + len(line), tokens + estimate, completion + max_tokens
    if keys:
        files.append(RequestFile(keys, b"".join(parts), tokens, completion))
    return files, too_big


def read_results(lines: Iterable[bytes | str], members, max_line_bytes: int) -> tuple[dict[str, Outcome], int]:
    """{custom_id: outcome} for the lines naming a member of the batch (the first line per
    request), and how many lines were skipped."""
    out: dict[str, Outcome] = {}
    skipped = 0
    for raw in lines:
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "replace")
        if not raw.strip():
            continue
        if len(raw) > max_line_bytes:
            skipped += 1
            continue
        try:
            line = json.loads(raw)
        except (ValueError, RecursionError):
            skipped += 1
            continue
        key = line.get("custom_id") if isinstance(line, dict) else None
        if not isinstance(key, str) or key not in members or key in out:
            skipped += 1
            continue
        out[key] = outcome_of(line)
    return out, skipped


def outcome_of(line: dict) -> Outcome:
    """One result line (OpenAI's or vLLM's shape) as an outcome."""
    response, error = line.get("response"), line.get("error")
    status = response.get("status_code") if isinstance(response, dict) else None
    body = response.get("body") if isinstance(response, dict) else None
    if error is None and status == 200 and isinstance(body, dict):
        try:
            answer = chat_response(body)
        except (ValueError, TypeError, AttributeError) as exc:  # retried like a garbled synchronous reply
            return Outcome(LLMResponse(text=None, error=f"malformed response body: {str(exc)[:200]}"), retry=True)
        answer.meta["request_id"] = response.get("request_id") if isinstance(response.get("request_id"), str) else None
        return Outcome(answer)
    code, message = _error_of(error, body)
    if isinstance(status, int) and not isinstance(status, bool) and status != 200:
        reason = f"HTTP {status}" + (f" ({code})" if code else "") + f": {message}"
    else:
        reason = f"{code or 'error'}: {message}"
    retry = code in NOT_RUN or (isinstance(status, int) and status in RETRY_STATUS)
    return Outcome(LLMResponse(text=None, error=f"batch request failed: {reason}"[:500]), retry=retry)


def _error_of(error, body) -> tuple[str | None, str]:
    """(code, message) from a line's error (OpenAI {code, message}; vLLM {"error": {...}} or a
    string) or from an HTTP error's body ({"error": {message, type, code}})."""
    for source in (error, body):
        if isinstance(source, str):
            return None, clean_text(source)[:300]
        if isinstance(source, dict):
            inner = source.get("error") if isinstance(source.get("error"), dict) else source
            code = inner.get("code")
            message = inner.get("message")
            if code is not None or message is not None:
                return (str(code) if code is not None else None), clean_text(str(message))[:300]
    return None, "no answer and no reason given"
