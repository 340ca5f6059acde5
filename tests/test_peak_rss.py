"""The driver's peak memory in stage metrics is its own, not that of the process that spawned it."""

import subprocess
import sys

import numpy as np
import pytest

CHILD = "from graphwright.util.memory import peak_rss_mb; print(peak_rss_mb())"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_a_spawned_driver_reports_its_own_peak_not_its_parents():
    held = np.ones(600 * 2**20 // 8)  # this process now holds 600 MB more
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    # a child importing graphwright holds about 100 MB; ru_maxrss said the parent's peak instead
    assert int(out.stdout.strip()) < 400
    assert held.sum() > 0
