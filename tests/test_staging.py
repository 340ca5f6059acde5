"""A Ray stage's input goes to the workers through files staged in the index, not through the
driver's own puts into Ray's object store: object-store pages a process wrote stay in its
resident set after the objects are freed (1.6 GB of the driver's peak at 1.2M chunks)."""

import sys

import pyarrow as pa
import pytest

from graphwright.config import load_config
from graphwright.pipeline.executors import BatchStage
from graphwright.pipeline.staging import PART_COLUMN, Staging, index_files, read_parts

CACHED = pa.list_(pa.struct([("key", pa.string()), ("response", pa.string())]))


def _work(rows: int) -> pa.Table:
    return pa.table({"chunk_id": [f"c{i:05d}" for i in range(rows)], "text": ["Mara Voss " * 40] * rows,
                     "cached": pa.array([[{"key": f"k{i}", "response": "{}"}] if i % 3 else [] for i in range(rows)], CACHED)})


def test_staged_blocks_read_back_equal_and_are_removed(tmp_path):
    staging = Staging(str(tmp_path), "run-a")
    blocks = [_work(70).slice(0, 32), _work(70).slice(32, 38)]
    folder, parts = staging.write("extract", blocks)
    assert folder.startswith("staging/run-a/extract-") and len(parts) == 2
    back = read_parts(pa.table({PART_COLUMN: parts}), index_files(str(tmp_path)))
    assert back.equals(pa.concat_tables(blocks))
    assert staging.write("extract", blocks[:1])[0] != folder  # a stage run twice gets two folders
    assert staging.remove(folder) == 2 and not (tmp_path / folder).exists()
    assert staging.clear_all() == 1 and not (tmp_path / "staging").exists()


class Tagger:
    def __init__(self, tag):
        self.tag = tag

    def __call__(self, batch: pa.Table) -> pa.Table:
        assert batch.num_rows <= 32  # the stage's batches, not the staged block
        cached = batch.column("cached").to_pylist()
        return pa.table({"chunk_id": batch.column("chunk_id"), "tag": [self.tag] * batch.num_rows,
                         "cached": [len(c) for c in cached]})


def test_a_ray_stage_puts_none_of_its_input_into_the_object_store_itself(tmp_path, monkeypatch):
    pytest.importorskip("ray.data")
    import ray

    from graphwright.pipeline.executors import RayExecutor

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    leftover = tmp_path / "staging" / "killed-run" / "extract-0" / "000000.arrow"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"left by a run killed mid-stage")
    put = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value, **kw: put.append(value.nbytes if isinstance(value, pa.Table) else 0) or real_put(value, **kw))
    work = _work(3_000)
    executor = RayExecutor(load_config(None, {"execution": {"executor": "ray", "num_cpus": 2}}).execution, Staging(str(tmp_path), "run-b"))
    try:
        assert not leftover.exists()  # a new run's executor clears what killed runs staged
        stage = BatchStage("extract", Tagger, ("t",), batch_size=32, num_cpus=0.5, actors=2)
        out = pa.concat_tables(list(executor.map_batches(work, stage))).sort_by("chunk_id")
    finally:
        executor.close()
    assert out.column("chunk_id").equals(work.column("chunk_id")) and set(out.column("tag").to_pylist()) == {"t"}
    assert out.column("cached").to_pylist() == [len(c) for c in work.column("cached").to_pylist()]
    assert sum(put) < work.nbytes / 20, f"the driver put {sum(put)} bytes of a {work.nbytes}-byte input"
    assert not list((tmp_path / "staging").rglob("*.arrow"))  # the stage's files go when it ends
