"""The nightly job on a two-node Ray cluster (token auth on), through the Ray Jobs API:
a first run, a no-op rerun, a run after adding documents, a run after deleting some; then the
cost report and its plot.

    python bench/nightly_on_ray.py [--docs 200] [--added 50] [--out /tmp/nightly-demo] [--config FILE]

Reads ../shared/data/hotpotqa-dev (paragraphs as JSONL files); without it, tests/data/corpus.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from graphwright.ops.local_cluster import LocalCluster

REPO = Path(__file__).resolve().parents[1]
HOTPOT = REPO.parent / "shared" / "data" / "hotpotqa-dev" / "corpus.jsonl"


def _write_jsonl(path: Path, rows: list[str]) -> None:
    path.write_text("".join(rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=200)
    p.add_argument("--added", type=int, default=50)
    p.add_argument("--out", type=Path, default=Path("/tmp/nightly-demo"))
    p.add_argument("--config", help="pipeline config for the job (default: the embedded defaults)")
    a = p.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    corpus, index = a.out / "corpus", a.out / "index"
    corpus.mkdir(parents=True)
    if HOTPOT.exists():
        lines = HOTPOT.read_text().splitlines(keepends=True)
        _write_jsonl(corpus / "base.jsonl", lines[:a.docs])
        extra = lines[a.docs:a.docs + a.added]
    else:
        shutil.copytree(REPO / "tests" / "data" / "corpus", corpus, dirs_exist_ok=True)
        extra = ['{"id": "added-1", "text": "Ada Lovelace corresponded with Charles Babbage about the Analytical Engine."}\n']

    tmp = Path(tempfile.mkdtemp(prefix="gwray-", dir="/tmp"))
    started = time.perf_counter()
    cluster = LocalCluster(tmp)
    print(f"cluster: 2 nodes up in {time.perf_counter() - started:.1f} s, dashboard {cluster.dashboard}, token auth on")
    try:
        job = [str(REPO / "jobs" / "nightly.py"), str(corpus), "--index", str(index)] + (["--config", a.config] if a.config else [])
        for step in ("first run", "no-op rerun", f"added {len(extra)} documents", f"deleted {len(extra)} documents"):
            if step.startswith("added"):
                _write_jsonl(corpus / "added.jsonl", extra)
            if step.startswith("deleted"):
                (corpus / "added.jsonl").unlink()
            t = time.perf_counter()
            status, logs = cluster.submit(*job)
            result = next((json.loads(line) for line in reversed(logs.splitlines()) if line.startswith("{")), None)
            if status != "SUCCEEDED" or result is None:
                print(logs[-4000:])
                raise SystemExit(f"{step}: job {status}")
            run, cost = result["run"], result["cost"]
            print(f"{step:<24} {time.perf_counter() - t:6.1f} s submitted-to-done | docs {run['documents_diff']} | "
                  f"chunks extracted {run['chunks_extracted']}/{run['chunks']} | version {run['version']}"
                  f"{' (new)' if run['new_version'] else ''} | cost {cost['cost']:.3g} vs full rebuild {cost['full_rebuild_cost']:.3g}")
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "graphwright.cli", "cost", "--index", str(index), "--plot", str(a.out / "cost.png")], check=True)


if __name__ == "__main__":
    main()
