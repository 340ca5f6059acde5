"""Progress bars for long stages, on stderr so that `--json` output stays clean."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

stderr_console = Console(file=sys.stderr)


class StageProgress:
    def __init__(self, enabled: bool):
        self.enabled = enabled and stderr_console.is_terminal or enabled == "always"
        self._progress = None

    @contextmanager
    def task(self, description: str, total: int | None):
        if not self.enabled:
            yield lambda n=1: None
            return
        with Progress(
            TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(), console=stderr_console, transient=False,
        ) as progress:
            task = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task, n)
