import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from graphwright.storage import contracts
from graphwright.storage.contracts import SchemaError

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"


def chunk_rows(n=2, **overrides):
    rows = [
        {"chunk_id": f"c{i}", "doc_id": "d", "doc_hash": "h", "chunk_index": i, "text": f"text {i}",
         "n_tokens": 3, "start_char": 10 * i, "end_char": 10 * i + 6}
        for i in range(n)
    ]
    for row in rows:
        row.update(overrides)
    return rows


@pytest.mark.parametrize("path", sorted(SCHEMA_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_yaml_schema_loads(path):
    doc = yaml.safe_load(path.read_text())
    schema = contracts.schema(path.stem)
    assert schema.name == path.stem == doc["name"]
    assert schema.arrow.names == [f["name"] for f in doc["fields"]]
    for key in schema.primary_key:
        field = schema.arrow.field(key)
        assert not field.nullable, f"{path.stem}: primary key column {key} is nullable"
    for col in schema.partition_by:
        assert col in schema.arrow.names
    assert schema.arrow.metadata[b"graphwright.schema_version"] == str(doc["version"]).encode()
    # an empty table of the contract satisfies the contract
    assert schema.validate(contracts.empty(path.stem)).num_rows == 0


def test_all_schemas_covers_the_schema_folder():
    assert set(contracts.all_schemas()) == {p.stem for p in SCHEMA_DIR.glob("*.yaml")}


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("string", pa.string()),
        ("int32", pa.int32()),
        ("float64", pa.float64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("list<string>", pa.list_(pa.string())),
        ("list<list<float32>>", pa.list_(pa.list_(pa.float32()))),
    ],
)
def test_arrow_type(spec, expected):
    assert contracts.arrow_type(spec) == expected


def test_unknown_type_and_table_are_schema_errors():
    with pytest.raises(SchemaError, match="unknown field type"):
        contracts.arrow_type("decimal")
    with pytest.raises(SchemaError, match="no schema for table 'nope'"):
        contracts.schema("nope")


def test_validate_casts_to_contract_types_and_column_order():
    table = pa.Table.from_pylist(chunk_rows())  # ints inferred as int64, columns in another order
    table = table.select(list(reversed(table.column_names)))
    out = contracts.schema("chunks").validate(table)
    assert out.schema.names == contracts.schema("chunks").arrow.names
    assert out.schema.field("chunk_index").type == pa.int32()
    assert out.column("chunk_index").to_pylist() == [0, 1]
    assert out.schema.equals(contracts.schema("chunks").arrow)


def test_validate_casts_timestamps_and_lists():
    row = {"run_id": "r", "command": "index", "started_at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
           "finished_at": None, "status": "ok", "config_hash": "h", "summary": "{}", "error": None}
    out = contracts.schema("runs").validate(pa.Table.from_pylist([row]))
    assert out.column("started_at").type == pa.timestamp("us", tz="UTC")
    assert out.column("finished_at").null_count == 1  # nullable column


def test_validate_rejects_missing_columns():
    table = pa.Table.from_pylist(chunk_rows()).drop_columns(["text"])
    with pytest.raises(SchemaError, match=r"missing columns \['text'\]"):
        contracts.schema("chunks").validate(table)


def test_validate_rejects_extra_columns():
    table = pa.Table.from_pylist(chunk_rows(bogus=1))
    with pytest.raises(SchemaError, match=r"unexpected columns \['bogus'\]"):
        contracts.schema("chunks").validate(table)


def test_validate_rejects_nulls_in_non_nullable_column():
    rows = chunk_rows()
    rows[1]["text"] = None
    with pytest.raises(SchemaError, match="column text has 1 nulls"):
        contracts.schema("chunks").validate(pa.Table.from_pylist(rows))


def test_validate_accepts_nulls_in_nullable_column():
    row = {"doc_id": "d", "source_key": "k", "source": "s", "title": "t", "text": "x", "content_hash": "h",
           "metadata": None, "n_chars": 1, "run_id": "r"}
    assert contracts.schema("documents").validate(pa.Table.from_pylist([row])).num_rows == 1


def test_validate_rejects_uncastable_values():
    table = pa.Table.from_pylist(chunk_rows(chunk_index="first"))
    with pytest.raises(SchemaError, match="column chunk_index"):
        contracts.schema("chunks").validate(table)


def test_validate_rejects_lossy_float_to_int_cast():
    table = pa.Table.from_pylist(chunk_rows(n_tokens=2.5))
    with pytest.raises(SchemaError, match="n_tokens"):
        contracts.schema("chunks").validate(table)


def test_validate_rejects_duplicate_primary_key():
    rows = chunk_rows(3)
    rows[2]["chunk_id"] = "c0"
    with pytest.raises(SchemaError, match="duplicate primary key"):
        contracts.schema("chunks").validate(pa.Table.from_pylist(rows))


def test_composite_primary_key():
    row = {"chunk_id": "c", "doc_id": "d", "extractor": "nlp@1", "status": "ok", "n_mentions": 1,
           "n_assertions": 0, "error": None, "notes": None, "run_id": "r"}
    schema = contracts.schema("extractions")
    assert schema.primary_key == ("chunk_id", "extractor")
    ok = [row, {**row, "extractor": "nlp@2"}]  # same chunk, another extractor: a different key
    assert schema.validate(pa.Table.from_pylist(ok)).num_rows == 2
    with pytest.raises(SchemaError, match="duplicate primary key"):
        schema.validate(pa.Table.from_pylist([row, {**row, "status": "failed"}]))
