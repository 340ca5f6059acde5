"""Executors run a per-row stage's batch function over an Arrow table and stream the results
back to the driver, which commits them. The same stage code runs in-process (`local`, for tests
and small jobs) or on Ray Data actor pools (`ray`, one machine or a cluster)."""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from graphwright.config import ExecutionConfig


def actor_threads(num_cpus: float) -> int:
    """The threads a multi-threaded batch function (torch) runs in an actor of `num_cpus` CPUs."""
    return max(1, int(num_cpus))


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
    driver_args: tuple | None = None  # the arguments when built in the driver, if not `args` (e.g. no thread cap)
    weight: str | None = None  # a text column whose length says how much work a row is (rows sorted by length)
    driver_threads: int = 1  # the cores the function keeps busy when built in the driver (torch: all of them)

    def build_in_driver(self):
        """The batch function as the driver process builds it (with `driver_args` where given)."""
        return self.fn_class(*(self.args if self.driver_args is None else self.driver_args))

    def executor_gains(self) -> bool:
        """For a function that keeps several cores busy in the driver: whether the actors, between
        them, run more threads. If not, handing over only adds Ray's start and a build per actor
        (a model load each): the sample's embeddings took 40 s through two actors, 22 s in the
        driver. A single-threaded function gains from any actor (the driver commits meanwhile)."""
        return self.driver_threads <= 1 or self.actors * actor_threads(self.num_cpus) > self.driver_threads


# Ray Data reports a dataset's stats to its stats actor every 5 s, pickling the metadata (schema
# included) of every input block each time. With a block per batch, 1.2M chunks were 37.8k blocks
# and those reports took about 45% of the driver's samples during extraction. A block of several
# batches keeps them small; enough blocks per actor keep the pool balanced. A block's results
# reach the driver when its task ends, so a killed worker loses at most one block of answers.
MAX_BATCHES_PER_BLOCK = 8
BLOCKS_PER_ACTOR = 8


def rows_per_block(rows: int, batch_size: int, actors: int) -> int:
    """Rows of each input block of a stage's Ray dataset: whole batches, at most
    MAX_BATCHES_PER_BLOCK of them, and at least BLOCKS_PER_ACTOR blocks per actor while the rows allow."""
    batches = -(-rows // batch_size)
    return batch_size * max(1, min(MAX_BATCHES_PER_BLOCK, batches // max(1, actors * BLOCKS_PER_ACTOR)))


WORKER_CPU_COLUMN = "__worker_cpu_s"
WORKER_START_COLUMN = "__worker_started"


class _Metered:
    """A batch function wrapped so that each result batch carries the CPU seconds the worker
    spent on it (building the function included, on the first batch), and the first batch of a
    worker says that it started one: Ray workers are other processes, so the driver cannot see
    their CPU time or how many times a stage's function was built."""

    def __init__(self, fn_class: type, *args, staged: tuple[str, int] | None = None):
        """`staged`: (index root, batch size) when each input row names a staged block (pipeline.staging)."""
        start = time.process_time()
        self.fn = fn_class(*args)
        self.staged = None
        if staged is not None:
            from graphwright.pipeline.staging import index_files

            self.staged = (index_files(staged[0]), staged[1])
        self.unreported = time.process_time() - start
        self.started = 1

    def _run(self, batch: pa.Table) -> pa.Table:
        if self.staged is None:
            return self.fn(batch)
        from graphwright.pipeline.staging import read_parts

        files, size = self.staged
        rows = read_parts(batch, files)
        outs = [self.fn(rows.slice(o, size)) for o in range(0, rows.num_rows, size)]
        return pa.concat_tables(outs) if outs else rows

    def __call__(self, batch: pa.Table) -> pa.Table:
        start = time.process_time()
        out = self._run(batch)
        used = time.process_time() - start + self.unreported
        self.unreported = 0.0
        if not out.num_rows:
            self.unreported = used
            return (out.append_column(WORKER_CPU_COLUMN, pa.array([], pa.float64()))
                    .append_column(WORKER_START_COLUMN, pa.array([], pa.int32())))
        started, self.started = self.started, 0
        return (out.append_column(WORKER_CPU_COLUMN, pa.array([used] + [0.0] * (out.num_rows - 1), pa.float64()))
                .append_column(WORKER_START_COLUMN, pa.array([started] + [0] * (out.num_rows - 1), pa.int32())))


class LocalExecutor:
    name = "local"
    worker_starts = 0  # batch functions built so far (one per map_batches call)

    def map_batches(self, table: pa.Table, stage: BatchStage) -> Iterator[pa.Table]:
        if not table.num_rows:
            return
        # in-process the function has the driver's cores to itself, as when Run inlines a stage
        fn = stage.build_in_driver()
        self.worker_starts += 1
        for offset in range(0, table.num_rows, stage.batch_size):
            yield fn(table.slice(offset, stage.batch_size))

    def describe(self) -> str:
        return "local (in-process)"

    def close(self) -> None:
        pass


def ensure_ray(config: ExecutionConfig) -> bool:
    """Connect to the configured Ray cluster, or start a local one, unless this process is
    connected already. Returns whether it started the connection (and so should shut it down)."""
    import ray

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    warnings.filterwarnings("ignore", module=r"ray\.data\..*")
    if ray.is_initialized():
        return False
    ray.init(
        address=config.address,
        num_cpus=config.num_cpus if config.address is None else None,
        include_dashboard=False,
        logging_level=logging.ERROR,
        log_to_driver=True,
        configure_logging=True,
    )
    return True


class RayExecutor:
    name = "ray"
    worker_cpu_s = 0.0  # CPU seconds of all batches run in workers so far
    worker_starts = 0  # the stages' batch functions built in workers so far (once per actor per stage)
    staging = None  # pipeline.staging.Staging, or None: the driver puts the input into the object store

    def __init__(self, config: ExecutionConfig, staging=None):
        """`staging` (pipeline.staging.Staging): where the driver writes the stages' input blocks for
        the workers to read; without it the driver puts them into Ray's object store."""
        self._owns_ray = ensure_ray(config)
        self.staging = staging
        if staging is not None:
            staging.clear_all()
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
        size = rows_per_block(table.num_rows, stage.batch_size, stage.actors)
        blocks = [table.slice(o, size) for o in range(0, table.num_rows, size)]
        if self.staging is None:
            yield from self._results(ray.data.from_arrow(blocks), stage, stage.batch_size, {})
            return
        from graphwright.pipeline.staging import PART_COLUMN

        # each actor call reads one staged block and runs the stage's batches over it
        folder, parts = self.staging.write(stage.name, blocks)
        del blocks
        try:
            ds = ray.data.from_items([{PART_COLUMN: p} for p in parts], override_num_blocks=len(parts))
            yield from self._results(ds, stage, 1, {"staged": (self.staging.root, stage.batch_size)})
        finally:  # also when the consumer stops early or the stage fails
            self.staging.remove(folder)

    def _results(self, ds, stage: BatchStage, batch_size: int, kwargs: dict) -> Iterator[pa.Table]:
        import ray.data

        ds = ds.map_batches(
            _Metered,
            fn_constructor_args=(stage.fn_class, *stage.args),
            fn_constructor_kwargs=kwargs,
            batch_size=batch_size,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=stage.actors),
            num_cpus=stage.num_cpus,
            num_gpus=stage.num_gpus or None,
        )
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            self.worker_cpu_s += pc.sum(batch.column(WORKER_CPU_COLUMN)).as_py() or 0.0
            self.worker_starts += pc.sum(batch.column(WORKER_START_COLUMN)).as_py() or 0
            yield batch.drop_columns([WORKER_CPU_COLUMN, WORKER_START_COLUMN])

    def describe(self) -> str:
        import ray

        resources = ray.cluster_resources()
        return f"ray ({self.config.address or 'local'}; {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs)"

    def close(self) -> None:
        import ray

        if self._owns_ray:
            ray.shutdown()


def pool_of(config: ExecutionConfig) -> str:
    """Where a per-row stage's batches run, in words (for `plan`)."""
    return f"{config.actors} actors x {config.actor_num_cpus:g} CPU" if config.executor == "ray" else "in-process"


def make_executor(config: ExecutionConfig, staging=None):
    if config.executor == "local":
        return LocalExecutor()
    return RayExecutor(config, staging)
