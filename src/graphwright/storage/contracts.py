"""Table contracts: one YAML descriptor per table in `schemas/`, validated on every write."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import yaml

_SCALARS = {
    "string": pa.string(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


class SchemaError(ValueError):
    """A table does not satisfy its contract."""


def arrow_type(spec: str) -> pa.DataType:
    spec = spec.strip()
    if spec.startswith("list<") and spec.endswith(">"):
        return pa.list_(arrow_type(spec[5:-1]))
    try:
        return _SCALARS[spec]
    except KeyError:
        raise SchemaError(f"unknown field type {spec!r}") from None


@dataclass(frozen=True)
class TableSchema:
    name: str
    version: int
    primary_key: tuple[str, ...]
    partition_by: tuple[str, ...]
    arrow: pa.Schema
    description: str = ""

    def validate(self, table: pa.Table, check_key: bool = True) -> pa.Table:
        """Return `table` cast to the contract's schema, or raise SchemaError saying why not.
        `check_key=False`: the rows' primary keys are known to be distinct (rows kept from one
        data file of the table, checked when it was written) and are not grouped again."""
        expected = set(self.arrow.names)
        actual = set(table.column_names)
        if expected != actual:
            missing, extra = sorted(expected - actual), sorted(actual - expected)
            raise SchemaError(f"table {self.name}: missing columns {missing}, unexpected columns {extra}")
        columns = []
        for field in self.arrow:
            column = table.column(field.name)
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaError(f"table {self.name}: column {field.name} is {column.type}, expected {field.type}: {exc}") from exc
            if not field.nullable and column.null_count:
                raise SchemaError(f"table {self.name}: column {field.name} has {column.null_count} nulls but is not nullable")
            columns.append(column)
        out = pa.Table.from_arrays(columns, schema=self.arrow)
        if check_key:
            self._check_unique_key(out)
        return out

    def _check_unique_key(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        grouped = table.select(list(self.primary_key)).group_by(list(self.primary_key)).aggregate([([], "count_all")])
        if grouped.num_rows != table.num_rows:
            dupes = grouped.filter(pc.greater(grouped["count_all"], 1)).slice(0, 3).to_pylist()
            raise SchemaError(f"table {self.name}: duplicate primary key {list(self.primary_key)}, e.g. {dupes}")


def _schema_dir() -> Path:
    packaged = resources.files("graphwright") / "_schemas"
    if packaged.is_dir():  # installed wheel
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "schemas"  # source checkout / editable install


def _parse(doc: dict) -> TableSchema:
    fields = [
        pa.field(f["name"], arrow_type(f["type"]), nullable=bool(f.get("nullable", True)))
        for f in doc["fields"]
    ]
    return TableSchema(
        name=doc["name"],
        version=int(doc["version"]),
        primary_key=tuple(doc["primary_key"]),
        partition_by=tuple(doc.get("partition_by", [])),
        arrow=pa.schema(fields, metadata={"graphwright.schema_version": str(doc["version"])}),
        description=doc.get("description", ""),
    )


@functools.cache
def all_schemas() -> dict[str, TableSchema]:
    schemas = {}
    for path in sorted(_schema_dir().glob("*.yaml")):
        schema = _parse(yaml.safe_load(path.read_text()))
        if schema.name != path.stem:
            raise SchemaError(f"{path}: declares table {schema.name!r}, file name says {path.stem!r}")
        schemas[schema.name] = schema
    if not schemas:
        raise SchemaError(f"no table schemas found in {_schema_dir()}")
    return schemas


def schema(name: str) -> TableSchema:
    try:
        return all_schemas()[name]
    except KeyError:
        raise SchemaError(f"no schema for table {name!r}; known: {sorted(all_schemas())}") from None


def empty(name: str) -> pa.Table:
    return schema(name).arrow.empty_table()
