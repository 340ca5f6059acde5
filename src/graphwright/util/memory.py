"""Handing freed memory back to the operating system between phases of large stages, and this
process's peak resident memory.

Arrays of a few hundred kB (one record batch's column) come from glibc's heap, and freed heap
memory stays with the process: after resolve read 24M mentions in 65k-row batches, 0.9 GB of
its 2.1 GB resident was memory it had already freed. `malloc_trim(0)` returns it; elsewhere
(macOS, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import resource
import sys


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


def peak_rss_mb() -> int:
    """This process's peak resident set, in MB. Linux's VmHWM belongs to the process's own
    memory; ru_maxrss also keeps the peak of the process it was spawned from, so a driver
    started by a larger process (a test runner, a job supervisor) reported that one's peak."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # no /proc: KB, or bytes on macOS
    return round(peak / (2**20 if sys.platform == "darwin" else 1024))
