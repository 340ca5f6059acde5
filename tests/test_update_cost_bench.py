"""bench/llm_update_cost.py's pairs: with --warmup the first checkout runs once before the measured
runs and is counted in no mean (the first run after an index is copied was 0.5-7.3 s slower at
1.2M chunks whatever its code, and --both-orders alone put half of that on the first checkout);
with --steps each run and each mean prints its stages' steps."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_warmup_run_comes_first_and_counts_in_no_mean(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "bench" / "llm_path_scale.py"), "--chunks", "300", "--out", str(tmp_path)],
                   check=True, capture_output=True, cwd=ROOT)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "llm_update_cost.py"), "--index", str(tmp_path / "index-300"),
                          "--corpus", str(tmp_path / "corpus-300"), "--work", str(tmp_path / "work"), "--share", "0.05",
                          "--src", f"a={ROOT}", "--src", f"b={ROOT}", "--both-orders", "--warmup", "--steps"],
                         check=True, capture_output=True, text=True, cwd=ROOT).stdout
    labels = [line.split()[0] for line in out.splitlines() if " total " in line]
    assert labels == ["a#warmup", "a", "b", "b#2", "a#2", "a", "b"]  # the runs, then the two means
    results = json.loads((tmp_path / "work" / "results.json").read_text())
    means = {line.split()[0]: float(line.split()[2]) for line in out.split("mean of both orders:")[1].splitlines() if " total " in line}
    assert means["a"] == pytest.approx(round((results["a"]["wall_s"] + results["a#2"]["wall_s"]) / 2, 1), abs=0.051)
    # --steps: each run's and each mean's stage steps, from stage_metrics (resolve's under `linking`)
    steps = [line.split(":", 1)[1].split() for line in out.splitlines() if line.strip().startswith("resolve:")]
    assert len(steps) == 7 and all("state_s" in s and "write_s" in s for s in steps)
    state_s = [results[k]["stages"]["resolve"]["steps"]["state_s"] for k in ("a", "a#2")]
    assert float(steps[-2][steps[-2].index("state_s") + 1]) == pytest.approx(sum(state_s) / 2, abs=0.006)
