"""How many cores this process may use: its affinity mask (a container's CPU set, `taskset`)
and its cgroup's CPU quota (`docker --cpus`, a Kubernetes CPU limit), not the host's count,
which `os.cpu_count()` gives and which oversubscribes a pinned or throttled process."""

from __future__ import annotations

import math
import os
from pathlib import Path

# Where a container sees its own cgroup; Ray reads the same two files for its CPU count.
CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path | None = None) -> int | None:
    """The CPU quota of this process's cgroup, rounded up to whole cores; None when unlimited
    or unreadable. cgroup v2 writes "QUOTA PERIOD" (or "max PERIOD") to cpu.max; v1 splits
    them into cpu.cfs_quota_us (-1: unlimited) and cpu.cfs_period_us."""
    root = CGROUP_ROOT if root is None else root
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    if quota <= 0 or period <= 0:
        return None
    return max(1, math.ceil(quota / period))


def usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0)) or 1
    else:
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return min(cores, limit) if limit else cores


def driver_cores(execution) -> int:
    """The processes or threads for the driver's own CPU-bound work: execution.driver_processes,
    else the usable cores."""
    return execution.driver_processes or usable_cores()
