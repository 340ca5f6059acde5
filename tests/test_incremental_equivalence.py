"""Property: updating an index to a new corpus state gives the same documents, chunks, entities,
aliases, relationships and support sets as indexing that state from scratch (deterministic nlp
extractor); the update resolves incrementally (stages.resolve.incremental), the fresh build in full."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphwright.config import load_config
from graphwright.pipeline.runner import run_index
from graphwright.storage.delta import IndexStore

# with name variants that linking merges or keeps apart depending on the other documents
# ('Scrooge' joins 'Ebenezer Scrooge' unless 'Fred Scrooge' makes it ambiguous), so that updates
# change aliases and merges too
PEOPLE = ["Alice Moreau", "Bruno Keller", "Chidi Okafor", "Dana Whitfield", "Emil Novak", "Farah Haddad", "Goran Petrov",
          "Moreau", "Scrooge", "Ebenezer Scrooge", "Fred Scrooge"]
PLACES = ["Port Elling", "Kestrel Island", "Greywater River", "Amberfield"]
ORGS = ["Harbor Company", "Lantern Society"]
VERBS = ["met", "wrote to", "argued with", "travelled with", "thanked"]

sentence = st.builds(
    lambda a, v, b, p: f"{a} {v} {b} near {p}.",
    st.sampled_from(PEOPLE + ORGS), st.sampled_from(VERBS), st.sampled_from(PEOPLE), st.sampled_from(PLACES),
)
document = st.lists(sentence, min_size=1, max_size=6).map(" ".join)
corpus = st.dictionaries(st.sampled_from([f"doc{i:02d}" for i in range(12)]), document, min_size=2, max_size=8)

COMPARED = {
    "documents": ["doc_id", "source_key", "title", "text", "content_hash", "metadata", "n_chars"],
    "chunks": None,
    "mentions": None,
    "assertions": None,
    "entities": None,
    "entity_aliases": None,
    "relationships": None,
}


def _write(folder: Path, docs: dict[str, str]) -> None:
    for old in folder.glob("*.txt"):
        old.unlink()
    for name, text in docs.items():
        (folder / f"{name}.txt").write_text(text)


def _rows(index: Path, table: str, columns):
    t = IndexStore(index).read(table, columns=columns)
    return sorted(t.to_pylist(), key=lambda r: sorted((k, str(v)) for k, v in r.items()))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    a=corpus,
    b=corpus,
    drop=st.integers(min_value=0, max_value=3),
    modify=st.integers(min_value=0, max_value=3),
    extra=document,
)
def test_update_equals_fresh_build(a, b, drop, modify, extra):
    config = load_config(overrides={"execution": {"executor": "local"}, "embed": {"engine": "hashing", "dim": 32},
                                    "ingest": {"max_delete_fraction": 1.0}})
    quiet = lambda msg: None  # noqa: E731
    final = dict(a)
    for name in sorted(a)[:drop]:  # C: deleted
        del final[name]
    for name in sorted(final)[:modify]:  # D: modified
        final[name] = final[name] + " " + extra
    for name, text in b.items():  # B: added (or replacing)
        final.setdefault(name, text)
    if not final:
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src, updated, fresh = tmp / "src", tmp / "updated", tmp / "fresh"
        src.mkdir()
        _write(src, a)
        run_index([str(src)], updated, config, show_progress=False, log=quiet)
        _write(src, final)
        run_index([str(src)], updated, config, show_progress=False, log=quiet)
        run_index([str(src)], fresh, config, show_progress=False, log=quiet)
        for table, columns in COMPARED.items():
            assert _rows(updated, table, columns) == _rows(fresh, table, columns), table


@pytest.mark.parametrize("added", [False, True])
def test_an_update_under_another_embedder_equals_a_fresh_build_when_linking_scores_embeddings(tmp_path, added):
    """With resolve.embeddings the pairs' scores depend on the embedder: another model (here the
    hashing embedder's dimension) must not keep the state's scores, merges or alias evidence."""
    docs = {"d1": "Ebenezer Scrooge met Jacob Marley in London. Scrooge thanked Marley in London.",
            "d3": "Alice Moreau wrote to Bruno Keller near Port Elling."}

    def config(dim: int):
        return load_config(overrides={"execution": {"executor": "local"}, "embed": {"engine": "hashing", "dim": dim},
                                      "resolve": {"embeddings": True}})

    src, fresh = tmp_path / "src", tmp_path / "fresh-src"
    for folder in (src, fresh):
        folder.mkdir()
    _write(src, docs)
    run_index([str(src)], tmp_path / "index", config(32), show_progress=False, log=lambda m: None)
    final = docs | ({"d4": "Chidi Okafor travelled to Kestrel Island."} if added else {})
    _write(src, final)
    _write(fresh, final)
    run_index([str(src)], tmp_path / "index", config(16), show_progress=False, log=lambda m: None)
    run_index([str(fresh)], tmp_path / "fresh", config(16), show_progress=False, log=lambda m: None)
    for table in ("entities", "entity_aliases", "relationships"):
        assert _rows(tmp_path / "index", table, None) == _rows(tmp_path / "fresh", table, None), table
