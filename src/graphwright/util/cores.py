"""How many cores this process may use: its affinity mask (a container's CPU set, `taskset`),
not the host's count, which `os.cpu_count()` gives and which oversubscribes a pinned process."""

from __future__ import annotations

import os


def usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def driver_cores(execution) -> int:
    """The processes or threads for the driver's own CPU-bound work: execution.driver_processes,
    else the usable cores."""
    return execution.driver_processes or usable_cores()
