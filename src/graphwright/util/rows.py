"""Arrow rows as Python dicts."""

from __future__ import annotations

import pyarrow as pa


def row_dicts(table: pa.Table) -> list[dict]:
    """`table.to_pylist()`, built column by column: pyarrow's makes every value through its row,
    2-3 times slower (70,000 relationship rows of 7 columns: 0.34 s against 0.13 s; report
    planning reads that many at each update)."""
    names = table.column_names
    if not names:
        return [{} for _ in range(table.num_rows)]
    return [dict(zip(names, values)) for values in zip(*(table.column(c).to_pylist() for c in names))]
