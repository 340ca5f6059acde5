"""The `graphwright` command line: one typer app (common), its commands in indexing, querying,
costs and batches."""

from graphwright.cli import batches, costs, indexing, querying  # noqa: F401  (registers the commands)
from graphwright.cli.common import app

__all__ = ["app", "main"]


def main() -> None:  # pragma: no cover
    app()
