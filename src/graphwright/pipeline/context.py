"""The state of one run, handed to every stage: the index, the configuration, what the command
asked for, the results of the stages so far, and the meters (one stage_metrics row per stage)."""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright.config import PipelineConfig
from graphwright.ops.costs import stage_cost, stage_row
from graphwright.pipeline.early import EarlyWork
from graphwright.pipeline.errors import WaitingOnBatch
from graphwright.pipeline.executors import BatchStage, LocalExecutor, make_executor
from graphwright.pipeline.progress import StageProgress
from graphwright.storage.delta import IndexStore
from graphwright.util import memory
from graphwright.util.numeric import to_numpy
from graphwright.util.terminal import plain


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Request:
    """What the command asked for: the sources of an index run (mirror: they are the whole
    corpus), or the documents an explicit deletion names; `rebuild` names tables emptied first."""

    sources: list[str] = field(default_factory=list)
    mirror: bool = True
    force: bool = False
    rebuild: tuple[str, ...] = ()
    doc_ids: list[str] = field(default_factory=list)
    source_globs: list[str] = field(default_factory=list)


@dataclass
class Run:
    store: IndexStore
    config: PipelineConfig
    run_id: str
    progress: StageProgress
    log: Callable[[str], None]
    request: Request = field(default_factory=Request)
    results: dict[str, dict] = field(default_factory=dict)  # stage name -> what it returned
    executor: object = None
    metrics: list[dict] = field(default_factory=list)
    llm_totals: dict = field(default_factory=lambda: dict(calls=0, cache_hits=0, failed=0, prompt_tokens=0, completion_tokens=0,
                                                          batch_prompt_tokens=0, batch_completion_tokens=0,
                                                          full_rebuild_tokens=0))
    lock: object = None  # the run lock (storage.lock): check() raises LockLost once another run took it over
    started: float = field(default_factory=time.time)
    current_stage: str = ""
    _llm: object = None  # the run's LLM session, made on first use
    _local: LocalExecutor = field(default_factory=LocalExecutor)  # for stages that run on the driver
    inlined: dict[str, int] = field(default_factory=dict)  # stage -> rows of its batches run in the driver
    _calls: object = None
    early: EarlyWork = field(default_factory=EarlyWork)  # stages' parts started before their turn
    _early_rows: dict[str, dict] = field(default_factory=dict)  # stage -> its early part, for its row

    @property
    def llm(self):
        """The run's LLM session: one engine for every stage, started when a stage first needs it."""
        if self._llm is None:
            from graphwright.engines.llm.session import LLMSession

            self._llm = LLMSession(self.config.llm, self.config.execution, name=f"graphwright-{self.run_id}", log=self.log,
                                   batch=self._batch_context() if self.config.llm.engine == "openai-batch" else None)
        return self._llm

    def _batch_context(self):
        """What the openai-batch engine needs of this run: it waits for batches until
        llm.batch.wait_s after the run started."""
        from graphwright.engines.llm.batch.engine import BatchContext

        def count(prompt: int, completion: int) -> None:
            self.llm_totals["batch_prompt_tokens"] += prompt
            self.llm_totals["batch_completion_tokens"] += completion

        return BatchContext(self.store, self.run_id, lambda: self.current_stage, self.started + self.config.llm.batch.wait_s,
                            self.calls, self.log, count, self.lock)

    @property
    def calls(self):
        """Where the run's LLM calls are written (engines.llm.cache.CallLog)."""
        if self._calls is None:
            from graphwright.engines.llm.cache import CallLog

            self._calls = CallLog(self.store, self.config.llm, self.run_id)
        return self._calls

    @contextmanager
    def stage(self, name: str, gpus: float = 0.0):
        """Measure a stage into one stage_metrics row. The body fills `details` with counters;
        `rows_in`/`rows_out` and `work_unit`/`work_done`/`work_total` (the units this run
        processed, and what a full rebuild would) become columns, the rest goes to JSON. A stage
        that did work holds `gpus` GPUs for its wall time."""
        details: dict = {"rows_in": 0, "rows_out": 0}
        wall, cpu = time.perf_counter(), cpu_seconds()
        self.early.running_beside(name)
        self.store.journal = {}
        self.current_stage = name
        llm_before, worker_before, starts_before = dict(self.llm_totals), self.worker_cpu_s(), self._worker_starts()
        try:
            yield details
        except WaitingOnBatch as exc:  # what it sent and collected so far still counts
            details["waiting"] = {"requests": exc.requests, "batches": [b["batch_id"] for b in exc.batches]}
            raise
        except BaseException as exc:  # what a failed stage used (LLM calls included) still counts
            details["failed"] = plain(f"{type(exc).__name__}: {exc}")[:500]
            raise
        finally:
            memory.release()
            if self._worker_starts() > starts_before:  # how many times the stage's batch function was built
                details["workers_started"] = self._worker_starts() - starts_before
            if name in self.inlined:
                details["ran_in_driver"] = True
                details["rows_in_driver"] = self.inlined[name]
            self._record_stage(name, details, wall, cpu, llm_before, worker_before, gpus)

    def _record_stage(self, name: str, details: dict, wall: float, cpu: float, llm_before: dict, worker_before: float,
                      gpus: float) -> None:
        wall_s = time.perf_counter() - wall
        # a copy: an early part's thread may still add to the journal it found (its own tables)
        written, self.store.journal = dict(self.store.journal), None
        # what early work wrote meanwhile is its own stage's; that stage's counts from its start
        others = self.early.tables_of_others(name)
        written = {t: v for t, v in written.items() if t not in others}
        if name in self._early_rows:
            early = self._early_rows.pop(name)
            written.update(early.pop("tables"))
            details["early"] = early
        llm = {k: self.llm_totals[k] - llm_before[k] for k in ("calls", "cache_hits", "prompt_tokens", "completion_tokens",
                                                                "batch_prompt_tokens", "batch_completion_tokens")}
        work_done = details.pop("work_done", None)
        row = {
            "run_id": self.run_id,
            "stage": name,
            "wall_s": wall_s,
            "cpu_s": cpu_seconds() - cpu,
            "rows_in": int(details.pop("rows_in")),
            "rows_out": int(details.pop("rows_out")),
            # the executor's workers, and the processes a stage ran itself (the cluster stage's pool)
            "worker_cpu_s": self.worker_cpu_s() - worker_before + details.pop("worker_cpu_s", 0.0),
            "gpu_s": wall_s * gpus if work_done else 0.0,
            "llm_calls": llm["calls"],
            "cache_hits": llm["cache_hits"],
            "prompt_tokens": llm["prompt_tokens"],
            "completion_tokens": llm["completion_tokens"],
            "batch_prompt_tokens": llm["batch_prompt_tokens"],
            "batch_completion_tokens": llm["batch_completion_tokens"],
            "bytes_written": sum(self.store.bytes_added(t, before) for t, before in written.items()),
            "work_unit": details.pop("work_unit", None),
            "work_done": work_done,
            "work_total": details.pop("work_total", None),
        }
        row["cost"] = stage_cost(row, self.config.cost, self.config.llm.model)
        # the driver's peak resident memory so far: the stage that raises it is the one to look at
        details["driver_peak_rss_mb"] = memory.peak_rss_mb()
        row["details"] = json.dumps(details, sort_keys=True, default=str)
        self.metrics.append(row)
        self.log(f"[bold]{name:<8}[/] {row['wall_s']:6.1f}s  " + ", ".join(f"{k}={v}" for k, v in details.items() if not isinstance(v, (dict, list))))

    def early_result(self, name: str):
        """The result of stage `name`'s early part (pipeline.early), waited for; None if the
        runner did not start it (the stage does that work itself)."""
        value, row = self.early.result(name)
        if row:
            self._early_rows[name] = row
        return value

    def worker_cpu_s(self) -> float:
        return getattr(self.executor, "worker_cpu_s", 0.0)

    def _worker_starts(self) -> int:
        return getattr(self.executor, "worker_starts", 0) + self._local.worker_starts

    def map_batches(self, label: str, table: pa.Table, stage: BatchStage, count: Callable[[pa.Table], int] = len,
                    driver_only: bool = False):
        """Run a per-row stage, yielding result batches; progress advances by `count(batch)`.

        Small work runs in the driver: starting Ray and an actor pool costs seconds that a few
        batches do not repay. Work of at most execution.inline_batches batches always does; past
        that, batches run in the driver while the time spent there plus the time the rest would
        take at the rate measured so far (on the batches after the first, a warm-up) stays within
        execution.inline_seconds, and the rest goes to the executor once it would not. The driver
        so spends at most inline_seconds (and a batch) before handing over (a ski-rental bound:
        never much worse than choosing right up front). A stage whose actors would run no more
        threads than its function runs in the driver stays there (BatchStage.executor_gains),
        unless inline_seconds is 0. With `driver_only` the rows that would go to the executor are
        left undone (the caller sees fewer rows come back)."""
        if not table.num_rows:
            return
        with self.progress.task(label, table.num_rows) as advance:
            done = 0
            budget = self._driver_budget(stage, table.num_rows)
            if budget is None or budget > 0:
                for batch, done in self._in_driver(table, stage, budget):
                    advance(count(batch))
                    yield batch
                if done:
                    self.inlined[label] = self.inlined.get(label, 0) + done
            if done < table.num_rows and not driver_only:
                if self.executor is None:  # started on first use: a no-op run never starts Ray
                    from graphwright.pipeline.staging import Staging

                    self.executor = make_executor(self.config.execution, staging=Staging(str(self.store.root), self.run_id))
                    self.log(f"executor: {self.executor.describe()}")
                for batch in self.executor.map_batches(table.slice(done), stage):
                    advance(count(batch))
                    yield batch

    def runs_in_driver(self, stage: BatchStage, rows: int) -> bool:
        """Whether map_batches runs any of `rows` rows' batches of `stage` in this process."""
        budget = self._driver_budget(stage, rows)
        return budget is None or budget > 0

    def _driver_budget(self, stage: BatchStage, rows: int) -> float | None:
        """How map_batches runs `rows` rows of `stage` in this process: None for all of them, else
        the seconds it may spend there before handing the rest to the executor (0 or less: none)."""
        execution = self.config.execution
        if not stage.on_driver and stage.num_gpus:
            return 0.0
        small = (stage.on_driver or rows <= execution.inline_batches * stage.batch_size
                 or (execution.inline_seconds > 0 and not stage.executor_gains()))
        return None if small else execution.inline_seconds

    def _in_driver(self, table: pa.Table, stage: BatchStage, budget_s: float | None):
        """(result batch, rows done so far) of the stage's batches run in this process: all of
        them when `budget_s` is None, else while the time so far plus the estimated rest fits it.
        The first batch pays what a function loads on first use (a tokenizer, a client pool): it
        counts with the build, and the rate is measured on the batches after it. Measured on the
        first batch, a 0.1 s tokenizer load made 1,500 documents look like 24 s of chunking
        instead of 6, and an update started Ray for them (15.8 s)."""
        if budget_s is not None and budget_s <= 0:
            return
        started = time.perf_counter()
        fn = stage.build_in_driver()
        self._local.worker_starts += 1
        once = time.perf_counter() - started  # the build and the first batch, paid once: not part of the rate
        spent = 0.0  # in the batch function after the first batch, not in the caller's commits
        # the work done so far and in all, in rows or, where the stage says, in characters
        if budget_s is not None:
            work = (np.cumsum(to_numpy(pc.utf8_length(table.column(stage.weight)).fill_null(0), np.int64) + 1)
                    if stage.weight else np.arange(1, table.num_rows + 1))
            warm_up = work[min(stage.batch_size, table.num_rows) - 1]  # the first batch's work
        for offset in range(0, table.num_rows, stage.batch_size):
            started = time.perf_counter()
            batch = fn(table.slice(offset, stage.batch_size))
            elapsed = time.perf_counter() - started
            if offset:
                spent += elapsed
            else:
                once += elapsed
            done = min(offset + stage.batch_size, table.num_rows)
            yield batch, done
            if budget_s is not None and done < table.num_rows:
                rest = spent / (work[done - 1] - warm_up) * (work[-1] - work[done - 1]) if offset else 0.0
                if once + spent + rest > budget_s:
                    return

    def close_executor(self) -> None:
        if self.executor is not None:
            self.executor.close()
            self.executor = None

    def record_llm_calls(self, stage: str, calls: pa.Table | list[dict]) -> None:
        """Record a stage's calls (engines.llm.cache.CallLog) and add them to the run's totals."""
        if isinstance(calls, pa.Table):
            if "chunk_id" in calls.column_names:  # extraction and summaries name the item by its chunk/row id
                calls = calls.rename_columns(["item_id" if c == "chunk_id" else c for c in calls.column_names])
            calls = calls.to_pylist()
        origins = self._llm.batch_origins() if self._llm is not None else {}
        for c in calls if origins else ():  # answers a batch brought: paid with the batch, or by another run
            if c["key"] in origins:
                c["batch_id"] = origins[c["key"]]
                c["cache_hit"] = c["batch_id"] is None
        for r in self.calls.record(stage, calls):
            self.llm_totals["calls"] += 1
            self.llm_totals["cache_hits"] += r["cache_hit"]
            self.llm_totals["failed"] += r["status"] == "failed"
            if not r["cache_hit"] and not r["batch_id"]:  # a batch's tokens are counted when it is collected
                self.llm_totals["prompt_tokens"] += r["prompt_tokens"]
                self.llm_totals["completion_tokens"] += r["completion_tokens"]

    def close_llm(self, sweep: bool = False) -> None:
        """Close the run's LLM session; its GPUs, held from the start of the engine (start-up
        included) to now, become one stage_metrics row, `llm-engine`, with the tokens of LLM
        batches collected while closing (`sweep`: every stage is done, so the ended batches
        no stage asked about are collected)."""
        if sweep and self.config.llm.engine == "openai-batch" and (self._llm is None or not self._llm.started):
            from graphwright.engines.llm.batch.ledger import BatchLedger

            ledger = BatchLedger(self.store)
            ledger.refresh()
            if ledger.live():  # batches of earlier runs no stage asked about: started only to collect them
                self.llm.engine()
        if self._llm is None or not self._llm.started:
            return
        before = self.llm_totals["batch_prompt_tokens"], self.llm_totals["batch_completion_tokens"]
        self._llm.close(sweep=sweep)
        usage = self._llm.usage()
        row = stage_row(self.run_id, "llm-engine", wall_s=usage["held_s"], gpu_s=usage["held_s"] * usage["gpus"],
                        batch_prompt_tokens=self.llm_totals["batch_prompt_tokens"] - before[0],
                        batch_completion_tokens=self.llm_totals["batch_completion_tokens"] - before[1])
        row["cost"] = stage_cost(row, self.config.cost, self.config.llm.model)
        row["details"] = json.dumps({k: usage[k] for k in ("engine", "startup_s", "replicas", "gpus")}, sort_keys=True)
        self.metrics.append(row)
        self.log(f"[bold]llm-engine[/] held {usage['held_s']:.1f}s (start-up {usage['startup_s']:.1f}s, {usage['gpus']:g} GPUs)")
