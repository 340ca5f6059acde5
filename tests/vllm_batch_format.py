"""The shapes `vllm run-batch` reads and writes, as pydantic models, to check graphwright's batch
files by parsing (vLLM cannot run here).

Written after vLLM's own pydantic classes (vllm-project/vllm, Apache-2.0:
vllm/entrypoints/openai/run_batch.py — BatchRequestInput, BatchResponseData, BatchRequestOutput —
and vllm/entrypoints/openai/protocol.py — ChatCompletionRequest, ResponseFormat,
JsonSchemaResponseFormat, ErrorInfo, ErrorResponse), reduced to the fields graphwright writes
and reads. Stricter than vLLM on purpose: vLLM ignores unknown fields (it logs them), these
models refuse them, so a misspelled or unsupported field fails here instead of being dropped
silently on the GPU node. vLLM also aborts a whole run on a line its classes reject: every line
must pass.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CHAT = "/v1/chat/completions"
# what run_batch serves; a line with any other url becomes an error line (and /v1/completions is not served)
URLS = (CHAT, "/v1/embeddings")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Message(_Strict):
    role: Literal["system", "user", "assistant"]
    content: str


class JsonSchemaResponseFormat(_Strict):
    name: str
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")  # `schema` on the wire
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaResponseFormat | None = None


class ChatCompletionRequest(_Strict):
    messages: list[Message] = Field(min_length=1)
    model: str | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0)
    response_format: ResponseFormat | None = None


class BatchRequestInput(_Strict):
    custom_id: str
    method: Literal["POST"]
    url: Literal["/v1/chat/completions"]
    body: ChatCompletionRequest


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class BatchResponseData(_Open):
    status_code: int = 200
    request_id: str
    body: dict[str, Any] | None = None


class BatchRequestOutput(_Open):
    id: str
    custom_id: str
    response: BatchResponseData | None
    error: Any | None


class ErrorInfo(_Open):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(_Open):
    error: ErrorInfo
