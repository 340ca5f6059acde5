"""A vector index is built from the embeddings table batch by batch: no matrix of every vector
is held beside the index's own copy (at 1.2M chunks that matrix was 1.9 GB of the driver's peak)."""

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa

from graphwright.engines.vectors import load_from
from graphwright.storage.delta import IndexStore

N, DIM, PER_FILE = 160_000, 384, 10_000  # a matrix of every vector: 246 MB

BUILD = """
import json, sys
from graphwright.config import load_config
from graphwright.stages.embed.vector_files import write_vector_index
from graphwright.storage.delta import IndexStore

def status(field):
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith(field + ":")) * 1024

store = IndexStore(sys.argv[1])
cfg = load_config(None, {"vectors": {"hnsw_threshold": 10**9}})
import faiss  # libraries loaded before the baseline
store.read("embeddings", columns=["item_id", "vector"])
# the peak (VmHWM) restarts from here: ru_maxrss would also count the parent pytest process,
# whose peak a spawned child inherits on Linux
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
before = status("VmRSS")
relative, written = write_vector_index(store, "chunk", "m", cfg)
print(json.dumps({"relative": relative, "grew": status("VmHWM") - before}))
"""


def _store_with_vectors(tmp_path) -> tuple[IndexStore, np.ndarray]:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(N, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    order = rng.permutation(N)  # stored in no particular order, as commits store them
    store = IndexStore(tmp_path / "index")
    for start in range(0, N, PER_FILE):  # several files, as the stage's commits make them
        items = order[start:start + PER_FILE]
        part = vectors[items]
        store.append("embeddings", pa.table({
            "kind": ["chunk"] * len(part),
            "item_id": [f"c{i:06d}" for i in items],
            "model": ["m"] * len(part),
            "text_hash": [f"h{i}" for i in items],
            "vector": pa.ListArray.from_arrays(pa.array(np.arange(0, part.size + 1, DIM, dtype=np.int32)),
                                               pa.array(part.reshape(-1))),
        }))
    return store, vectors


def test_a_full_build_holds_the_index_and_a_batch_not_a_second_matrix_of_every_vector(tmp_path):
    store, vectors = _store_with_vectors(tmp_path)
    out = subprocess.run([sys.executable, "-c", BUILD, str(store.root)], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # the flat index holds one matrix of them (plus ids and a batch in flight); the old build held
    # a second matrix while adding it (2.3x here; 1.4x now)
    assert result["grew"] < 1.8 * vectors.nbytes, f"grew {result['grew'] / 1e6:.0f} MB for {vectors.nbytes / 1e6:.0f} MB of vectors"
    index = load_from(store.files, result["relative"])
    assert sorted(index.ids) == [f"c{i:06d}" for i in range(N)]
    assert index.text_hashes == [f"h{int(i[1:])}" for i in index.ids]  # each position's hash is its own item's
    probe = [0, PER_FILE - 1, PER_FILE, N - 1]
    assert [h[0][0] for h in index.search(vectors[probe], 1)] == [f"c{i:06d}" for i in probe]


def test_the_chunks_to_embed_are_the_new_chunks_texts_as_read_not_a_copy():
    from graphwright.stages.embed import _chunks_to_embed, _text_hashes

    read = pa.table({"chunk_id": ["c3", "c4"], "text": ["third chunk", "fourth chunk"]})
    asked = []

    class Store:
        def rows_in(self, name, column, values, columns):
            asked.append((name, column, list(values), columns))
            return read

    chunk_ids = pa.chunked_array([["c1", "c3", "c4"]])
    have = pa.table({"item_id": ["c1", "c2"], "text_hash": ["h1", "h2"]})
    todo, stale = _chunks_to_embed(Store(), "m", chunk_ids, have)
    assert asked == [("chunks", "chunk_id", ["c3", "c4"], ["chunk_id", "text"])]  # only new chunks' texts are read
    assert stale.to_pylist() == ["c2"] and todo.column("item_id").to_pylist() == ["c3", "c4"]
    # at 1.2M chunks each copy of the texts was 1.3 GB of the driver's peak
    assert todo.column("text").chunk(0).buffers()[2].address == read.column("text").chunk(0).buffers()[2].address
    assert todo.column("text_hash").to_pylist() == _text_hashes("m", read.column("text")).to_pylist()
