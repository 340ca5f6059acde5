"""util.rows.row_dicts: the rows of an Arrow table as dicts, the same values as to_pylist."""

import datetime

import pyarrow as pa

from graphwright.util.rows import row_dicts


def test_rows_equal_what_pyarrow_gives_for_every_kind_of_column():
    table = pa.table({
        "id": pa.chunked_array([["a", "b"], [None]], pa.string()),
        "n": pa.array([1, None, 3], pa.int64()),
        "w": pa.array([0.5, 1.5, None], pa.float64()),
        "ids": pa.array([["x", "y"], [], None], pa.list_(pa.string())),
        "meta": pa.array([{"k": 1}, None, {"k": 2}], pa.struct([("k", pa.int32())])),
        "at": pa.array([datetime.datetime(2026, 12, 6), None, datetime.datetime(2026, 1, 1)], pa.timestamp("us")),
        "dict": pa.array(["p", "q", "p"]).dictionary_encode(),
    })
    assert row_dicts(table) == table.to_pylist()
    assert row_dicts(table.slice(1, 1)) == table.slice(1, 1).to_pylist()
    assert row_dicts(table.slice(0, 0)) == []
    assert row_dicts(pa.table({"a": [1, 2]}).select([])) == [{}, {}]
