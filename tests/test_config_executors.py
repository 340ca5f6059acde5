import os

import pyarrow as pa
import pytest
from _helpers import CONFIG_FILE

from graphwright.config import ConfigError, PipelineConfig, load_config
from graphwright.pipeline.executors import BatchStage, LocalExecutor, make_executor


def test_defaults_are_the_local_cpu_profile():
    cfg = load_config()
    assert cfg == PipelineConfig()
    assert cfg.execution.executor == "ray" and cfg.embed.engine == "sentence-transformers"
    assert cfg.chunk.size_tokens == 254 and cfg.chunk.overlap_tokens == 32


def test_pipelines_local_cpu_yaml_spells_out_the_defaults():
    from pathlib import Path

    profile = Path(__file__).resolve().parents[1] / "pipelines" / "local-cpu.yaml"
    if not profile.exists():
        pytest.skip("no pipelines/local-cpu.yaml in this checkout")
    assert load_config(profile) == PipelineConfig()


def test_file_then_overrides():
    cfg = load_config(CONFIG_FILE, {"execution": {"commit_every": 7}, "chunk": {"overlap_tokens": 4}})
    assert cfg.embed.engine == "hashing" and cfg.execution.executor == "local"  # from the file
    assert cfg.execution.commit_every == 7 and cfg.chunk.overlap_tokens == 4  # overrides
    assert cfg.chunk.size_tokens == 64  # the file's value survives a partial override of its section
    assert load_config(None, {"embed": {"engine": "hashing"}}).embed.engine == "hashing"


def test_invalid_override_is_a_config_error():
    with pytest.raises(ConfigError, match="executor"):
        load_config(CONFIG_FILE, {"execution": {"executor": "spark"}})


def test_empty_file_is_the_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n")
    assert load_config(path) == PipelineConfig()


def test_config_hash_is_stable_and_sensitive():
    a, b = load_config(CONFIG_FILE), load_config(CONFIG_FILE)
    assert a.config_hash() == b.config_hash() and len(a.config_hash()) == 16
    assert a.config_hash() != load_config(CONFIG_FILE, {"chunk": {"size_tokens": 65}}).config_hash()


class Doubler:
    def __init__(self, factor):
        self.factor = factor
        Doubler.instances += 1

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.table({"x": [v * self.factor for v in batch.column("x").to_pylist()]})


def test_local_executor_runs_batches_in_order():
    Doubler.instances = 0
    executor = make_executor(load_config(CONFIG_FILE).execution)
    assert isinstance(executor, LocalExecutor) and executor.describe().startswith("local")
    out = list(executor.map_batches(pa.table({"x": list(range(10))}), BatchStage("double", Doubler, (2,), batch_size=3)))
    assert [b.num_rows for b in out] == [3, 3, 3, 1]
    assert pa.concat_tables(out).column("x").to_pylist() == [2 * v for v in range(10)]
    assert Doubler.instances == 1  # the batch function is built once, then reused
    assert list(executor.map_batches(pa.table({"x": pa.array([], pa.int64())}), BatchStage("d", Doubler, (2,)))) == []
    executor.close()


@pytest.mark.parametrize("rows, batch_size, actors, block", [
    (1_208_592, 32, 2, 256),  # the 1M-chunk extraction: 4,722 blocks, not 37,769
    (3_000, 32, 2, 160),  # 19 blocks: 8 or more per actor
    (100, 32, 2, 32),  # a block per batch while there are few
    (5, 32, 4, 32),
])
def test_a_ray_stage_sends_blocks_of_several_batches(monkeypatch, rows, batch_size, actors, block):
    """Ray Data pickles every input block's metadata into its stats reports, every 5 s: a block
    per batch made those reports most of the driver's work at a million chunks."""
    import ray.data

    from graphwright.pipeline.executors import RayExecutor

    sent = []

    class _Dataset:
        def map_batches(self, *args, **kwargs):
            return self

        def iter_batches(self, **kwargs):
            return iter(())

    def from_arrow(blocks):
        sent.extend(blocks)
        return _Dataset()

    monkeypatch.setattr(ray.data, "from_arrow", from_arrow)
    executor = object.__new__(RayExecutor)  # no Ray started: only the dataset's blocks are looked at
    list(executor.map_batches(pa.table({"x": list(range(rows))}), BatchStage("s", Doubler, (2,), batch_size=batch_size, actors=actors)))
    assert [b.num_rows for b in sent[:-1]] == [block] * (len(sent) - 1) and 0 < sent[-1].num_rows <= block
    assert sum(b.num_rows for b in sent) == rows
    assert len(sent) >= min(-(-rows // batch_size), 8 * actors)


def test_the_local_executor_builds_a_stage_with_its_driver_arguments():
    # in-process there are no actors to share the machine with: a thread cap for actors
    # (EmbedBatch's torch threads) would leave the driver's other cores idle
    executor = LocalExecutor()
    stage = BatchStage("double", Doubler, (2,), batch_size=4, driver_args=(3,))
    assert pa.concat_tables(executor.map_batches(pa.table({"x": [1, 2]}), stage)).column("x").to_pylist() == [3, 6]


class _CountingExecutor(LocalExecutor):
    """An executor that records the rows it was handed."""

    def __init__(self):
        self.rows = []

    def map_batches(self, table, stage):
        self.rows.append(table.num_rows)
        yield from super().map_batches(table, stage)


@pytest.mark.parametrize(("inline_batches", "inline_seconds", "in_driver"), [
    (0, 0, 0),  # never in the driver
    (4, 0, 10),  # small work: 10 rows are at most 4 batches of 3
    (3, 0, 0),  # 10 rows are more than 3 batches of 3, and there is no time budget
    (0, 1e-9, 3),  # one batch measured, and the rest would not fit the budget: it goes to the executor
    (0, 3600, 10),  # the whole work fits the budget at the measured rate
])
def test_the_driver_runs_batches_while_they_fit_its_time_budget(tmp_path, monkeypatch, inline_batches, inline_seconds, in_driver):
    from graphwright.pipeline import context
    from graphwright.pipeline.progress import StageProgress
    from graphwright.storage.delta import IndexStore

    executor = _CountingExecutor()
    monkeypatch.setattr(context, "make_executor", lambda cfg, **kw: executor)
    cfg = load_config(None, {"execution": {"executor": "ray", "inline_batches": inline_batches, "inline_seconds": inline_seconds}})
    run = context.Run(IndexStore(tmp_path / "index"), cfg, "r", StageProgress(False), lambda m: None)
    table = pa.table({"x": list(range(10))})
    out = list(run.map_batches("double", table, BatchStage("double", Doubler, (2,), batch_size=3)))
    assert pa.concat_tables(out).column("x").to_pylist() == [2 * v for v in range(10)]  # each row once, in order
    assert run.inlined.get("double", 0) == in_driver
    assert executor.rows == ([10 - in_driver] if in_driver < 10 else [])


@pytest.mark.parametrize(("driver_threads", "actors", "inline_seconds", "in_driver"), [
    (2, 2, 1e-9, 10),  # two single-threaded actors cannot beat two threads in the driver: it keeps the work
    (2, 3, 1e-9, 3),  # three can: past the budget the rest goes to them
    (1, 1, 1e-9, 3),  # a single-threaded function: the actor works while the driver commits
    (2, 2, 0, 0),  # inline_seconds 0: only inline_batches decides
])
def test_the_driver_keeps_work_the_executor_cannot_do_sooner(tmp_path, monkeypatch, driver_threads, actors, inline_seconds, in_driver):
    from graphwright.pipeline import context
    from graphwright.pipeline.progress import StageProgress
    from graphwright.storage.delta import IndexStore

    executor = _CountingExecutor()
    monkeypatch.setattr(context, "make_executor", lambda cfg, **kw: executor)
    cfg = load_config(None, {"execution": {"executor": "ray", "inline_batches": 0, "inline_seconds": inline_seconds}})
    run = context.Run(IndexStore(tmp_path / "index"), cfg, "r", StageProgress(False), lambda m: None)
    stage = BatchStage("double", Doubler, (2,), batch_size=3, actors=actors, num_cpus=0.5, driver_threads=driver_threads)
    out = list(run.map_batches("double", pa.table({"x": list(range(10))}), stage))
    assert pa.concat_tables(out).column("x").to_pylist() == [2 * v for v in range(10)]
    assert run.inlined.get("double", 0) == in_driver
    assert executor.rows == ([10 - in_driver] if in_driver < 10 else [])


def test_the_embed_stage_counts_torch_threads_in_the_driver():
    from graphwright.config import EmbedConfig
    from graphwright.stages.embed import _driver_threads

    assert _driver_threads(EmbedConfig(engine="hashing")) == 1
    assert _driver_threads(EmbedConfig(engine="sentence-transformers")) == len(os.sched_getaffinity(0))


def test_the_driver_counts_the_cores_it_may_run_on_not_the_hosts(monkeypatch):
    """A container or `taskset` pins the process to fewer cores than the host has: the Leiden
    pool, the lexical index writers and the embedder size themselves by the pinned ones."""
    from graphwright.config import EmbedConfig, ExecutionConfig
    from graphwright.stages.embed import _driver_threads
    from graphwright.util.cores import driver_cores

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert driver_cores(ExecutionConfig()) == 1
    assert driver_cores(ExecutionConfig(driver_processes=3)) == 3
    assert _driver_threads(EmbedConfig(engine="sentence-transformers")) == 1


class _Clock:
    now = 0.0


class _SlowFirstCall:
    """A batch function whose first call loads something (0.5 s on a fake clock), as the chunker's
    first call loads the tokenizer; each call after it takes 0.01 s a row."""

    def __init__(self, *args):
        self.loaded = False

    def __call__(self, batch: pa.Table) -> pa.Table:
        _Clock.now += 0.01 * batch.num_rows + (0 if self.loaded else 0.5)
        self.loaded = True
        return batch


def test_a_load_on_the_first_batch_does_not_send_the_work_to_the_executor(tmp_path, monkeypatch):
    """40 batches of 0.03 s fit a 2 s budget: the first batch's 0.5 s load is paid once, not
    projected onto the 39 batches after it (20 s), which sent an update's chunking to Ray."""
    from graphwright.pipeline import context
    from graphwright.pipeline.progress import StageProgress
    from graphwright.storage.delta import IndexStore

    executor = _CountingExecutor()
    monkeypatch.setattr(context, "make_executor", lambda cfg, **kw: executor)
    monkeypatch.setattr(context.time, "perf_counter", lambda: _Clock.now)
    cfg = load_config(None, {"execution": {"executor": "ray", "inline_batches": 0, "inline_seconds": 2}})
    run = context.Run(IndexStore(tmp_path / "index"), cfg, "r", StageProgress(False), lambda m: None)
    out = list(run.map_batches("t", pa.table({"x": list(range(120))}), BatchStage("t", _SlowFirstCall, (), batch_size=3)))
    assert pa.concat_tables(out).num_rows == 120
    assert run.inlined["t"] == 120 and executor.rows == []


class _TimedByLength:
    """A batch function whose run time (on a fake clock) is the length of its rows' texts."""

    built_with: list = []

    def __init__(self, *args):
        _TimedByLength.built_with.append(args)

    def __call__(self, batch: pa.Table) -> pa.Table:
        _Clock.now += sum(len(t) for t in batch.column("text").to_pylist())
        return batch


@pytest.mark.parametrize(("weight", "in_driver"), [(None, 9), ("text", 6)])
def test_the_driver_projects_the_rest_by_the_rows_weight(tmp_path, monkeypatch, weight, in_driver):
    """Rows sorted by length (the embed stage sorts them so): projected by rows, the short ones
    first make the rest look cheap and the driver overruns its budget; by text length it hands
    over after the second batch (the first one's time counts as a warm-up, as a model load
    would). In the driver the function is built with `driver_args`."""
    from graphwright.pipeline import context
    from graphwright.pipeline.progress import StageProgress
    from graphwright.storage.delta import IndexStore

    executor = _CountingExecutor()
    monkeypatch.setattr(context, "make_executor", lambda cfg, **kw: executor)
    monkeypatch.setattr(context.time, "perf_counter", lambda: _Clock.now)
    _TimedByLength.built_with = []
    cfg = load_config(None, {"execution": {"executor": "ray", "inline_batches": 0, "inline_seconds": 100}})
    run = context.Run(IndexStore(tmp_path / "index"), cfg, "r", StageProgress(False), lambda m: None)
    table = pa.table({"text": ["a"] * 6 + ["x" * 100] * 4})
    stage = BatchStage("t", _TimedByLength, ("capped",), batch_size=3, weight=weight, driver_args=("all cores",))
    out = list(run.map_batches("t", table, stage))
    assert pa.concat_tables(out).column("text").to_pylist() == table.column("text").to_pylist()
    assert run.inlined["t"] == in_driver and executor.rows == [10 - in_driver]
    assert _TimedByLength.built_with[0] == ("all cores",)
