"""What every command of the `graphwright` CLI shares: the app, its consoles, options, and how
it fails."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from graphwright.query.searcher import MODES

app = typer.Typer(help="Build, publish and query GraphRAG-style indexes.", no_args_is_help=True, add_completion=False)
out = Console()
err = Console(stderr=True)

IndexOpt = Annotated[str, typer.Option("--index", "-i", help="Index directory, or an object-store URI (s3://bucket/prefix, gs://..., abfss://...).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
STORAGE_EXIT = 74  # EX_IOERR: a table or file of the index cannot be read (the message says which, and the repair)
MODE_HELP = " | ".join(MODES) + " (see docs/reference.md, Query modes)"


def fail(message: str, code: int = 1) -> None:
    err.print(f"[red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def existing_index(index_dir: str):
    from graphwright.storage.delta import IndexStore

    store = IndexStore(index_dir)
    if store.is_remote:
        if not store.exists("index_manifest"):
            fail(f"{index_dir}: not an index (no tables/index_manifest there)")
    elif not store.root.is_dir():
        fail(f"{index_dir}: no such directory")
    elif not (store.root / "tables").is_dir():
        fail(f"{index_dir}: not an index directory (no tables/)")
    return store


def print_table(title: str, columns: tuple[str, ...], rows) -> None:
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    out.print(t)


def version_rows(store) -> list[dict]:
    from graphwright.storage.manifest import version_rows

    return version_rows(store)


def print_versions(title: str, rows: list[dict]) -> None:
    print_table(title, ("version", "published", "by", "docs", "chunks", "entities", "communities", "reports"), (
        (m["version"], m["published_at"][:19], m["command"], *(m["counts"].get(k) for k in ("documents", "chunks", "entities", "communities", "community_reports")))
        for m in rows))
