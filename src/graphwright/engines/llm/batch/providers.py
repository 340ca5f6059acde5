"""Where batches go (`llm.batch.via`), behind one interface: upload a request file, create a
batch of it, retrieve it, find it by our batch id, cancel it, read a result file's lines.

- `api` (ApiBatches): the OpenAI Batch API, or any provider that offers it, at llm.base_url,
  through the openai client: the files API (purpose=batch), /v1/batches with our batch id in
  the batch's metadata, cursor-paginated lists (newest first).
- `files` (FileBatches): request files under INDEX/batches/files/ for `vllm run-batch` on a GPU
  node; `graphwright export-batch` copies them out and `import-batch` puts the results back
  beside them, which is when such a batch is complete.

Errors are ProviderError: `definitive` when the provider refused (a 4xx other than 408, 409
and 429): the request cannot have been acted on. Otherwise (no answer, a timeout, a 5xx) the
provider may have acted on it, and a batch create is reconciled by looking the batch up.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
METADATA_KEY = "graphwright_batch"  # our batch id, in the provider's batch metadata


class ProviderError(RuntimeError):
    def __init__(self, message: str, definitive: bool = False):
        super().__init__(message)
        self.definitive = definitive


@dataclass
class BatchInfo:
    id: str
    status: str
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: str | None = None  # why a batch failed (the provider's batch-level errors)
    metadata: dict = field(default_factory=dict)
    created_at: float = 0.0


def make_provider(config, files):
    """The provider `config.batch.via` names; `files`: the index's IndexFiles."""
    if config.batch.via == "files":
        return FileBatches(files)
    return ApiBatches(config)


class ApiBatches:
    via = "api"

    def __init__(self, config):
        from openai import OpenAI

        key = os.environ.get(config.api_key_env) if config.api_key_env else None
        self.where = config.base_url
        self.max_line_bytes = config.max_response_bytes
        # uploads, reads and lists are retried by the client; a create is never retried blindly
        # (a lost reply would become a second, paid batch): it is looked up instead
        self._client = OpenAI(api_key=key or "unused", base_url=config.base_url, timeout=config.timeout_s,
                              max_retries=max(0, config.max_attempts - 1))
        self._once = self._client.with_options(max_retries=0)

    def upload(self, name: str, data: bytes) -> str:
        return self._call(lambda: self._client.files.create(file=(name, data, "application/jsonl"), purpose="batch")).id

    def create(self, input_file_id: str, endpoint: str, window: str, metadata: dict) -> BatchInfo:
        return _info(self._call(lambda: self._once.batches.create(input_file_id=input_file_id, endpoint=endpoint,
                                                                  completion_window=window, metadata=metadata)))

    def retrieve(self, provider_id: str) -> BatchInfo:
        return _info(self._call(lambda: self._client.batches.retrieve(provider_id)))

    def find(self, batch_id: str, since: float) -> BatchInfo | None:
        """The batch whose metadata names `batch_id`, looking back to batches created at
        `since` (lists are newest first, so the look-up stops there)."""
        def look():
            for batch in self._client.batches.list(limit=100):  # the client follows `after` page by page
                if (batch.metadata or {}).get(METADATA_KEY) == batch_id:
                    return batch
                if batch.created_at < since:
                    return None
            return None

        found = self._call(look)
        return _info(found) if found is not None else None

    def cancel(self, provider_id: str) -> BatchInfo:
        return _info(self._call(lambda: self._client.batches.cancel(provider_id)))

    def lines(self, file_id: str) -> Iterator[bytes]:
        def read():
            with self._client.files.with_streaming_response.content(file_id) as response:
                return response.read()

        return iter(self._call(read).splitlines())

    @staticmethod
    def _call(fn):
        import openai

        try:
            return fn()
        except openai.APIStatusError as exc:
            definitive = 400 <= exc.status_code < 500 and exc.status_code not in (408, 409, 429)
            raise ProviderError(f"HTTP {exc.status_code}: {str(exc.message)[:300]}", definitive) from exc
        except openai.APIError as exc:  # no answer: connection errors and timeouts
            raise ProviderError(f"{type(exc).__name__}: {str(exc)[:300]}") from exc


def _info(batch) -> BatchInfo:
    errors = None
    if batch.errors and batch.errors.data:
        errors = "; ".join(f"{e.code or 'error'}: {e.message or ''}"[:300] for e in batch.errors.data[:5])
    return BatchInfo(id=batch.id, status=batch.status, input_file_id=batch.input_file_id, output_file_id=batch.output_file_id,
                     error_file_id=batch.error_file_id, errors=errors, metadata=dict(batch.metadata or {}),
                     created_at=float(batch.created_at))


FOLDER = "batches/files/"


class FileBatches:
    """Request files for an offline `vllm run-batch`, under INDEX/batches/files/: `<id>.jsonl`
    the requests, `<id>.batch.json` that it was submitted, `<id>.output.jsonl` the results (put
    there whole by import-batch), `<id>.cancelled` that it was cancelled."""

    via = "files"
    max_line_bytes = 64 << 20

    def __init__(self, files):
        self.files = files
        self.where = f"{files.location}/{FOLDER} (graphwright export-batch, vllm run-batch, graphwright import-batch)"

    def upload(self, name: str, data: bytes) -> str:
        self.files.write_bytes(FOLDER + name, data)
        return name

    def create(self, input_file_id: str, endpoint: str, window: str, metadata: dict) -> BatchInfo:
        batch_id = metadata[METADATA_KEY]
        record = {"input_file_id": input_file_id, "endpoint": endpoint, "metadata": metadata, "created_at": time.time()}
        self.files.write_bytes(f"{FOLDER}{batch_id}.batch.json", json.dumps(record).encode())
        return self.retrieve(batch_id)

    def retrieve(self, provider_id: str) -> BatchInfo:
        try:
            record = json.loads(self.files.read_bytes(f"{FOLDER}{provider_id}.batch.json"))
        except Exception as exc:  # noqa: BLE001 - any store error says the same: no such batch
            raise ProviderError(f"no batch {provider_id} under {FOLDER}: {type(exc).__name__}", definitive=True) from exc
        info = BatchInfo(id=provider_id, status="in_progress", input_file_id=record["input_file_id"],
                         metadata=record.get("metadata") or {}, created_at=record.get("created_at", 0.0))
        if self.files.exists(f"{FOLDER}{provider_id}.output.jsonl"):
            info.status, info.output_file_id = "completed", f"{provider_id}.output.jsonl"
        elif self.files.exists(f"{FOLDER}{provider_id}.cancelled"):
            info.status = "cancelled"
        return info

    def find(self, batch_id: str, since: float) -> BatchInfo | None:
        if not self.files.exists(f"{FOLDER}{batch_id}.batch.json"):
            return None
        return self.retrieve(batch_id)

    def cancel(self, provider_id: str) -> BatchInfo:
        self.files.write_bytes(f"{FOLDER}{provider_id}.cancelled", b"")
        return self.retrieve(provider_id)

    def lines(self, file_id: str) -> Iterator[bytes]:
        return iter(self.files.read_bytes(FOLDER + file_id).splitlines())

    def request_file(self, batch_id: str) -> bytes:
        return self.files.read_bytes(f"{FOLDER}{batch_id}.jsonl")

    def put_output(self, batch_id: str, data: bytes) -> None:
        self.files.write_bytes(f"{FOLDER}{batch_id}.output.jsonl", data)
