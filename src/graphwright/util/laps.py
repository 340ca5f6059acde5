"""Seconds per step of a long function, for its stage's metrics (stage_metrics.details)."""

from __future__ import annotations

import time


class Laps:
    """`lap(name)` adds the seconds since the previous lap (or the start) to `seconds[name]`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._last, 3)
        self._last = now

    def restart(self) -> None:
        """Start the next lap now (the time since the last one counts nowhere)."""
        self._last = time.perf_counter()

    def timed(self, name: str, step):
        """`step`, its own seconds added to `seconds[name]` when it returns: a step run beside
        others (side_by_side), whose time is not a lap of the function's own."""
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return step(*args, **kwargs)
            finally:
                self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - start, 3)
        return run
