"""Helpers shared by the test modules (imported as a plain module: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from graphwright.config import PipelineConfig, load_config
from graphwright.storage import contracts

DATA = Path(__file__).parent / "data"
CORPUS = DATA / "corpus"
CONFIG_FILE = DATA / "test-config.yaml"

# every document of tests/data/corpus, by source key
CORPUS_KEYS = {"harbor.txt", "festival.md", "council.txt", "notes/river.txt", "letter-1", "letter-2"}


def two_documents(root: Path) -> Path:
    """A corpus folder under `root` with two documents of the test corpus (nine chunks)."""
    folder = root / "corpus"
    folder.mkdir()
    for name in ("harbor.txt", "festival.md"):
        shutil.copy(CORPUS / name, folder / name)
    return folder


def make_config(**overrides: dict) -> PipelineConfig:
    """The fast test profile (tests/data/test-config.yaml) plus per-section overrides."""
    return load_config(CONFIG_FILE, overrides)


@dataclass
class Indexed:
    index: Path
    corpus: Path
    summary: dict
    logs: list[str] = field(default_factory=list)

    @property
    def store(self):
        from graphwright.storage.delta import IndexStore

        return IndexStore(self.index)


def run(sources, index_dir, config: PipelineConfig | None = None, *, mirror: bool = True, logs: list | None = None) -> dict:
    from graphwright.pipeline.runner import run_index

    logs = [] if logs is None else logs
    return run_index([str(s) for s in sources], index_dir, config or make_config(), mirror=mirror,
                     show_progress=False, log=logs.append)


def index_fresh(root: Path, corpus: Path = CORPUS, config: PipelineConfig | None = None) -> Indexed:
    """Copy `corpus` under `root` and index it into `root/index`."""
    work_corpus = root / "corpus"
    shutil.copytree(corpus, work_corpus)
    logs: list[str] = []
    summary = run([work_corpus], root / "index", config, logs=logs)
    return Indexed(root / "index", work_corpus, summary, logs)


def copy_indexed(src: Indexed, root: Path) -> Indexed:
    shutil.copytree(src.index, root / "index")
    shutil.copytree(src.corpus, root / "corpus")
    return Indexed(root / "index", root / "corpus", dict(src.summary))


def sorted_rows(table: pa.Table, name: str, drop: tuple[str, ...] = ()) -> list[dict]:
    keys = [(k, "ascending") for k in contracts.schema(name).primary_key]
    rows = table.sort_by(keys).to_pylist()
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def assert_valid(store, name: str) -> pa.Table:
    """Read a table and check it against its contract (types, nulls, unique primary key)."""
    table = store.read(name)
    contracts.schema(name).validate(table)
    return table


def data_table_versions(store) -> dict[str, int | None]:
    from graphwright.storage.manifest import DATA_TABLES

    return {name: store.version(name) for name in DATA_TABLES}


def diff_counts(diff: dict) -> dict:
    """The new/changed/unchanged/deleted counts of a documents diff (ignoring any finer counts)."""
    return {k: diff[k] for k in ("new", "changed", "unchanged", "deleted")}


def make_extraction_fail(monkeypatch, marker: str, message: str) -> None:
    """Make the nlp extractor raise RuntimeError(message) on chunks containing `marker`
    (monkeypatch.undo() or the end of the test restores it)."""
    import graphwright.stages.extract.nlp as nlp

    real = nlp.extract_chunk

    def flaky(text, config):
        if marker in text:
            raise RuntimeError(message)
        return real(text, config)

    monkeypatch.setattr(nlp, "extract_chunk", flaky)


MENTION_FIELDS = [("name", pa.string()), ("type", pa.string()), ("description", pa.string()),
                  ("count", pa.int32()), ("chunk_id", pa.string()), ("doc_id", pa.string())]
ASSERTION_FIELDS = [("source", pa.string()), ("target", pa.string()), ("description", pa.string()),
                    ("weight", pa.float64()), ("chunk_id", pa.string()), ("doc_id", pa.string())]


def mentions_table(rows) -> pa.Table:
    """Resolve's mention input from (name, type, description, count, chunk_id, doc_id) tuples."""
    return pa.Table.from_pylist([dict(zip([n for n, _ in MENTION_FIELDS], r)) for r in rows], schema=pa.schema(MENTION_FIELDS))


def assertions_table(rows) -> pa.Table:
    """Resolve's assertion input from (source, target, description, weight, chunk_id, doc_id) tuples."""
    return pa.Table.from_pylist([dict(zip([n for n, _ in ASSERTION_FIELDS], r)) for r in rows], schema=pa.schema(ASSERTION_FIELDS))


def run_stage_details(index: Path, summary: dict) -> dict[str, dict]:
    """{stage: its stage_metrics details} of the run `summary` describes."""
    from graphwright.storage.delta import IndexStore

    rows = IndexStore(index).read("stage_metrics", where=f"run_id = '{summary['run_id']}'").to_pylist()
    return {r["stage"]: json.loads(r["details"]) for r in rows}
