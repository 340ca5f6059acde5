"""Run one measurement of a benchmark in a fresh Python process, so that its peak RSS is its own:
the benchmark calls itself with its measuring arguments, which print one JSON object last."""

from __future__ import annotations

import json
import subprocess
import sys


class MeasurementFailed(RuntimeError):
    def __init__(self, stderr: str, returncode: int):
        lines = stderr.strip().splitlines()
        super().__init__(lines[-1] if lines else f"exit status {returncode}")
        self.stderr = stderr


def measure(script: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, check=False)
    if out.returncode:
        raise MeasurementFailed(out.stderr, out.returncode)
    return json.loads(out.stdout.strip().splitlines()[-1])
