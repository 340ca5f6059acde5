"""The `openai` engine: any OpenAI-compatible /v1/chat/completions endpoint.

Retries with exponential backoff and jitter on connection errors, timeouts, 408, 409, 429 and
5xx (honouring Retry-After); never on other 4xx. Concurrency is a thread pool of
`llm.concurrency`; `llm.requests_per_second` caps the request rate across it.

Requests go through one urllib3 connection pool per client (thread-safe, `llm.concurrency`
connections kept alive), not through `requests`, which is built on it: against an instant
local server an extraction request cost this engine 0.40-0.44 ms of CPU, and 0.80 ms through
a requests Session per thread (bench/http_client.py). At the thousands of requests a second a
batch server answers, that overhead, under the GIL, is what limits one process.

Backends differ in how they take a JSON schema (`llm.response_format`):
- `json_schema`: OpenAI / vLLM, {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
- `json_object`: llama.cpp server, {"type": "json_object", "schema": ...} (it answers HTTP 500 to
  the json_schema form)
- `none`: no response_format; the prompt alone asks for JSON.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import urllib3
from urllib3.exceptions import HTTPError as TransportError

from graphwright.engines.llm.interface import LLMRequest, LLMResponse
from graphwright.text.safe import clean_text

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class RateLimiter:
    def __init__(self, per_second: float | None):
        self.interval = 1.0 / per_second if per_second else 0.0
        self.lock = threading.Lock()
        self.next_at = 0.0

    def wait(self) -> None:
        if not self.interval:
            return
        with self.lock:
            now = time.monotonic()
            at = max(now, self.next_at)
            self.next_at = at + self.interval
        if at > now:
            time.sleep(at - now)


def _read_bounded(resp: urllib3.BaseHTTPResponse, limit: int) -> bytes | None:
    """The body, decoded (gzip, deflate), or None (the connection dropped) when it is longer than
    `limit` bytes, declared or decoded: a reply is read into memory only up to a bound."""
    declared = resp.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > limit:
        resp.close()
        return None
    parts, size = [], 0
    for part in resp.stream(1 << 16):
        size += len(part)
        if size > limit:
            resp.close()
            return None
        parts.append(part)
    return b"".join(parts)


def connections(base_url: str, size: int, timeout_s: float) -> urllib3.PoolManager:
    """A pool keeping `size` connections alive to `base_url`'s host, configured from the
    environment as `requests` reads it: the proxy HTTP(S)_PROXY or ALL_PROXY name for the host
    unless NO_PROXY excludes it (CIDR ranges too; credentials in the proxy's URL), the CA bundle
    (file or directory) REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE name, else certifi's. urllib3 retries
    nothing itself (the client's policy decides what is tried again) but follows up to 5
    redirects, a 307 or 308 with the same POST."""
    from requests import utils

    url = urllib3.util.parse_url(base_url)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"llm.base_url (or embed.base_url) {base_url!r} is not an http:// or https:// URL with a host")
    policy = urllib3.Retry(total=None, connect=0, read=0, status=0, other=0, redirect=5, raise_on_redirect=False,
                           respect_retry_after_header=False)
    options = {"maxsize": max(1, size), "retries": policy, "timeout": urllib3.Timeout(connect=timeout_s, read=timeout_s)}
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or utils.DEFAULT_CA_BUNDLE_PATH
    options["ca_cert_dir" if os.path.isdir(bundle) else "ca_certs"] = bundle
    proxy = utils.select_proxy(base_url, utils.get_environ_proxies(base_url))
    if not proxy:
        return urllib3.PoolManager(**options)
    proxy = utils.prepend_scheme_if_needed(proxy, "http")
    user, password = utils.get_auth_from_url(proxy)
    headers = urllib3.make_headers(proxy_basic_auth=f"{user}:{password}") if user else None
    if proxy.lower().startswith("socks"):
        from urllib3.contrib.socks import SOCKSProxyManager  # needs PySocks, as requests did

        return SOCKSProxyManager(proxy, username=user or None, password=password or None, **options)
    return urllib3.ProxyManager(proxy, proxy_headers=headers, **options)


class OpenAIClient:
    """POSTs JSON to an OpenAI-compatible server with the retry, backoff, rate and timeout policy
    above; shared by chat completions and embeddings."""

    def __init__(self, config):
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        api_key = os.environ.get(config.api_key_env) if config.api_key_env else None
        self.headers = {"Content-Type": "application/json", "User-Agent": "graphwright", "Accept-Encoding": "gzip, deflate"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.limiter = RateLimiter(config.requests_per_second)
        self.http = connections(self.base_url, config.concurrency, config.timeout_s)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(float(retry_after), self.config.max_backoff_s)
            except ValueError:
                pass
        return min(self.config.max_backoff_s, self.config.backoff_s * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)

    def post(self, path: str, body: dict, parse):
        """(parse(response JSON), attempts, error). A body that `parse` cannot read is retried
        like a 5xx (often a proxy hiccup); other 4xx are not retried."""
        error = "no attempt made"
        payload = json.dumps(body).encode()
        for attempt in range(1, self.config.max_attempts + 1):
            self.limiter.wait()
            retry_after = None
            try:
                resp = self.http.request("POST", self.base_url + path, body=payload, headers=self.headers, preload_content=False)
                try:
                    content = _read_bounded(resp, self.config.max_response_bytes)
                finally:
                    resp.release_conn()
            except (TransportError, OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, garbled
                error = f"{type(exc).__name__}: {exc}"
            else:
                if content is None:
                    error = f"a reply of more than {self.config.max_response_bytes} bytes (llm.max_response_bytes)"
                elif resp.status == 200:
                    try:
                        return parse(json.loads(content)), attempt, None
                    except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
                        error = f"malformed response body: {type(exc).__name__}: {str(exc)[:200]}"
                else:
                    error = f"HTTP {resp.status}: {content[:200].decode('utf-8', 'replace')}"
                    if resp.status not in RETRY_STATUS:
                        return None, attempt, error
                    retry_after = resp.headers.get("Retry-After")
            if attempt < self.config.max_attempts:
                time.sleep(self._backoff(attempt, retry_after))
        return None, self.config.max_attempts, error

    def map(self, fn, items: list) -> list:
        """fn over items with at most `concurrency` in flight, results in order."""
        if len(items) <= 1 or self.config.concurrency <= 1:
            return [fn(x) for x in items]
        return list(self._threads().map(fn, items))

    def close(self) -> None:
        """Stop the pool's threads and close the connections (a later map or post opens new ones)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        self.http.clear()

    def _threads(self) -> ThreadPoolExecutor:
        # One pool of threads for the client's life, like its connections: a batch neither starts
        # threads nor opens connections that an earlier batch had.
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.config.concurrency, thread_name_prefix="llm-http")
            return self._pool


def _count(usage: dict, name: str) -> int:
    value = usage.get(name)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 2**62 else 0


def chat_response(data) -> LLMResponse:
    """An OpenAI chat.completion object as a response; ValueError naming what is wrong with any
    other shape (the client then retries it like a garbled body, and gives up with the reason)."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the reply has no choices")
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if content is None:
        raise ValueError(f"the reply has no message content (finish_reason {choices[0].get('finish_reason')!r})")
    if not isinstance(content, str):
        raise ValueError(f"the reply's content is {type(content).__name__}, not text")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    reason = choices[0].get("finish_reason")
    return LLMResponse(text=clean_text(content), prompt_tokens=_count(usage, "prompt_tokens"),
                       completion_tokens=_count(usage, "completion_tokens"),
                       meta={"finish_reason": reason if isinstance(reason, str) else None})


def chat_body(request: LLMRequest, config) -> dict:
    """The /v1/chat/completions body of `request` for `config`'s model and backend (also each
    line's body in a batch request file)."""
    body = {
        "model": config.model,
        "messages": [{"role": r, "content": c} for r, c in request.messages],
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
    }
    schema, fmt = request.json_schema, config.response_format
    if schema is not None and fmt == "json_schema":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}
    elif schema is not None and fmt == "json_object":
        body["response_format"] = {"type": "json_object", "schema": schema}
    return body


class OpenAIEngine:
    def __init__(self, config):
        self.config = config
        self.model = config.model
        self.client = OpenAIClient(config)

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    def _body(self, request: LLMRequest) -> dict:
        return chat_body(request, self.config)

    def complete_one(self, request: LLMRequest) -> LLMResponse:
        started = time.perf_counter()

        def parse(data) -> LLMResponse:
            return chat_response(data)

        response, attempts, error = self.client.post("/chat/completions", self._body(request), parse)
        response = response or LLMResponse(text=None, error=error)
        response.latency_s, response.attempts = time.perf_counter() - started, attempts
        return response

    def complete(self, requests_: list[LLMRequest]) -> list[LLMResponse]:
        return self.client.map(self.complete_one, requests_)

    def close(self) -> None:
        self.client.close()
