"""Handing freed memory back to the operating system between phases of large stages.

Arrays of a few hundred kB (one record batch's column) come from glibc's heap, and freed heap
memory stays with the process: after resolve read 24M mentions in 65k-row batches, 0.9 GB of
its 2.1 GB resident was memory it had already freed. `malloc_trim(0)` returns it; elsewhere
(macOS, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


def release() -> None:
    """Return the heap's free memory to the OS (glibc only)."""
    trim = _trim()
    if trim is not None:
        trim(0)
