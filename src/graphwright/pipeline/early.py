"""The part of a stage that may start before its turn: a stage declares `early=(stage, work)`,
and once that stage has run, `work(run)` starts in a thread and runs beside the stages in
between; when its own turn comes, the stage's `execute` takes the result (run.early_result),
waiting for it if need be, and does the rest. The embed stage so embeds and indexes the new
chunks while resolve runs, which leaves a core idle for most of its time (at 1.2M chunks embed
took 3.9-4.7 s of a 0.1% update instead of 6.8-7.8 s, and 7.0 s of a 1% update instead of
15.3 s; docs/benchmarks.md). Work is worth starting early only beside a stage
that leaves a core idle: beside cluster (Leiden and its quality check in a second process) or
report (its LLM client and the LLM server) it slowed them by as much as it saved.

What it writes to tables is counted in its stage's row (bytes_written from the table's version
when the work started); the CPU seconds of the stages it ran beside include its own (a row's
cpu_s is the process's during the row's wall time, so the rows still add up to the run's), and
its stage's details say so (`early`: after, beside, wall_s, waited_s). Work that holds GPUs
does not start early (the LLM engine's replicas may hold them): the stage does it at its turn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field


@dataclass
class _Started:
    after: str
    future: Future
    tables: dict[str, int | None]  # the versions of the tables the stage writes, when the work started
    started: float
    ended: float | None = None
    beside: list[str] = field(default_factory=list)  # the stages that ran meanwhile


class EarlyWork:
    """The early parts of a run's stages: started, waited for, and described in their stage's row."""

    def __init__(self):
        self._started: dict[str, _Started] = {}

    def start_after(self, run, done: str, stages) -> None:
        """Start the early work of every stage in `stages` that may start once stage `done` has run."""
        for stage in stages:
            if stage.early_after(run.config) == done and stage.name not in self._started:
                self._start(run, stage, stage.early[1])

    def _start(self, run, stage, work: Callable) -> None:
        future: Future = Future()
        tables = {t: run.store.version(t) for t in stage.writes if "/" not in t}
        started = _Started(stage.early[0], future, tables, time.perf_counter())

        def body() -> None:
            try:
                future.set_result(work(run))
            except BaseException as exc:  # noqa: BLE001 - raised where the stage takes the result
                future.set_exception(exc)
            finally:
                started.ended = time.perf_counter()

        self._started[stage.name] = started
        threading.Thread(target=body, name=f"early-{stage.name}", daemon=True).start()

    def running_beside(self, name: str) -> None:
        """Note that stage `name` is starting, beside whatever early work is unfinished."""
        for stage, started in self._started.items():
            if stage != name and not started.future.done():
                started.beside.append(name)

    def tables_of_others(self, name: str) -> set[str]:
        """The tables that early work of stages other than `name` writes (not stage `name`'s own)."""
        return {t for stage, s in self._started.items() if stage != name for t in s.tables}

    def result(self, name: str) -> tuple[object, dict]:
        """(`name`'s early result, waited for, or None if it did not start; its description for
        the stage's row)."""
        started = self._started.get(name)
        if started is None:
            return None, {}
        waited = time.perf_counter()
        value = started.future.result()
        ended = started.ended if started.ended is not None else time.perf_counter()
        return value, {"after": started.after, "beside": started.beside, "wall_s": round(ended - started.started, 3),
                       "waited_s": round(time.perf_counter() - waited, 3), "tables": started.tables}

    def wait(self) -> None:
        """Wait for every early work still running (a run that stops must not leave one writing)."""
        for started in self._started.values():
            try:
                started.future.result()
            except Exception:  # noqa: BLE001 - its own stage, which did not run, would have raised it
                pass
