"""Incremental resolve: an update rebuilds only what it touched, and still equals a full resolve of
the same state, through merges that appear and disappear, a run killed between its writes, and a
state that no longer matches the tables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from _helpers import run_stage_details

from graphwright.config import load_config
from graphwright.pipeline.runner import run_index
from graphwright.stages import resolve as resolve_stage
from graphwright.storage import patch
from graphwright.storage.delta import IndexStore

CONFIG = load_config(overrides={"execution": {"executor": "local"}, "embed": {"engine": "hashing", "dim": 32},
                                "ingest": {"max_delete_fraction": 1.0}})
OUTPUTS = ("entities", "entity_aliases", "relationships")
FILLER = " ".join(f"Clerk{i} Hale waited in Dunmore." for i in range(3))
DOCS = {
    "d1": "Ebenezer Scrooge met Jacob Marley in London. Scrooge thanked Marley in London. " + FILLER,
    "d3": "Alice Moreau wrote to Bruno Keller near Port Elling. Keller answered Alice Moreau.",
    "d4": "Chidi Okafor travelled with Bruno Keller to Kestrel Island.",
}
FRED = "Fred Scrooge argued with Jacob Marley in London. Scrooge laughed at Fred Scrooge."


def _write(folder: Path, docs: dict[str, str]) -> None:
    for old in folder.glob("*.txt"):
        old.unlink()
    for name, text in docs.items():
        (folder / f"{name}.txt").write_text(text)


def _rows(index: Path, table: str) -> list:
    t = IndexStore(index).read(table)
    return sorted(t.to_pylist(), key=lambda r: sorted((k, str(v)) for k, v in r.items()))


def _resolve_details(index: Path, summary: dict) -> dict:
    return run_stage_details(index, summary)["resolve"]


def _index(src: Path, index: Path, docs: dict[str, str]) -> dict:
    _write(src, docs)
    return run_index([str(src)], index, CONFIG, show_progress=False, log=lambda m: None)


def _assert_equals_fresh(tmp: Path, src: Path, updated: Path, docs: dict[str, str]) -> None:
    fresh = tmp / f"fresh-{len(list(tmp.iterdir()))}"
    _index(src, fresh, docs)
    for table in OUTPUTS:
        assert _rows(updated, table) == _rows(fresh, table), table


def _entity_of(index: Path) -> dict[str, str]:
    return {r["alias"]: r["entity_id"] for r in IndexStore(index).read("entity_aliases").to_pylist()}


def test_updates_that_merge_and_split_equal_a_fresh_resolve(tmp_path):
    src, updated = tmp_path / "src", tmp_path / "updated"
    src.mkdir()
    _index(src, updated, DOCS)
    merged = _entity_of(updated)
    assert merged["Scrooge"] == merged["Ebenezer Scrooge"]  # the test needs a merge to undo
    # Fred Scrooge makes 'Scrooge' ambiguous: the merge is undone, aliases change
    summary = _index(src, updated, DOCS | {"d2": FRED})
    details = _resolve_details(updated, summary)
    assert details["linking"]["incremental"] is True
    assert details["linking"]["entities_rebuilt"] < details["entities"]  # d3/d4's people untouched
    # where the update's time went, step by step, in stage_metrics
    seconds = details["linking"]["seconds"]
    assert {"state_s", "codes_s", "link_s", "lineage_s", "entities_s", "write_s", "save_state_s"} <= set(seconds)
    assert all(isinstance(v, float) and v >= 0 for v in seconds.values())
    # the two patches written side by side, each one's own time beside the step's
    assert {"write_entities_s", "write_relationships_s"} <= set(seconds)
    assert max(seconds["write_entities_s"], seconds["write_relationships_s"]) <= seconds["write_s"] + 0.01
    split = _entity_of(updated)
    assert split["Scrooge"] != split["Ebenezer Scrooge"]
    _assert_equals_fresh(tmp_path, src, updated, DOCS | {"d2": FRED})
    # and deleting it merges them again
    _index(src, updated, DOCS)
    assert _entity_of(updated)["Scrooge"] == _entity_of(updated)["Ebenezer Scrooge"]
    _assert_equals_fresh(tmp_path, src, updated, DOCS)


def test_a_noop_rerun_writes_nothing_and_rescoring_nothing(tmp_path):
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    versions = {t: IndexStore(index).version(t) for t in OUTPUTS}
    details = _resolve_details(index, _index(src, index, DOCS))
    assert details["linking"]["incremental"] is True
    assert details["linking"]["entities_rebuilt"] == details["linking"]["relationships_rebuilt"] == 0
    assert details["linking"]["pairs_rescored"] == 0
    assert {t: IndexStore(index).version(t) for t in OUTPUTS} == versions


def test_a_resolve_killed_between_its_writes_is_finished_by_the_rerun(tmp_path, monkeypatch):
    src, updated = tmp_path / "src", tmp_path / "updated"
    src.mkdir()
    _index(src, updated, DOCS)
    real = patch.patch_table

    def dies_on_relationships(store, name, removed, parts):
        if name == "relationships":
            raise KeyboardInterrupt("killed")
        return real(store, name, removed, parts)

    monkeypatch.setattr(resolve_stage, "patch_table", dies_on_relationships)
    with pytest.raises(KeyboardInterrupt):
        _index(src, updated, DOCS | {"d2": FRED})
    monkeypatch.setattr(resolve_stage, "patch_table", real)
    _index(src, updated, DOCS | {"d2": FRED})  # entities were written, the state was not: a full write
    _assert_equals_fresh(tmp_path, src, updated, DOCS | {"d2": FRED})


def test_a_lost_or_stale_state_falls_back_to_a_full_resolve(tmp_path):
    src, updated = tmp_path / "src", tmp_path / "updated"
    src.mkdir()
    _index(src, updated, DOCS)
    shutil.rmtree(updated / "state")
    details = _resolve_details(updated, _index(src, updated, DOCS | {"d2": FRED}))
    assert details["linking"]["incremental"] is False
    _assert_equals_fresh(tmp_path, src, updated, DOCS | {"d2": FRED})
    # someone rewrote a table behind the state's back: its rows are not trusted
    store = IndexStore(updated)
    store.overwrite("relationships", store.read("relationships").slice(0, 1))
    details = _resolve_details(updated, _index(src, updated, DOCS))
    assert details["linking"]["incremental"] is False
    _assert_equals_fresh(tmp_path, src, updated, DOCS)


def test_patch_rewrites_only_the_files_holding_changed_keys(tmp_path):
    store = IndexStore(tmp_path / "index")

    def rows(names, count=1):
        return pa.table({"alias": names, "entity_id": ["e"] * len(names), "method": ["m"] * len(names),
                         "evidence": ["x"] * len(names), "mention_count": [count] * len(names)})

    store.append("entity_aliases", rows(["a", "b"]))
    store.append("entity_aliases", rows(["c", "d"]))
    stats = patch.patch_table(store, "entity_aliases", ["b"], [rows(["e"], 2), rows(["a"], 5)])
    assert stats["files_kept"] == 1 and stats["files_rewritten"] == 1
    got = {r["alias"]: r["mention_count"] for r in store.read("entity_aliases").to_pylist()}
    assert got == {"a": 5, "c": 1, "d": 1, "e": 2}
    with pytest.raises(Exception, match="repeat a primary key"):
        patch.patch_table(store, "entity_aliases", [], [rows(["z"]), rows(["z"])])


def test_dictionary_parts_are_folded_and_a_mostly_stale_state_is_dropped(tmp_path, monkeypatch):
    from graphwright.stages.resolve import state

    monkeypatch.setattr(state, "MAX_DICTIONARY_PARTS", 2)
    src, updated = tmp_path / "src", tmp_path / "updated"
    src.mkdir()
    _index(src, updated, DOCS)
    for n in range(3):  # each run adds new chunk ids: a dictionary part each, folded at two
        _index(src, updated, DOCS | {f"x{n}": f"Goran Petrov met Hana Ito in Amberfield on day {n}."})
        meta = json.loads((updated / "state" / "resolve" / "state.json").read_text())
        assert all(len(parts) <= 2 for parts in meta["dictionary_parts"].values())
    _assert_equals_fresh(tmp_path, src, updated, DOCS | {"x2": "Goran Petrov met Hana Ito in Amberfield on day 2."})
    # every document replaced: most coded chunks are gone, so the state is dropped and rebuilt
    others = {f"y{i}": f"Farah Haddad wrote to Emil Novak near Greywater, letter {i}." for i in range(2)}
    _index(src, updated, others)
    assert not (updated / "state" / "resolve" / "state.json").exists()
    details = _resolve_details(updated, _index(src, updated, others | {"y9": "Emil Novak thanked Farah Haddad."}))
    assert details["linking"]["incremental"] is False
    assert (updated / "state" / "resolve" / "state.json").exists()
    _assert_equals_fresh(tmp_path, src, updated, others | {"y9": "Emil Novak thanked Farah Haddad."})


def test_pairs_whose_names_cannot_reach_the_borderline_stay_settled():
    from graphwright.stages.resolve.pair_cache import settled_codes, split_rows

    cached = pa.table({"a": ["ann lee", "bo", "cy"], "b": ["ann leigh", "bob", "dan"], "fa": [1, 1, 1], "fb": [1, 1, 1],
                       "name": [0.9, 0.5, 0.2], "score": [0.8, 0.4, 0.1]})
    keys = sorted({"ann lee", "ann leigh", "bo", "bob", "cy", "dan"})
    # every key changed: score <= 0.7 * name + 0.3, so only a name under 3/7 keeps a pair below 0.6 whatever its context
    kept, rescore = split_rows(cached, {k: 2 for k in keys}, hopeless_below=0.6)
    assert kept.column("a").to_pylist() == ["cy"] and rescore.column("a").to_pylist() == ["ann lee", "bo"]
    codes = settled_codes(kept, keys, 0.6)
    assert codes.tolist() == [keys.index("cy") * len(keys) + keys.index("dan")]


def test_hopeless_pairs_of_changed_keys_are_kept_settled_and_the_others_scored_again():
    from graphwright.stages.resolve.pair_cache import split_rows

    cached = pa.table({"a": ["ann", "ann", "bo", "bo", "cy", "gone"], "b": ["bob", "cy", "cy", "dan", "dan", "bob"],
                       "fa": [1, 1, 2, 2, 3, 9], "fb": [2, 3, 3, 4, 4, 2],
                       "name": [0.9, 0.2, 0.9, 0.1, 0.9, 0.1], "score": [0.8, 0.1, 0.7, 0.1, 0.7, 0.1]})
    fingerprint = {"ann": 1, "bo": 2, "bob": 2, "cy": 30, "dan": 4}  # cy changed, gone went
    kept, rescore = split_rows(cached, fingerprint)
    assert list(zip(kept["a"].to_pylist(), kept["b"].to_pylist())) == [("ann", "bob"), ("bo", "dan")]
    assert list(zip(rescore["a"].to_pylist(), rescore["b"].to_pylist())) == [("ann", "cy"), ("bo", "cy"), ("cy", "dan")]
    # a name under 3/7 keeps a pair below 0.6 whatever its context: (ann, cy) stays settled, with
    # the fingerprints it was scored with; a pair of a key that went is left out either way
    kept, rescore = split_rows(cached, fingerprint, hopeless_below=0.6)
    assert list(zip(kept["a"].to_pylist(), kept["b"].to_pylist(), kept["fb"].to_pylist())) == [
        ("ann", "bob", 2), ("ann", "cy", 3), ("bo", "dan", 4)]
    assert list(zip(rescore["a"].to_pylist(), rescore["b"].to_pylist())) == [("bo", "cy"), ("cy", "dan")]


def test_updates_equal_a_fresh_resolve_when_the_candidates_come_from_the_ivf(tmp_path, monkeypatch):
    """Above 20k names the n-gram candidates come from an IVF; here it is used at every size, so
    that its candidates, regenerated by each update, are checked to be the fresh build's."""
    import functools

    from graphwright.engines.vectors import neighbours as nb
    from graphwright.stages.resolve import candidates

    monkeypatch.setattr(candidates, "neighbours", functools.partial(nb.neighbours, exact_up_to=0))
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    people = {f"p{i}": f"Clerk{i} Hale met Person{i} Quill and Jacob Marley in Dunmore." for i in range(12)}
    _index(src, index, DOCS | people)
    for docs in (DOCS | people | {"d2": FRED}, DOCS | {k: v for k, v in people.items() if k != "p3"} | {"d2": FRED}):
        summary = _index(src, index, docs)
        assert _resolve_details(index, summary)["linking"]["incremental"] is True
        _assert_equals_fresh(tmp_path, src, index, docs)


def test_a_document_deleted_and_added_back_is_resolved_incrementally(tmp_path):
    # its chunks keep their ids and codes; while it was gone they ranked last, so comparing every
    # chunk's rank made the update that brought it back a full resolve (at 1.2M chunks, 167 s)
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    _index(src, index, {k: v for k, v in DOCS.items() if k != "d3"})
    details = _resolve_details(index, _index(src, index, DOCS))
    assert details["linking"]["incremental"] is True
    assert details["linking"]["entities_rebuilt"] < details["entities"]
    _assert_equals_fresh(tmp_path, src, index, DOCS)


def test_chunk_hashes_are_kept_between_runs_and_only_new_codes_are_hashed(monkeypatch):
    """The key fingerprints hash every chunk id: the hashes of the codes a previous run saw are
    taken from its state (a dictionary only grows); a state that is not of this dictionary is not."""
    import numpy as np
    import pyarrow as pa

    from graphwright.stages.resolve import rows
    from graphwright.stages.resolve.pair_cache import stable_hashes

    values = [f"chunk-{i}" for i in range(50)]
    full = stable_hashes(values)
    hashed = []
    monkeypatch.setattr(rows, "stable_hashes", lambda v: hashed.append(len(v)) or stable_hashes(v))
    previous = pa.table({"rank": pa.array(range(40)), "hash": pa.array(full[:40])})
    assert np.array_equal(rows.code_hashes(previous, values), full) and hashed == [1, 10]  # a check of the last, and 10 new
    for stale in (pa.table({"rank": pa.array(range(40)), "hash": pa.array(full[1:41])}),  # not this dictionary's
                  pa.table({"rank": pa.array(range(60)), "hash": pa.array(np.zeros(60, np.int64))}),  # a longer one
                  pa.table({"rank": pa.array(range(40))}), None):  # a state from before the column
        assert np.array_equal(rows.code_hashes(stale, values), full)


def test_a_state_of_npz_segments_is_read_and_rewritten_as_arrow_by_the_next_update(tmp_path):
    """States written before segments were Arrow files keep working: an update resolves from them
    incrementally and saves every segment as Arrow, to be memory-mapped from then on."""
    from graphwright.storage.location import IndexFiles

    src, updated = tmp_path / "src", tmp_path / "updated"
    src.mkdir()
    _index(src, updated, DOCS)
    files = IndexFiles(updated)
    meta = json.loads(files.read_bytes("state/resolve/state.json"))
    for table, segments in meta["segments"].items():
        for path, relative in segments.items():
            old = relative.rsplit(".", 1)[0] + ".npz"
            files.write_arrays(old, **files.read_arrays(relative))
            files.delete(relative)
            segments[path] = old
    files.write_bytes("state/resolve/state.json", json.dumps(meta).encode())
    summary = _index(src, updated, DOCS | {"d2": FRED})
    assert _resolve_details(updated, summary)["linking"]["incremental"] is True
    meta = json.loads(files.read_bytes("state/resolve/state.json"))
    segments = [r for s in meta["segments"].values() for r in s.values()]
    assert segments and all(r.endswith(".arrow") for r in segments)
    assert not [p for p in files.list("state/resolve") if p.endswith(".npz")]
    _assert_equals_fresh(tmp_path, src, updated, DOCS | {"d2": FRED})


def test_pairs_scored_again_reuse_their_name_scores(tmp_path, monkeypatch):
    from graphwright.stages.resolve import scoring

    scored, named = [], []
    score, name_score = scoring.PairScorer._score, scoring.name_score
    monkeypatch.setattr(scoring.PairScorer, "_score", lambda self, a, b, *known: scored.append((a, b)) or score(self, a, b, *known))
    monkeypatch.setattr(scoring, "name_score", lambda a, b: named.append((a, b)) or name_score(a, b))
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    before = set(scored)
    scored.clear(), named.clear()
    # Marley's and Keller's profiles change: their pairs are scored again
    docs = DOCS | {"d5": "Jacob Marley wrote to Bruno Keller from London. Marley and Keller met in London."}
    _index(src, index, docs)
    again = set(scored) & before
    assert again and not again & set(named)
    assert set(named) <= set(scored) - before
    _assert_equals_fresh(tmp_path, src, index, docs)


def test_the_pair_cache_keeps_its_rows_and_adds_the_memos_new_pairs_without_a_set_of_every_pair(monkeypatch):
    """memo_table: the kept rows, then the memo's pairs that are not among them (and whose keys
    are still there), matched in Arrow: no Python set of the cached pairs (290k at 145k chunks)."""
    from graphwright.stages.resolve import pair_cache
    from graphwright.stages.resolve.scoring import PairEvidence

    def evidence(a, b, score):
        return PairEvidence(a, b, score, 0.5, False, 0.1, 0.2, None, "compatible")

    fingerprint = {k: i for i, k in enumerate(["ann", "ann lee", "bo", "bo lee", "cy", "cy lee"])}
    cached = [evidence("ann", "ann lee", 0.9), evidence("bo", "bo lee", 0.2), evidence("bo", "cy", 0.1)]
    kept = pair_cache.memo_table({(e.a, e.b): e for e in cached}, fingerprint)
    memo = {(e.a, e.b): e for e in cached[:1]}  # a kept pair linking looked at again
    memo |= {(e.a, e.b): e for e in (evidence("cy", "cy lee", 0.8), evidence("ann", "gone", 0.7), evidence("ann lee", "bo", 0.3))}

    monkeypatch.setattr(pair_cache, "set", lambda *args: 1 / 0, raising=False)  # shadows the builtin in the module
    table = pair_cache.memo_table(memo, fingerprint, kept)
    monkeypatch.undo()
    rows = list(zip(*(table.column(c).to_pylist() for c in ("a", "b", "score", "fa", "fb"))))
    assert rows == [("ann", "ann lee", 0.9, 0, 1), ("bo", "bo lee", 0.2, 2, 3), ("bo", "cy", 0.1, 2, 4),
                    ("cy", "cy lee", 0.8, 4, 5), ("ann lee", "bo", 0.3, 1, 2)]


def test_a_grown_dictionary_sorts_its_new_values_into_the_previous_order(monkeypatch):
    """A dictionary only grows: the positions of its last sort order the old values, and only the
    values added since are sorted and merged in (at 1.2M chunks, 0.5 s of every update's sort of
    the chunk ids). The result equals a full sort; positions that do not sort the old values
    (another dictionary's, not a permutation) and values of several lengths are sorted whole."""
    import random

    import numpy as np
    import pyarrow.compute as pc

    from graphwright.stages.resolve import codes

    rng = random.Random(7)
    ids = [f"{rng.getrandbits(64):016x}" for _ in range(3000)]
    dictionary = codes.Dictionary()
    dictionary.codes(pa.array(ids[:2000]))
    _, before = dictionary.sort()
    dictionary.codes(pa.array(ids[1500:] + ids[:10]))  # 1,000 new values; the repeats keep their codes
    whole_values, whole = dictionary.sort()
    sorts = []
    real = pc.sort_indices
    monkeypatch.setattr(codes.pc, "sort_indices", lambda values, *a, **k: sorts.append(len(values)) or real(values, *a, **k))
    merged_values, merged = dictionary.sort(before)
    assert sorts == [1000] and merged_values.equals(whole_values) and np.array_equal(merged, whole)
    for wrong in (before[::-1].copy(), np.zeros(len(before), np.int32), before[:-1]):
        sorts.clear()
        values, position = dictionary.sort(wrong)
        assert values.equals(whole_values) and np.array_equal(position, whole) and 3000 in sorts
    mixed = codes.Dictionary()
    mixed.codes(pa.array(["b", "aa"]))
    _, first = mixed.sort()
    mixed.codes(pa.array(["c", "ab"]))
    values, _ = mixed.sort(first)
    assert values.to_pylist() == ["aa", "ab", "b", "c"]


def test_an_update_makes_each_description_plan_once_and_a_full_resolve_twice(tmp_path, monkeypatch):
    from graphwright.stages.resolve import core

    made = []
    real = core.DescriptionPlan.__init__

    def counted(self, group, *args, **kwargs):
        made.append(len(group))
        real(self, group, *args, **kwargs)

    monkeypatch.setattr(core.DescriptionPlan, "__init__", counted)
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    assert made and len(made) % 2 == 0  # a full resolve: needed() then merge, a plan made each time
    made.clear()
    summary = _index(src, index, DOCS | {"d2": FRED})
    assert _resolve_details(index, summary)["linking"]["incremental"] is True
    assert len(made) == 2  # the rebuilt entities' plan and the rebuilt relationships', once each
    _assert_equals_fresh(tmp_path, src, index, DOCS | {"d2": FRED})


def test_kept_description_plans_merge_as_plans_made_again():
    import numpy as np

    from graphwright.stages.resolve import core
    from graphwright.stages.resolve.descriptions import Texts

    rng = np.random.default_rng(3)
    n, groups = 500, 40
    hashes = rng.integers(0, 60, n).astype(np.int64)
    table = {"description": hashes, "length": rng.integers(1, 30, n).astype(np.int64), "chunk_id": rng.integers(0, 50, n)}
    texts = Texts(np.arange(60, dtype=np.int64), pa.array([f"text {i}" * (1 + i % 4) for i in range(60)]))
    group = rng.integers(0, groups, n)
    merged = {}
    for keep in (0, 1 << 20):
        parts = core._Parts(group, groups, None, table, np.arange(50), 40, False, keep)
        parts.needed()
        merged[keep] = [parts.plan(p)[2].merge(texts).to_pylist() for p in range(len(parts))]
        assert parts.plans_made == (len(parts) if keep else 2 * len(parts))
        assert not parts.kept  # each kept plan let go at its second use
    assert merged[0] == merged[1 << 20]


def test_an_update_joins_the_mentions_and_the_assertions_segments_side_by_side(tmp_path, monkeypatch):
    """Each table's segments are loaded and joined in a thread of its own (at 1.2M chunks, 18M
    rows of copies and page faults), after both tables' new files were coded in turn (shared
    dictionaries: codes must not depend on thread timing)."""
    import threading

    from graphwright.stages.resolve import state

    both_in = threading.Barrier(2, timeout=20)
    tables, real = [], state.load_segment

    def meeting(files, relative):
        table = relative.split("/segments/")[1].split("/")[0]
        if table not in tables:  # the first segment of each table waits for the other table's
            tables.append(table)
            both_in.wait()
        return real(files, relative)

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    monkeypatch.setattr(state, "load_segment", meeting)
    summary = _index(src, index, DOCS | {"d2": FRED})
    assert sorted(tables) == ["assertions", "mentions"] and not both_in.broken
    assert _resolve_details(index, summary)["linking"]["incremental"] is True
    _assert_equals_fresh(tmp_path, src, index, DOCS | {"d2": FRED})


def test_an_update_whose_keys_changed_searches_the_candidates_while_it_makes_the_profiles(tmp_path, monkeypatch):
    """Without embeddings the candidate pairs depend on the keys alone: when new names come,
    they are searched once, in a thread, while the key profiles are made (the n-gram search over
    every key is about a second of an update at 145k and 1.2M chunks)."""
    import threading

    from graphwright.stages.resolve import core, incremental

    both_in = threading.Barrier(2, timeout=20)
    searched, real_search, real_profiles = [], incremental.searched_candidates, core._profiles

    def search(*args):
        searched.append(threading.current_thread().name)
        both_in.wait()  # the profiles are being made meanwhile
        return real_search(*args)

    def profiles(*args):
        both_in.wait()
        return real_profiles(*args)

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    monkeypatch.setattr(incremental, "searched_candidates", search)
    monkeypatch.setattr(core, "_profiles", profiles)
    summary = _index(src, index, DOCS | {"d2": FRED})
    assert len(searched) == 1 and searched[0].startswith("resolve-candidates") and not both_in.broken
    details = _resolve_details(index, summary)["linking"]
    assert details["incremental"] is True and details["candidates_reused"] is False
    monkeypatch.undo()
    _assert_equals_fresh(tmp_path, src, index, DOCS | {"d2": FRED})


def test_an_update_whose_keys_changed_searches_again_only_the_keys_a_new_name_can_reach(tmp_path):
    """Each key's n-gram hits are kept in resolve's state: when names come, only the keys they
    can reach are searched again (stages.resolve.ngram_hits), and the rows equal a fresh build's."""
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    summary = _index(src, index, DOCS | {"d2": FRED})
    details = _resolve_details(index, summary)["linking"]
    assert details["incremental"] is True and details["candidates_reused"] is False
    assert 0 < details["ngram_keys_searched"] < details["keys"], details
    _assert_equals_fresh(tmp_path, src, index, DOCS | {"d2": FRED})


def _reference_fingerprints(profiles, chunk_hash, texts=None) -> dict[str, int]:
    """A hash of each key's KeyProfile, from the objects one by one (as before the arrays)."""
    import numpy as np

    from graphwright.stages.resolve.pair_cache import mix, set_hashes, stable_hashes

    keys = list(profiles)
    ordered = [profiles[k] for k in keys]
    key_hash = stable_hashes(keys)

    def sets(codes, item_hash):
        owner = np.repeat(np.arange(len(codes)), [len(c) for c in codes])
        flat = np.concatenate(codes) if codes else np.empty(0, np.int64)
        return set_hashes(owner, item_hash[flat], len(codes))

    parts = [key_hash, np.array([p.mentions for p in ordered], dtype=np.int64),
             stable_hashes([repr(sorted(p.types.items())) for p in ordered]),
             sets([p.chunks.codes for p in ordered], chunk_hash), sets([p.neighbours.codes for p in ordered], key_hash)]
    if texts is not None:
        parts.append(stable_hashes(texts))
    return dict(zip(keys, mix(*parts).tolist()))


def test_an_update_makes_the_profiles_of_the_keys_it_scores_not_every_keys(tmp_path, monkeypatch):
    """Profiles are arrays; a key's KeyProfile is made when linking scores one of its pairs (an
    update scores the pairs whose profiles changed). The fingerprints read from the arrays are
    those of the profiles made one by one."""
    import numpy as np

    from graphwright.stages.resolve import core

    made, real = [], core._profiles
    monkeypatch.setattr(core, "_profiles", lambda *args: made.append(real(*args)) or made[-1])
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS | {f"x{i}": f"Clerk{i} Hale waited in Dunmore with Person{i} Quill." for i in range(12)})
    made.clear()
    summary = _index(src, index, DOCS | {f"x{i}": f"Clerk{i} Hale waited in Dunmore with Person{i} Quill." for i in range(12)}
                     | {"d2": FRED})
    assert _resolve_details(index, summary)["linking"]["incremental"] is True
    profiles = made[-1]
    assert 0 < profiles.made() < len(profiles) / 2, (profiles.made(), len(profiles))
    chunk_hash = np.arange(int(profiles.chunk_codes.max()) + 1, dtype=np.int64) * 7919 + 13
    assert profiles.fingerprints(chunk_hash, None) == _reference_fingerprints(profiles, chunk_hash)
    texts = [f"text {k}" for k in profiles]
    assert profiles.fingerprints(chunk_hash, texts) == _reference_fingerprints(profiles, chunk_hash, texts)
    monkeypatch.undo()
    _assert_equals_fresh(tmp_path, src, index, DOCS | {f"x{i}": f"Clerk{i} Hale waited in Dunmore with Person{i} Quill." for i in range(12)}
                         | {"d2": FRED})


def test_an_update_with_name_embeddings_reads_the_profile_texts_from_the_rows_the_plan_names(tmp_path, monkeypatch):
    """With resolve.embeddings, a key's profile text (best name and descriptions) comes from the
    rows its description plan names, as the entity rows' texts do: no search among all mentions
    for a row holding each description."""
    from graphwright.stages.resolve import texts

    config = CONFIG.model_copy(update={"resolve": CONFIG.resolve.model_copy(update={"embeddings": True})})
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _write(src, DOCS)
    run_index([str(src)], index, config, show_progress=False, log=lambda m: None)
    monkeypatch.setattr(texts, "first_index", lambda *a: pytest.fail("a search for the rows holding the texts"))
    _write(src, DOCS | {"d2": FRED})
    summary = run_index([str(src)], index, config, show_progress=False, log=lambda m: None)
    assert _resolve_details(index, summary)["linking"]["incremental"] is True
    monkeypatch.undo()
    fresh = tmp_path / "fresh"
    run_index([str(src)], fresh, config, show_progress=False, log=lambda m: None)
    for table in OUTPUTS:
        assert _rows(index, table) == _rows(fresh, table), table


class _Meeting:
    """Two pieces of work that must run at once: each waits for the other at its start."""

    def __init__(self):
        import threading

        self.threading, self.barrier, self.seen = threading, threading.Barrier(2, timeout=5), []

    def wrap(self, work, when=lambda *args: True):
        def wrapped(*args, **kwargs):
            if len(self.seen) < 2 and when(*args):
                try:
                    self.barrier.wait()
                    self.seen.append(self.threading.current_thread().name)
                except self.threading.BrokenBarrierError:
                    self.seen.append(None)
            return work(*args, **kwargs)
        return wrapped

    def met(self) -> bool:
        return len(self.seen) == 2 and None not in self.seen and len(set(self.seen)) == 2


@pytest.mark.parametrize("pair", ["entity counts | description plans", "chunk ranks | key profiles",
                                  "entity lineage | relationship pairs", "key chunks | key neighbours"])
def test_resolve_makes_independent_steps_side_by_side(tmp_path, monkeypatch, pair):
    """Steps of resolve that spend their time in numpy's sorts or Arrow (which release the GIL) and
    need nothing of each other run in two threads at once: the entity rows' types, counts and
    document lists beside their description plans and text reads; the chunks' ranks (the chunks
    table read and looked up) beside the keys' profiles; the entities' lineage lists beside the
    relationships' pairs; the keys' related keys beside their chunks."""
    from graphwright.stages.resolve import core, incremental
    from graphwright.storage import lineage

    meeting = _Meeting()
    if pair == "entity counts | description plans":
        monkeypatch.setattr(core, "_types", meeting.wrap(core._types))
        monkeypatch.setattr(core._Parts, "needed_at", meeting.wrap(core._Parts.needed_at, lambda parts: parts.want_overflow is False))
    elif pair == "chunk ranks | key profiles":
        monkeypatch.setattr(incremental, "chunk_ranks", meeting.wrap(incremental.chunk_ranks))
        monkeypatch.setattr(core, "_profiles", meeting.wrap(core._profiles))
    elif pair == "key chunks | key neighbours":
        from graphwright.stages.resolve import profiles

        monkeypatch.setattr(profiles, "key_chunks", meeting.wrap(profiles.key_chunks))
        monkeypatch.setattr(profiles, "key_neighbours", meeting.wrap(profiles.key_neighbours))
    else:
        monkeypatch.setattr(lineage, "entity_lists", meeting.wrap(lineage.entity_lists))
        monkeypatch.setattr(core, "_supported_pairs", meeting.wrap(core._supported_pairs))
    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    assert meeting.met(), meeting.seen


def test_a_loaded_dictionary_codes_new_batches_without_making_its_values_python():
    """Values a state loads stay in Arrow: a batch's distinct values are probed against them
    (no Python string or dict entry per loaded value: 0.8 s of every update at 1.2M chunks)
    until Dictionary.PROBES batches, then the dict is made; the codes, the values, the slices a
    save writes and the sort are those of a dictionary that coded everything itself."""
    import random

    from graphwright.stages.resolve import codes, rows

    rng = random.Random(3)
    ids = [f"{rng.getrandbits(64):016x}" for _ in range(3000)]
    batches = [ids[1000 + 100 * i:1300 + 100 * i] + ids[:5] for i in range(codes.Dictionary.PROBES + 3)]
    whole = codes.Dictionary(str.upper)
    whole.codes(pa.array(ids[:2000]))
    expected = [whole.codes(pa.array(b)).tolist() for b in batches]
    loaded = codes.Dictionary(str.upper, pa.array(ids[:2000]), [i.upper() for i in ids[:2000]])
    got = []
    for i, batch in enumerate(batches):
        got.append(loaded.codes(pa.array(batch, pa.large_string())).tolist())
        if i < codes.Dictionary.PROBES:  # probed: only the values added since the load are Python
            assert loaded._list is None and len(loaded._code) == len(loaded) - 2000
    assert got == expected and len(loaded._code) == len(loaded) == len(whole)  # then the dict of every value
    assert loaded.values == whole.values and loaded.keys.tolist() == whole.keys.tolist()
    fresh = codes.Dictionary(None, pa.array(ids[:2000]))
    fresh.codes(pa.array(ids[1990:2100]))
    assert fresh._list is None and fresh.values_from(1995) == ids[1995:2100] and fresh.arrow(2050).to_pylist() == ids[2050:2100]
    assert fresh.sort()[0].equals(codes.Dictionary(None, pa.array(ids[:2100])).sort()[0])
    assert rows.code_hashes(None, fresh).tolist() == rows.code_hashes(None, ids[:2100]).tolist()


def test_the_files_a_deletion_moved_rows_into_take_their_segments_from_the_files_the_rows_came_from(tmp_path, monkeypatch):
    """delete_matching names, in its commit, where each moved file's rows came from; the next
    resolve makes that file's segment from the old files' segments (rows of another extractor
    and rows left out counted in the places) instead of coding it, through two deletions in a
    row, and the segment equals the one coding the file gives."""
    import numpy as np

    from graphwright.stages.resolve import state
    from graphwright.storage import contracts

    store, mine = IndexStore(tmp_path / "index"), "llm:a"

    def mentions(start: int, n: int) -> pa.Table:
        rows = [{"mention_id": f"m{i}", "chunk_id": f"c{i % 7}", "doc_id": f"d{i % 3}", "extractor": mine if i % 4 else "nlp",
                 "name": f"Name {i % 5}", "type": "PERSON", "description": f"said {i}", "count": i % 3 + 1} for i in range(start, start + n)]
        return pa.Table.from_pylist(rows, schema=contracts.schema("mentions").arrow)

    for start in (0, 30, 60):
        store.append("mentions", mentions(start, 30))
    st = state.ResolveState.empty(state.fingerprint(mine, "linked"), "linked")
    for path, _ in patch.data_files(store, "mentions"):
        relative = f"{state.ROOT}/segments/mentions/{len(st.segments['mentions'])}.arrow"
        store.files.write_arrays(relative, **state.code_file(store, "mentions", path, mine, st))
        st.segments["mentions"][path] = relative
    made_from = store.version("mentions")
    assert patch.delete_matching(store, "mentions", "chunk_id", ["c2", "c5"], record_moves=True) > 0
    assert patch.delete_matching(store, "mentions", "chunk_id", ["c3"], record_moves=True) > 0  # the moved file moved again
    coded = []
    code_file = state.code_file
    monkeypatch.setattr(state, "code_file", lambda *a: (coded.append(a[2]), code_file(*a))[1])
    current, new = state.code_new_files(store, st, "mentions", mine, made_from)
    assert set(new) == set(current) - set(st.segments["mentions"]) and new and not coded
    for path, segment in new.items():
        expected = code_file(store, "mentions", path, mine, st)
        assert set(segment) == set(expected)
        for column in expected:
            assert segment[column].dtype == expected[column].dtype and np.array_equal(segment[column], expected[column]), column
    _, again = state.code_new_files(store, st, "mentions", mine)  # without the version: coded
    assert set(again) == set(new) and len(coded) == len(new)
    # an account that does not add up, or a deletion that names no sources: coded
    from graphwright.storage import changes

    actions = changes.commit_actions

    def miscounted(store_, name, version):
        commit = actions(store_, name, version)
        commit.records = {path: rows + 1 for path, rows in commit.records.items()}
        return commit

    monkeypatch.setattr(state, "commit_actions", miscounted)
    coded.clear()
    _, new = state.code_new_files(store, st, "mentions", mine, made_from)
    assert len(new) == 1 and len(coded) == 1
    monkeypatch.setattr(state, "commit_actions", actions)
    coded.clear()
    assert patch.delete_matching(store, "mentions", "chunk_id", ["c4"]) > 0
    _, new = state.code_new_files(store, st, "mentions", mine, made_from)
    assert len(new) == 1 and len(coded) == 1


def test_an_update_codes_what_extract_appended_and_carries_over_what_its_deletions_moved(tmp_path, monkeypatch):
    """Through the pipeline: extract's deletions name their moved rows' sources, and the next
    resolve codes only the files extract appended; the result equals a fresh resolve's."""
    from graphwright.stages.resolve import state
    from graphwright.storage import changes

    src, index = tmp_path / "src", tmp_path / "index"
    src.mkdir()
    _index(src, index, DOCS)
    store = IndexStore(index)
    before = {t: store.version(t) for t in ("mentions", "assertions")}
    coded, code_file = [], state.code_file
    monkeypatch.setattr(state, "code_file", lambda store_, table, path, *a: coded.append((table, path)) or code_file(store_, table, path, *a))
    docs = {k: v for k, v in DOCS.items() if k != "d3"} | {"d2": FRED}  # d3's rows leave a file that holds others
    _index(src, index, docs)
    moved = set()
    for table, since in before.items():
        current = {path for path, _ in patch.data_files(store, table)}
        for version in range(since + 1, store.version(table) + 1):
            moved |= {(table, path) for path in changes.commit_actions(store, table, version).moved if path in current}
    assert moved and coded and not moved & set(coded)
    _assert_equals_fresh(tmp_path, src, index, docs)
