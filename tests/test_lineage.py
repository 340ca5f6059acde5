"""Resolve's codes of the chunk lists (storage.lineage): the lists the tables hold, for the
versions they name only, read by cluster, report and embed instead of the lists."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest
from _helpers import index_fresh, run

from graphwright.stages.cluster.communities import ChunkLists
from graphwright.storage import lineage
from graphwright.storage.delta import IndexStore
from graphwright.storage.patch import patch_table


@pytest.fixture(scope="module")
def updated(tmp_path_factory):
    """The test corpus indexed, then one document edited and one deleted."""
    indexed = index_fresh(tmp_path_factory.mktemp("lineage"))
    harbor = indexed.corpus / "harbor.txt"
    harbor.write_text(harbor.read_text() + "\nCaptain Mara Voss sold the Kestrel to the Amberfield Guild.\n")
    (indexed.corpus / "council.txt").unlink()
    run([indexed.corpus], indexed.index)
    return indexed


def _decoded(coded: lineage.Lineage, lists: dict) -> dict:
    return {k: coded.chunk_ids.take(pa.array(v, pa.int32())).to_pylist() for k, v in lists.items()}


def test_the_lineage_holds_the_tables_chunk_lists(updated):
    store = updated.store
    coded = lineage.current(store)
    assert coded is not None
    entities = store.read("entities", columns=["entity_id", "chunk_ids"]).to_pylist()
    relationships = store.read("relationships", columns=["relationship_id", "source_id", "target_id", "chunk_ids"]).to_pylist()
    assert coded.entity_ids.to_pylist() == sorted(e["entity_id"] for e in entities)
    assert _decoded(coded, coded.entity_lists({e["entity_id"] for e in entities} | {"no-such-entity"})) == \
        {e["entity_id"]: e["chunk_ids"] for e in entities}
    found = coded.relationship_lists(*([r[c] for r in relationships] + ["x"] for c in ("relationship_id", "source_id", "target_id")))
    assert _decoded(coded, found) == {r["relationship_id"]: r["chunk_ids"] for r in relationships}
    assert len(relationships) > 10
    # only the lineage of the tables now is kept
    assert {p.split("/")[2] for p in store.files.list(lineage.ROOT)} == {lineage.folder(coded.versions).split("/")[2]}


def test_cluster_counts_chunks_from_the_lineage_as_from_the_lists(updated, monkeypatch):
    store = updated.store
    entity_ids = sorted(store.read("entities", columns=["entity_id"]).column("entity_id").to_pylist())

    def refused(*args, **kwargs):
        raise AssertionError("the chunk lists were scanned")

    scan = ChunkLists.scan
    listed = scan(store.scanner("entities")(["entity_id", "chunk_ids"]), entity_ids,
                  store.read("chunks", columns=["chunk_id"]).column("chunk_id"))
    monkeypatch.setattr(ChunkLists, "scan", refused)
    coded = ChunkLists.of_store(store, entity_ids)
    label = np.arange(len(entity_ids), dtype=np.int64) % 3
    assert coded.counts(label, 3).tolist() == listed.counts(label, 3).tolist()
    assert sorted(zip(coded.owner.tolist(), coded.names.take(pa.array(coded.codes)).to_pylist())) == \
        sorted(zip(listed.owner.tolist(), listed.names.take(pa.array(listed.codes)).to_pylist()))


def test_a_lineage_of_other_versions_is_not_read(updated, tmp_path):
    shutil.copytree(updated.index, tmp_path / "index")
    store = IndexStore(tmp_path / "index")
    coded = lineage.current(store)
    assert coded is not None
    assert lineage.current(store, {"entities": coded.versions["entities"] - 1}) is None  # a published version's pins
    # another writer of the entities table: the lineage no longer says what its lists are
    row = store.read("entities").slice(0, 1)
    patch_table(store, "entities", pa.array([], pa.string()), [row])
    assert lineage.current(store) is None
    entity_ids = sorted(store.read("entities", columns=["entity_id"]).column("entity_id").to_pylist())
    assert len(ChunkLists.of_store(store, entity_ids).owner) == len(coded.entity_codes)  # scanned from the table
    # a lineage whose meta.json was never put (a run killed while writing it) is none
    now = {t: store.version(t) for t in lineage.TABLES}
    lineage.write(store.files, coded, now)
    assert lineage.current(store) is not None
    store.files.delete(f"{lineage.folder(now)}/meta.json")
    assert lineage.current(store) is None


def test_the_stages_of_a_run_share_the_lineage_resolve_wrote(updated, monkeypatch):
    """Cluster, report and embed run in resolve's process: they take the lineage it wrote (or the
    one read last) as it is, checking only that its meta.json still names their versions."""
    from graphwright.storage.location import IndexFiles

    first = lineage.current(updated.store)
    read = []
    real = IndexFiles.read_bytes
    monkeypatch.setattr(IndexFiles, "read_bytes", lambda self, relative: read.append(relative) or real(self, relative))
    assert lineage.current(updated.store) is first
    assert read == [f"{lineage.folder(first.versions)}/meta.json"]


def test_list_columns_are_cut_from_the_codes_in_any_order(updated):
    """Resolve takes the chunk_ids of the rows it rebuilds from the lineage: any entities and
    relationships, in the order asked, as the tables list them."""
    coded = lineage.current(updated.store)
    store = updated.store
    entities = {r["entity_id"]: r["chunk_ids"] for r in store.read("entities", columns=["entity_id", "chunk_ids"]).to_pylist()}
    positions = np.random.default_rng(5).permutation(len(coded.entity_ids))[:7]
    assert coded.entity_chunk_ids(positions).to_pylist() == [entities[coded.entity_ids[i].as_py()] for i in positions.tolist()]
    assert coded.entity_chunk_ids(np.array([], np.int64)).to_pylist() == []
    relationships = store.read("relationships", columns=["source_id", "target_id", "chunk_ids"]).to_pylist()
    at = {e: i for i, e in enumerate(coded.entity_ids.to_pylist())}
    width = len(coded.entity_ids)
    code = {min(at[r["source_id"]], at[r["target_id"]]) * width + max(at[r["source_id"]], at[r["target_id"]]): r["chunk_ids"]
            for r in relationships}
    positions = np.random.default_rng(6).permutation(len(coded.pairs))[:9]
    assert coded.relationship_chunk_ids(positions).to_pylist() == [code[int(coded.pairs[i])] for i in positions.tolist()]
