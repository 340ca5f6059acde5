"""What a stage declares: its name, the tables it reads and writes, and how to run and describe
it. The pipeline is a list of these (graphwright.pipeline.definition); the runner, `plan`, the
cost reports and the progress display all read that list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphwright.config import PipelineConfig
    from graphwright.pipeline.context import Run


def _none(cfg: PipelineConfig) -> float:
    return 0.0


def _always(cfg: PipelineConfig) -> bool:
    return True


@dataclass(frozen=True)
class Where:
    """How a stage runs under a configuration: its engine, where it runs (the driver or a pool of
    Ray actors) and what it reserves."""

    engine: str
    runs_on: str = "driver"
    resources: str = ""


@dataclass(frozen=True)
class Stage:
    name: str
    reads: tuple[str, ...]  # tables (and `sources`, `vectors/`, `exports/` for files)
    writes: tuple[str, ...]
    execute: Callable[[Run, dict], dict]  # (the run, the stage's metrics row to fill) -> its result
    where: Callable[[PipelineConfig], Where]
    gpus: Callable[[PipelineConfig], float] = _none  # GPUs held while it works (priced per GPU-second)
    enabled: Callable[[PipelineConfig], bool] = _always
    summary: str = ""  # one line for `plan` and the docs
    engines: tuple[str, ...] = ()  # the engine families it runs on (graphwright.engines.*), for the docs
    # called when the run starts, before any stage (the tables are as the last run left them):
    # starts in the background what the stage will want ready (a process's forkserver), while
    # the first stages leave a core idle. A head start only: should it fail, the run logs it
    # and goes on, and the stage must work without it
    prepare: Callable[[Run], None] | None = None
    # (a stage, work): `work(run)`, the part of this stage that needs no more than what that stage
    # and those before it wrote, starts in a thread once that stage has run, beside the stages in
    # between; `execute` takes its result from run.early_result (pipeline.early)
    early: tuple[str, Callable[[Run], object]] | None = None

    def early_after(self, cfg: PipelineConfig) -> str | None:
        """The stage after which the runner starts this stage's early part under `cfg`, if it does:
        not for a stage that holds GPUs (the LLM engine's replicas may hold them)."""
        return self.early[0] if self.early is not None and not self.gpus(cfg) else None
