"""A run holds Python's garbage collector back (util.collection): the young generation is
collected every 50,000 net allocations rather than 700 while the stages run, and the process's
own thresholds come back when the run ends."""

import dataclasses
import gc

from _helpers import index_fresh

from graphwright.pipeline import definition
from graphwright.util.collection import RUN_THRESHOLDS, fewer_collections


def test_the_stages_of_a_run_collect_less_often_and_the_process_gets_its_thresholds_back(tmp_path, monkeypatch):
    seen = []
    resolve = definition.by_name("resolve")

    def resolve_execute(run, m):
        seen.append(gc.get_threshold())
        return resolve.execute(run, m)

    stages = tuple(dataclasses.replace(s, execute=resolve_execute) if s.name == "resolve" else s for s in definition.INDEX)
    monkeypatch.setattr(definition, "INDEX", stages)
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        index_fresh(tmp_path)
        assert seen == [RUN_THRESHOLDS]
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_a_process_that_collects_less_often_or_never_keeps_its_choice():
    before = gc.get_threshold()
    try:
        gc.set_threshold(200_000, 50, 50)
        with fewer_collections():
            assert gc.get_threshold() == (200_000, 50, 50)
        gc.set_threshold(0, 10, 10)
        with fewer_collections():
            assert gc.get_threshold() == (0, 10, 10)
        assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*before)
