"""util.rows: the rows of an Arrow table as dicts, the same values as to_pylist (row_dicts), or by
key, made when asked for (RowMap), and keys ranked by a column of their rows."""

import datetime

import random

import pyarrow as pa

from graphwright.util.rows import RowMap, ranked, row_dicts


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


def test_a_row_map_is_the_dict_of_the_rows_by_key_and_ranks_keys_as_a_python_sort_does():
    rng = random.Random(7)
    keys = [f"r{rng.randrange(10 ** 6):06d}\u00e9" if i % 5 else f"R{i}" for i in range(3000)]  # non-ASCII and upper case sort by code point
    table = pa.table({"relationship_id": keys, "weight": [float(rng.choice([1, 2, 2.5, 7])) for _ in keys],
                      "description": [f"d{i}" for i in range(len(keys))]})
    again = pa.table({"relationship_id": [keys[3]], "weight": [3.0], "description": ["again"]})
    table = pa.concat_tables([table.slice(0, 1000), table.slice(1000), again])  # chunked, and a key twice: its last row
    as_dicts = {r["relationship_id"]: r for r in row_dicts(table)}
    rows = RowMap(table, "relationship_id")
    assert len(rows) == len(as_dicts) and set(rows) == set(as_dicts) and "nope" not in rows and keys[3] in rows
    assert all(rows[k] == as_dicts[k] for k in as_dicts) and rows[keys[3]]["description"] == "again"
    wanted = rng.sample(sorted(as_dicts), 1500)
    assert rows.ranked(wanted, "weight") == ranked(as_dicts, wanted, "weight") == sorted(wanted, key=lambda k: (-as_dicts[k]["weight"], k))
    assert ranked(rows, [], "weight") == []
    degrees = pa.table({"entity_id": ["b", "a", "c", "d"], "degree": pa.array([3, 3, 9, 1], pa.int64()),
                        "score": [1.0, float("nan"), 2.0, 0.5]})
    entities = RowMap(degrees, "entity_id")
    assert entities.ranked(["d", "a", "b", "c"], "degree") == ["c", "a", "b", "d"]
    assert entities.ranked(["a", "b", "c", "d"], "score") == ["c", "b", "d", "a"]  # a NaN ranks last
