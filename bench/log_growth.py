"""How the Delta logs grow over nightly runs: N nights of `ops.jobs.nightly` (one document
edited each night, compaction and vacuum every 7th night, the newest 3 versions kept) on the
test corpus, fast profile. After each night: the log files of every table together, and the
largest single log. Each checkout runs in its own process, side by side in one invocation.

    python bench/log_growth.py [--nights 28] [--src before=/path/to/old/checkout ...]

Without `--src` only this checkout runs. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def nights(n: int) -> list[dict]:
    """Run in the checkout on sys.path: one row per night."""
    from graphwright.config import load_config
    from graphwright.ops.jobs import nightly

    config = load_config(ROOT / "tests" / "data" / "test-config.yaml",
                         {"maintenance": {"optimize_every": 7, "vacuum_every": 7, "keep_versions": 3, "min_files": 2}})
    work = Path(tempfile.mkdtemp(prefix="gw-logs-"))
    corpus, index = work / "corpus", work / "index"
    shutil.copytree(ROOT / "tests" / "data" / "corpus", corpus)
    river = corpus / "notes" / "river.txt"
    rows = []
    try:
        for night in range(1, n + 1):
            river.write_text(river.read_text() + f"\nOn night {night} the Greywater River rose again.\n")
            nightly([str(corpus)], str(index), config)
            logs = {t.name: sum(1 for _ in (t / "_delta_log").iterdir()) for t in (index / "tables").iterdir()
                    if (t / "_delta_log").is_dir()}
            rows.append({"night": night, "log_files": sum(logs.values()), "largest": max(logs.values()),
                         "largest_table": max(logs, key=logs.get)})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nights", type=int, default=28)
    p.add_argument("--src", action="append", default=[], metavar="LABEL=CHECKOUT", help="another checkout to run beside this one")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(nights(a.one)))
        return
    results = {}
    for label, checkout in [("this", str(ROOT)), *(s.split("=", 1) for s in a.src)]:
        env = dict(os.environ, PYTHONPATH=str(Path(checkout) / "src"))
        out = subprocess.run([sys.executable, str(HERE / "log_growth.py"), "--one", str(a.nights)], env=env,
                             capture_output=True, text=True, check=True)
        results[label] = json.loads(out.stdout.strip().splitlines()[-1])
    labels = list(results)
    print("night  " + "".join(f"{label + ': log files, largest log':<40}" for label in labels))
    for i in range(a.nights):
        cells = [f"{r['log_files']:>6}, {r['largest']:>3} ({r['largest_table']})" for r in (results[label][i] for label in labels)]
        print(f"{i + 1:>5}  " + "".join(f"{c:<40}" for c in cells))


if __name__ == "__main__":
    main()
