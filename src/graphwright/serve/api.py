"""HTTP API over the indexes under one root directory (`graphwright serve`).

Every route but /health needs an API key sent as a bearer token. Index names are single path
components under the root, and a name whose resolved path (symlinks followed) leaves the root is
treated as absent. Queries are blocking (embedding, faiss, Delta reads), so they run in worker
threads, at most `max_concurrency` at once; the event loop only waits on them. Loaded searchers
(vector indexes, embedder) are kept per index and published version.
"""

# No `from __future__ import annotations` here: FastAPI evaluates route and dependency
# annotations, and the bearer dependency's names a local of _bearer_check.
import hashlib
import hmac
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Depends, FastAPI, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from graphwright.query import query
from graphwright.query.searcher import MODES, Searcher
from graphwright.serve.errors import SafeJSONResponse
from graphwright.serve.errors import install as install_error_handlers
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import (
    NoPublishedVersion,
    load_manifest,
    manifests,
    version_rows,
)

API_KEYS_ENV = "GRAPHWRIGHT_API_KEYS"
log = logging.getLogger("graphwright.serve")
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def load_api_keys(keys_file: Path | None = None, environ: dict[str, str] | None = None) -> list[str]:
    """Keys from GRAPHWRIGHT_API_KEYS (comma-separated) and from `keys_file` (one per line; blank
    lines and lines starting with # are skipped)."""
    environ = os.environ if environ is None else environ
    keys = [k.strip() for k in environ.get(API_KEYS_ENV, "").split(",")]
    if keys_file is not None:
        for line in Path(keys_file).read_text().splitlines():
            if not line.strip().startswith("#"):
                keys.append(line.strip())
    return [k for k in keys if k]


class IndexRoot:
    """The indexes under one directory, addressed by name."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise ValueError(f"{root}: no such directory")

    def path(self, name: str) -> Path:
        """The index directory called `name`; HTTPException 400 for a malformed name, 404 for no
        such index (including a name that resolves outside the root)."""
        if not NAME_PATTERN.fullmatch(name) or ".." in name:
            raise HTTPException(400, f"invalid index name {name!r}: use letters, digits, '.', '_' and '-', "
                                     "starting with a letter or digit (one directory under the index root)")
        path = (self.root / name).resolve()
        if not path.is_relative_to(self.root) or path == self.root or not (path / "tables").is_dir():
            raise HTTPException(404, f"no index named {name!r}")
        return path

    def names(self) -> list[str]:
        found = []
        for child in sorted(self.root.iterdir()):
            try:
                self.path(child.name)
            except HTTPException:
                continue
            found.append(child.name)
        return found


class SearcherCache:
    """Loaded Searchers by (index directory, version), least recently used dropped first."""

    def __init__(self, size: int, load: Callable[[Path, int], Searcher] = lambda p, v: Searcher(str(p), v)):
        self.size, self.load = size, load
        self._items: OrderedDict[tuple[Path, int], Searcher] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[tuple[Path, int], threading.Lock] = {}

    def get(self, path: Path, version: int) -> Searcher:
        key = (path, version)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:  # concurrent first requests for one version load it once
            with self._lock:
                if key in self._items:
                    return self._items[key]
            searcher = self.load(path, version)
            with self._lock:
                self._items[key] = searcher
                self._loading.pop(key, None)
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
            return searcher


# --- request and response bodies (documented in /openapi.json) ---

class Problem(BaseModel):
    detail: str


class Health(BaseModel):
    status: Literal["ok"]
    indexes: int = Field(description="Index directories under the index root.")


class IndexInfo(BaseModel):
    name: str
    latest_version: int | None = Field(description="Newest published version; null when none is published yet.")


class IndexList(BaseModel):
    indexes: list[IndexInfo]


class VersionInfo(BaseModel):
    version: int
    published_at: str
    run_id: str
    command: str = Field(description="The command whose run published it (index, delete, rollback).")
    counts: dict[str, int] = Field(description="Rows per data table in this version.")


class VersionList(BaseModel):
    index: str
    versions: list[VersionInfo]


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=4000)
    mode: Literal[MODES] = "local"  # type: ignore[valid-type]
    top_k: int | None = Field(None, ge=1, le=200, description="Evidence chunks to return (default: the index's query.top_chunks).")
    version: int | None = Field(None, ge=1, description="Published version to query (default: the latest).")
    answer: bool | None = Field(None, description="Write an answer with the configured LLM (default: when one is configured).")
    steps: int = Field(0, ge=0, le=3, description="graph and local: iterative retrieval, at most this many LLM reasoning steps (IRCoT).")


class Evidence(BaseModel):
    model_config = ConfigDict(extra="allow")

    doc_id: str
    chunk_id: str
    score: float
    text: str
    title: str | None = None
    source_key: str | None = None
    via_entities: list[str] = []


class QueryResponse(BaseModel):
    """The result of `graphwright query --json`; modes may add context fields."""

    model_config = ConfigDict(extra="allow")

    question: str
    mode: str
    version: int
    evidence: list[Evidence]
    entities: list[dict[str, Any]] | None = None
    relationships: list[dict[str, Any]] | None = None
    reports: list[dict[str, Any]] | None = None
    answer: str | None = None
    answer_error: str | None = None
    citations: list[dict[str, Any]] | None = None


def warm(root: IndexRoot, searchers: SearcherCache) -> None:
    """Before serving, load the latest version of each index (as many as the cache holds) and
    query it once per mode: the embedding model, vector indexes and first table reads take
    seconds (tens on a busy machine), which the first queries would otherwise wait for."""
    for name in root.names()[:searchers.size]:
        path = root.path(name)
        try:
            rows = manifests(IndexStore(path))
            if rows:
                version = rows[-1]["version"]
                searcher = searchers.get(path, version)
                for mode in MODES:
                    if searcher.config.report.mode == "lazy" and mode in ("local", "global"):
                        continue  # a lazy index would write reports (LLM calls) for the warm-up question
                    try:
                        query(str(path), "warm-up", mode=mode, version=version, answer=False, searcher=searcher)
                    except ValueError:  # a mode this version cannot serve (e.g. no relationship vectors)
                        continue
        except Exception:  # one unreadable index must not keep the others from being served
            log.exception("could not load index %r at startup; its queries will report the error", name)


def _bearer_check(api_keys: Iterable[str]):
    digests = [hashlib.sha256(k.encode()).digest() for k in api_keys]
    scheme = HTTPBearer(auto_error=False, description=f"An API key from {API_KEYS_ENV} or --api-keys-file.")

    def require_key(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(scheme)]) -> None:
        given = hashlib.sha256((credentials.credentials if credentials else "").encode()).digest()
        # equal-length digests compared in constant time, against every key (no early exit)
        matched = False
        for digest in digests:
            matched |= hmac.compare_digest(given, digest)
        if credentials is None or not matched:
            raise HTTPException(401, "missing or invalid API key (send it as 'Authorization: Bearer KEY')",
                                headers={"WWW-Authenticate": "Bearer"})

    return require_key


def create_app(index_root: str | Path, api_keys: Iterable[str] = (), *, allow_no_auth: bool = False,
               max_concurrency: int = 4, cache_size: int = 8) -> FastAPI:
    """The API over the indexes under `index_root`. Without `api_keys` it refuses unless
    `allow_no_auth` says to serve every route without authentication."""
    keys = [k for k in api_keys if k]
    if not keys and not allow_no_auth:
        raise ValueError(f"no API keys: set {API_KEYS_ENV} or pass a keys file, or allow serving without authentication explicitly")
    if max_concurrency < 1:
        raise ValueError("max_concurrency must be at least 1")
    root = IndexRoot(index_root)
    searchers = SearcherCache(cache_size)
    limiter = anyio.CapacityLimiter(max_concurrency)

    async def blocking(fn, *args):
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)

    @asynccontextmanager
    async def lifespan(_app):
        await anyio.to_thread.run_sync(warm, root, searchers)
        yield

    app = FastAPI(title="graphwright", version="1", description="Query published graphwright indexes.", lifespan=lifespan,
                  default_response_class=SafeJSONResponse)
    install_error_handlers(app, root.root)
    errors = {401: {"model": Problem}, 400: {"model": Problem}, 404: {"model": Problem},
              503: {"model": Problem, "description": "A table or file of the index cannot be read; the detail names it."}}
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(_bearer_check(keys))] if keys else [], responses=errors)

    @app.get("/health", response_model=Health, tags=["health"])
    async def health() -> Health:
        """Liveness, without authentication. Answered while every query worker is busy."""
        return Health(status="ok", indexes=len(await anyio.to_thread.run_sync(root.names)))

    def latest(name: str) -> int | None:
        rows = manifests(IndexStore(root.path(name)))
        return rows[-1]["version"] if rows else None

    @v1.get("/indexes", response_model=IndexList, tags=["indexes"])
    async def list_indexes() -> IndexList:
        """The indexes under the root, each with its newest published version."""
        def work():
            return IndexList(indexes=[IndexInfo(name=n, latest_version=latest(n)) for n in root.names()])
        return await blocking(work)

    @v1.get("/indexes/{name}/versions", response_model=VersionList, tags=["indexes"])
    async def list_versions(name: str) -> VersionList:
        """Published versions of one index, oldest first (as `graphwright versions --json`)."""
        path = root.path(name)
        return VersionList(index=name, versions=await blocking(version_rows, IndexStore(path)))

    @v1.post("/indexes/{name}/query", response_model=QueryResponse, response_model_exclude_unset=True, tags=["query"])
    async def run_query(name: str, request: QueryRequest) -> dict:
        """Ranked evidence with provenance for a question, and an answer when an LLM is configured."""
        path = root.path(name)

        def work():
            version = load_manifest(IndexStore(path), request.version)["version"]
            return query(str(path), request.question, mode=request.mode, top_k=request.top_k, version=version,
                         answer=request.answer, searcher=searchers.get(path, version), steps=request.steps)
        try:
            return await blocking(work)
        except NoPublishedVersion as exc:
            raise HTTPException(404, str(exc).replace(str(path), name)) from None
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None

    app.include_router(v1)
    return app
