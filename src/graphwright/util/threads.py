"""Two independent pieces of work at once, for the driver's steps that spend their time in Arrow,
DataFusion, numpy, faiss or tantivy (which release the GIL)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def side_by_side(first: Callable, second: Callable, name: str = "side") -> tuple:
    """(first(), second()): `first` in a thread (named `name`) while `second` runs in this one.
    An exception from either is raised here, once both have stopped."""
    with ThreadPoolExecutor(1, thread_name_prefix=name) as side:
        started = side.submit(first)
        other = second()
        return started.result(), other
