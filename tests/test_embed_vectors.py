import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from graphwright.config import EmbedConfig, VectorConfig
from graphwright.engines import vectors as vectors_module
from graphwright.engines.embed import EmbedBatch, make_embedder, model_name
from graphwright.engines.embed.hashing_engine import HashingEmbedder
from graphwright.engines.vectors import (
    build_index,
    load_index,
    may_update,
    save_index,
    update_index,
)

HASH = EmbedConfig(engine="hashing", dim=64)


def test_hashing_embedder_is_normalized_and_deterministic():
    texts = ["Mara Voss sailed into Port Elling.", "Tobias Reed counted crates.", "A", "naïve Zoë ünïcode"]
    a = HashingEmbedder(HASH).encode(texts)
    b = HashingEmbedder(HASH).encode(texts)  # a fresh instance: no hidden state, no randomness
    assert a.shape == (4, 64) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)


def test_hashing_embedder_empty_inputs():
    emb = HashingEmbedder(HASH)
    assert emb.encode([]).shape == (0, 64)
    vec = emb.encode(["", "  ...  "])
    assert not np.isnan(vec).any()
    assert np.all(vec == 0)  # no words: a zero vector rather than NaN


def test_hashing_embedder_is_case_insensitive_and_similarity_follows_words():
    emb = HashingEmbedder(EmbedConfig(engine="hashing", dim=256))
    q, same, close, far = emb.encode([
        "Who counted the crates in Port Elling?",
        "WHO COUNTED THE CRATES IN PORT ELLING?",
        "Tobias Reed counted the crates in Port Elling",
        "fireworks over the lantern festival",
    ])
    assert np.dot(q, same) == pytest.approx(1.0)
    assert np.dot(q, close) > np.dot(q, far)


def test_model_name_and_cached_embedder():
    assert model_name(HASH) == "hashing-64"
    assert model_name(EmbedConfig()) == "all-MiniLM-L6-v2"
    assert make_embedder(HASH) is make_embedder(EmbedConfig(engine="hashing", dim=64))
    assert make_embedder(HASH).name == "hashing-64"


def test_embed_batch_output():
    batch = pa.table({"kind": ["chunk", "entity"], "item_id": ["c1", "e1"], "text": ["Port Elling", "Mara Voss"]})
    out = EmbedBatch(HASH)(batch)
    assert out.column_names == ["kind", "item_id", "vector"]
    assert out.column("item_id").to_pylist() == ["c1", "e1"]
    vectors = np.array(out.column("vector").to_pylist(), dtype=np.float32)
    np.testing.assert_array_equal(vectors, make_embedder(HASH).encode(["Port Elling", "Mara Voss"]))


def test_an_embed_batch_of_a_model_without_torch_does_not_import_torch():
    # the stage passes a thread cap to every engine; importing torch for it cost 3 s a run
    code = ("import sys; from graphwright.config import EmbedConfig; from graphwright.engines.embed import EmbedBatch; "
            "EmbedBatch(EmbedConfig(engine='hashing', dim=8), 2); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ vectors

def random_unit(n, dim, seed):
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_exact_search_returns_the_true_nearest():
    vectors = random_unit(300, 32, seed=1)
    queries = random_unit(20, 32, seed=2)
    ids = [f"item-{i}" for i in range(300)]
    index = build_index(ids, vectors, VectorConfig())
    results = index.search(queries, 5)
    truth = np.argsort(-(queries @ vectors.T), axis=1)[:, :5]
    for row, expected in zip(results, truth):
        assert [i for i, _ in row] == [ids[j] for j in expected]
        scores = [s for _, s in row]
        assert scores == sorted(scores, reverse=True)
    best = results[0][0]
    assert best[1] == pytest.approx(float(queries[0] @ vectors[truth[0][0]]), abs=1e-5)


def test_search_caps_k_and_handles_empty_index():
    index = build_index(["a", "b"], random_unit(2, 8, seed=3), VectorConfig())
    assert len(index.search(random_unit(1, 8, seed=4), 10)[0]) == 2
    empty = build_index([], np.zeros((0, 8), np.float32), VectorConfig())
    assert empty.search(random_unit(3, 8, seed=5), 4) == [[], [], []]


def test_save_load_round_trip(tmp_path):
    vectors = random_unit(50, 16, seed=6)
    ids = [f"id{i}" for i in range(50)]
    index = build_index(ids, vectors, VectorConfig())
    path = tmp_path / "vectors" / "chunk-abc.faiss"
    save_index(index, path)
    assert path.exists() and path.with_suffix(".ids.parquet").exists()
    assert not path.with_suffix(".tmp").exists()
    loaded = load_index(path)
    assert loaded.ids == ids
    queries = random_unit(5, 16, seed=7)
    assert loaded.search(queries, 3) == index.search(queries, 3)
    np.testing.assert_allclose(loaded.index.reconstruct(7), vectors[7], rtol=1e-6)


def test_hnsw_index_above_threshold(tmp_path):
    vectors = random_unit(200, 16, seed=8)
    ids = [str(i) for i in range(200)]
    index = build_index(ids, vectors, VectorConfig(hnsw_threshold=100))
    assert type(index.index).__name__ == "IndexHNSWFlat"
    hits = index.search(vectors[:10], 1)
    assert [h[0][0] for h in hits] == ids[:10]  # each vector finds itself
    save_index(index, tmp_path / "h.faiss")
    assert load_index(tmp_path / "h.faiss").search(vectors[:10], 1) == hits


def test_an_hnsw_index_updated_in_place_finds_what_a_rebuild_finds(tmp_path):
    config = VectorConfig(hnsw_threshold=100)
    vectors = random_unit(400, 16, seed=9)
    ids = [f"i{k:03d}" for k in range(400)]
    hashes = [f"h{k}" for k in range(400)]
    index = build_index(ids, vectors, config, hashes)
    # now: i000-i019 removed, i020-i039 changed (a new vector), i400-i429 new
    changed = random_unit(20, 16, seed=10)
    new = random_unit(30, 16, seed=11)
    now_ids = ids[20:] + [f"i{k:03d}" for k in range(400, 430)]
    now_hashes = [f"h{k}x" if k < 40 else f"h{k}" for k in range(20, 400)] + [f"h{k}" for k in range(400, 430)]
    vector_of = dict(zip(ids, vectors)) | dict(zip(ids[20:40], changed)) | dict(zip(now_ids[380:], new))
    asked = []

    def vectors_of(wanted):
        asked.extend(wanted)
        return np.stack([vector_of[w] for w in wanted])

    updated = update_index(index, now_ids, now_hashes, vectors_of, config)
    assert sorted(asked) == sorted(ids[20:40] + now_ids[380:])  # only new and changed vectors are read
    assert updated.ids[:40] == [None] * 40 and updated.index.ntotal == 450
    queries = np.stack([vector_of[i] for i in now_ids])
    save_index(updated, tmp_path / "u.faiss")
    loaded = load_index(tmp_path / "u.faiss")
    assert loaded.ids == updated.ids and loaded.text_hashes == updated.text_hashes
    for found in (updated, loaded):
        hits = found.search(queries, 5)
        assert [h[0][0] for h in hits] == now_ids  # each current vector finds itself
        assert not {i for row in hits for i, _ in row} & set(ids[:20])  # removed items never come back
        assert all(i is not None for row in hits for i, _ in row)
    old_vector_hits = found.search(vectors[20:40], 1)  # a changed item's old vector is gone
    assert all(row[0][1] < 0.999 for row in old_vector_hits)


def test_an_update_that_does_not_apply_returns_none(monkeypatch):
    config = VectorConfig(hnsw_threshold=100)
    vectors = random_unit(200, 8, seed=12)
    ids, hashes = [str(k) for k in range(200)], [f"h{k}" for k in range(200)]

    def never(wanted):
        pytest.fail("no vectors are read")

    hnsw = build_index(ids, vectors, config, hashes)
    assert may_update(config, 100) and not may_update(config, 99) and not may_update(VectorConfig(engine="cuvs", hnsw_threshold=100), 200)
    assert update_index(build_index(ids, vectors, config), ids, hashes, never, config) is None  # no text hashes
    assert update_index(hnsw, ids[:50], hashes[:50], never, config) is None  # below the HNSW threshold
    monkeypatch.setattr(vectors_module, "MAX_REMOVED_SHARE", 0.2)
    assert update_index(hnsw, ids[45:], hashes[45:], never, config) is None  # 45 of 200 removed
    kept = update_index(hnsw, ids[35:], hashes[35:], never, config)  # 35 removed, nothing added
    assert kept is not None and kept.ids.count(None) == 35


def test_a_cuvs_index_on_a_host_without_cuvs_is_a_clear_error(tmp_path):
    import importlib.util

    import pyarrow.parquet as pq

    if importlib.util.find_spec("cuvs") is not None:
        pytest.skip("cuVS is installed here")
    (tmp_path / "c.faiss").write_bytes(b"not read")
    pq.write_table(pa.table({"item_id": ["a"]}).replace_schema_metadata({"index_kind": "cagra"}), tmp_path / "c.ids.parquet")
    with pytest.raises(ValueError, match="built with cuVS"):
        load_index(tmp_path / "c.faiss")


QUERY_TEXTS = ["Who will carry the copper to Port Elling?", "If Gallu is a demon Lilu is what?", "naïve Zoë — ünïcode ✓ 東京",
               "x", " ".join(["a long passage about the harbor and its ledgers"] * 60), ""]


def test_query_embedder_gives_the_vectors_sentence_transformers_gives():
    from graphwright.engines.embed import make_query_embedder
    from graphwright.engines.embed.bert_numpy_engine import NumpyBertEmbedder

    query = make_query_embedder(EmbedConfig())
    assert isinstance(query, NumpyBertEmbedder)  # the bundled MiniLM runs without torch
    ours, theirs = query.encode(QUERY_TEXTS), make_embedder(EmbedConfig()).encode(QUERY_TEXTS)  # long text: truncated alike
    assert ours.shape == theirs.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, atol=2e-6)
    np.testing.assert_allclose(query.encode(QUERY_TEXTS[:1])[0], ours[0], atol=2e-6)  # padding in a batch changes nothing


def test_a_query_process_embeds_without_importing_torch(tmp_path):
    import subprocess
    import sys

    code = ("import sys\nfrom graphwright.config import EmbedConfig\nfrom graphwright.engines.embed import make_query_embedder\n"
            "make_query_embedder(EmbedConfig()).encode(['Who is Tobias Reed?'])\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_an_unsupported_model_folder_is_embedded_by_sentence_transformers(tmp_path):
    from graphwright.engines.embed.bert_numpy_engine import supports

    assert not supports(tmp_path)  # nothing there
    (tmp_path / "modules.json").write_text('[{"type": "sentence_transformers.models.Transformer", "path": ""}]')
    (tmp_path / "config.json").write_text('{"model_type": "xlm-roberta", "hidden_act": "gelu"}')
    assert not supports(tmp_path)
