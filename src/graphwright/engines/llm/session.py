"""One LLM engine per run, or per query process: started on first use, shared by every stage
that calls an LLM (extraction and its gleaning rounds, description summaries, adjudication,
reports; lazy reports and answers in a query process), and closed once.

| llm.engine | what starts once | how the stages reach it |
|---|---|---|
| openai | a client pool | the driver: the session's engine; extraction actors: a client each, built once per stage |
| llamacpp | the model, in this process | the driver (extraction runs on the driver) |
| vllm | a Ray Serve LLM application of llm.replicas vLLM replicas | its OpenAI route, from the driver and from the extraction actors |
| openai-batch | a batch engine (engines.llm.batch) in an index run; a client pool for queries | the driver, a whole stage round per call |

`usage()` is what the run's cost rows need: how long starting took and how long the engine
(and its GPUs) was held.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from graphwright.engines.llm.interface import LLMRequest, LLMResponse


class LLMSession:
    def __init__(self, config, execution=None, name: str = "graphwright", log=None, batch=None):
        """`batch`: the run's engines.llm.batch.engine.BatchContext, for llm.engine openai-batch
        (without one, as in a query process, that engine's calls are synchronous)."""
        self.config, self.execution, self.name, self.batch = config, execution, name, batch
        self.log = log or (lambda message: None)
        self._engine = None
        self._service = None
        self._lock = threading.Lock()
        self.started_at: float | None = None
        self.startup_s = 0.0
        self.closed_at: float | None = None

    @property
    def started(self) -> bool:
        return self._engine is not None

    @property
    def batched(self) -> bool:
        """Whether requests go out in batches (answered by the driver, a stage round at a time)."""
        return self.config.engine == "openai-batch" and self.batch is not None

    def batch_origins(self) -> dict[str, str | None]:
        """{key: batch id} of the answers batches collected in this run ({key: None} for those a
        batch engine found in the cache: another run collected them)."""
        return getattr(self._engine, "origins", {}) if self.batched else {}

    @property
    def on_driver(self) -> bool:
        """Whether extraction must run in this process (the engine lives here)."""
        return self.config.engine == "llamacpp"

    def engine(self):
        """The engine, started on the first call (from any thread)."""
        with self._lock:
            if self._engine is None:
                self._start()
            return self._engine

    def _start(self) -> None:
        from graphwright.engines.llm import make_llm

        self.started_at = time.perf_counter()
        if self.config.engine == "vllm":
            from graphwright.engines.llm.vllm_engine import VLLMService

            self.log(f"llm: starting {self.config.replicas} vLLM replica(s) of {self.config.model} (Ray Serve application {self.name})")
            self._service = VLLMService(self.config, self.execution, self.name)
            self._service.start()
            self._engine = make_llm(self._service.client_config())
        elif self.batched:
            from graphwright.engines.llm.batch.engine import BatchEngine

            self._engine = BatchEngine(self.config, self.batch)
        else:
            self._engine = make_llm(self.config)
        self.startup_s = time.perf_counter() - self.started_at

    def worker_config(self):
        """The LLM configuration extraction actors build their client from: this session's
        engine (for vllm, its Serve route; the replicas are started now if they were not)."""
        if self.config.engine != "vllm":
            return self.config
        self.engine()
        return self._service.client_config()

    def gpus(self) -> float:
        return self.config.replicas * self.config.tensor_parallel_size if self.config.engine == "vllm" else 0.0

    def usage(self) -> dict:
        if self.started_at is None:
            return {"engine": self.config.engine, "started": False}
        held = (self.closed_at or time.perf_counter()) - self.started_at
        return {"engine": self.config.engine, "started": True, "startup_s": self.startup_s, "held_s": held,
                "gpus": self.gpus(), "replicas": self.config.replicas if self.config.engine == "vllm" else 0}

    def close(self, sweep: bool = False) -> None:
        """`sweep`: every stage is done; a batch engine collects the ended batches none asked for."""
        with self._lock:
            if self._engine is None or self.closed_at is not None:
                return
            if sweep and hasattr(self._engine, "sweep"):
                self._engine.sweep()
            self.closed_at = time.perf_counter()
            engine, self._engine = self._engine, None
            if hasattr(engine, "close"):
                engine.close()
            if self._service is not None:
                self._service.stop()


class Stream:
    """Requests submitted one at a time, answered concurrently (at most `in_flight` at once),
    yielded as they complete: what lets a parent report go out the moment its own children are
    written. Engines answer a list; this keeps `in_flight` of them busy with one request each."""

    def __init__(self, engine, in_flight: int):
        self.engine = engine
        self.pool = ThreadPoolExecutor(max_workers=max(1, in_flight))
        self.done: queue.Queue = queue.Queue()
        self.pending = 0

    def submit(self, tag, request: LLMRequest, check=None) -> None:
        """`check` (a batch engine's: whether an answer is usable before it is cached) is not
        needed here: the caller checks each answer before recording it."""
        self.pending += 1
        future = self.pool.submit(self._one, request)
        future.add_done_callback(lambda f: self.done.put((tag, f.result())))

    def _one(self, request: LLMRequest) -> LLMResponse:
        try:
            return self.engine.complete([request])[0]
        except Exception as exc:  # an engine must not raise for one request; if it does, it is this request's failure
            return LLMResponse(text=None, error=f"{type(exc).__name__}: {exc}")

    def completed(self) -> Iterator[tuple[object, LLMResponse]]:
        """Answers as they arrive, until nothing is pending (submitting more while iterating is
        allowed and extends it)."""
        while self.pending:
            tag, response = self.done.get()
            self.pending -= 1
            yield tag, response

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def in_flight(config) -> int:
    """How many requests a stream keeps in flight for `config`'s engine."""
    return 1 if config.engine == "llamacpp" else config.concurrency


_QUERY_SESSIONS: dict[str, LLMSession] = {}
_QUERY_LOCK = threading.Lock()


def query_session(config) -> LLMSession:
    """The query process's session for `config` (one per process and configuration, however many
    indexes and versions it serves)."""
    import os
    import socket

    key = config.model_dump_json()
    with _QUERY_LOCK:
        if key not in _QUERY_SESSIONS:
            _QUERY_SESSIONS[key] = LLMSession(config, name=f"graphwright-query-{socket.gethostname()}-{os.getpid()}")
        return _QUERY_SESSIONS[key]
