"""Python's cyclic garbage collector held back while a run works.

A run allocates millions of small objects (profiles, pair evidence, row dictionaries) that live
until their stage ends. With the default thresholds (a young collection every 700 net
allocations, an oldest-generation pass every 100 of those) the collector walked the whole heap
again and again: 0.8 s of a 0.1% update at 145k chunks (gc.callbacks; 9 full passes, 0.56 s),
nearly none of it finding garbage, since the run's arrays and tables hold no cycles. A run raises
the thresholds and restores them when it ends; the collector still runs, every 50,000 net
allocations, and a full pass at most every 200 of those. (Two runs in threads of one process
would restore each other's thresholds out of order; the CLI, the server and the jobs run one.)
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

RUN_THRESHOLDS = (50_000, 20, 10)


@contextlib.contextmanager
def fewer_collections(thresholds: tuple[int, int, int] = RUN_THRESHOLDS) -> Iterator[None]:
    """Within the block, collect at `thresholds` (gc.set_threshold's three numbers) unless the
    process already collects less often; the previous thresholds are restored after."""
    before = gc.get_threshold()
    if before[0]:  # 0: collection is off already
        gc.set_threshold(*(max(b, t) for b, t in zip(before, thresholds)))
    try:
        yield
    finally:
        gc.set_threshold(*before)
