"""Executors run a per-row stage's batch function over an Arrow table and stream the results
back to the driver, which commits them. The same stage code runs in-process (`local`, for tests
and small jobs) or on Ray Data actor pools (`ray`, one machine or a cluster)."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from graphwright.config import ExecutionConfig


@dataclass(frozen=True)
class BatchStage:
    """A per-row stage: `fn_class(*args)` is built once per worker, then called on batches."""

    name: str
    fn_class: type
    args: tuple = ()
    batch_size: int = 64
    num_cpus: float = 0.5
    num_gpus: float = 0.0
    actors: int = 1
    on_driver: bool = False  # run in the driver process (for batch functions that start Ray jobs themselves)


class LocalExecutor:
    name = "local"

    def map_batches(self, table: pa.Table, stage: BatchStage) -> Iterator[pa.Table]:
        if not table.num_rows:
            return
        fn = stage.fn_class(*stage.args)
        for offset in range(0, table.num_rows, stage.batch_size):
            yield fn(table.slice(offset, stage.batch_size))

    def describe(self) -> str:
        return "local (in-process)"

    def close(self) -> None:
        pass


class RayExecutor:
    name = "ray"

    def __init__(self, config: ExecutionConfig):
        import ray

        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        warnings.filterwarnings("ignore", module=r"ray\.data\..*")
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(
                address=config.address,
                num_cpus=config.num_cpus if config.address is None else None,
                include_dashboard=False,
                logging_level=logging.ERROR,
                log_to_driver=True,
                configure_logging=True,
            )
        from ray.data import DataContext

        ctx = DataContext.get_current()
        ctx.enable_progress_bars = False  # the driver shows one progress bar per stage
        ctx.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        self.config = config

    def map_batches(self, table: pa.Table, stage: BatchStage) -> Iterator[pa.Table]:
        import ray.data

        if not table.num_rows:
            return
        # one block per batch, so the actor pool can spread the work
        blocks = [table.slice(o, stage.batch_size) for o in range(0, table.num_rows, stage.batch_size)]
        ds = ray.data.from_arrow(blocks).map_batches(
            stage.fn_class,
            fn_constructor_args=stage.args,
            batch_size=stage.batch_size,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=stage.actors),
            num_cpus=stage.num_cpus,
            num_gpus=stage.num_gpus or None,
        )
        yield from ds.iter_batches(batch_size=None, batch_format="pyarrow")

    def describe(self) -> str:
        import ray

        resources = ray.cluster_resources()
        return f"ray ({self.config.address or 'local'}; {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs)"

    def close(self) -> None:
        import ray

        if self._owns_ray:
            ray.shutdown()


def make_executor(config: ExecutionConfig):
    if config.executor == "local":
        return LocalExecutor()
    return RayExecutor(config)
