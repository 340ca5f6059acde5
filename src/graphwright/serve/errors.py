"""How the HTTP API fails: every error is a JSON body `{"detail": ...}` a person can act on.
A storage fault is 503 naming the table or file (the index needs a repair, not the client a
change); an unexpected error is 500 naming its type, never a bare one. Bodies are written with
ASCII escapes, so a hostile request (a lone surrogate such as "\\ud800" in its JSON) cannot
break the response that reports it."""

# No `from __future__ import annotations`: FastAPI evaluates handler annotations.
import json
import logging
import math
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from graphwright.storage.health import StorageError, first_line

log = logging.getLogger("graphwright.serve")


class SafeJSONResponse(JSONResponse):
    """JSON with non-ASCII characters escaped: a lone surrogate cannot be encoded as UTF-8 and
    had turned a 422 into a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
        except ValueError:  # a non-finite number, e.g. a request body `Infinity` echoed in a 422
            return json.dumps(_finite(content), ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities as strings, which JSON has no numbers for."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def storage_problem(exc: StorageError, root: Path) -> str:
    """The message without the server's paths: `<root>/town` becomes `town`."""
    return str(exc).replace(f"{root}/", "").replace(str(root), "the index root")


def install(app: FastAPI, root: Path) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return SafeJSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        return SafeJSONResponse({"detail": jsonable_encoder(exc.errors())}, status_code=422)

    @app.exception_handler(StorageError)
    async def storage_fault(request: Request, exc: StorageError):
        log.error("storage fault answering %s: %s", request.url.path, exc)
        return SafeJSONResponse({"detail": storage_problem(exc, root)}, status_code=503, headers={"Retry-After": "60"})

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        log.exception("unexpected error answering %s", request.url.path)
        return SafeJSONResponse({"detail": f"internal error: {type(exc).__name__}: {first_line(exc)}"}, status_code=500)
