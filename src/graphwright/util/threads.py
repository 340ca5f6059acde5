"""Two independent pieces of work at once, for the driver's steps that spend their time in Arrow,
DataFusion, numpy, faiss or tantivy (which release the GIL)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


def side_by_side(first: Callable, second: Callable, name: str = "side") -> tuple:
    """(first(), second()): `first` in a thread (named `name`) while `second` runs in this one.
    An exception from either is raised here, once both have stopped."""
    with ThreadPoolExecutor(1, thread_name_prefix=name) as side:
        started = side.submit(first)
        other = second()
        return started.result(), other


def in_thread(work: Callable, *args, name: str = "side") -> Future:
    """`work(*args)` started in a thread of its own (named `name`); its result, or its exception,
    comes from the future's result()."""
    side = ThreadPoolExecutor(1, thread_name_prefix=name)
    try:
        return side.submit(work, *args)
    finally:
        side.shutdown(wait=False)  # the thread ends when the work does
