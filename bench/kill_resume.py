"""Kill an update in the middle, rerun it, and compare with an uninterrupted build.

    python bench/kill_resume.py [--corpus ../shared/data/hotpotqa-dev/corpus.jsonl] [--kill-after-stage chunk]

1. index the first half of the corpus;  2. start an update to the whole corpus in a subprocess and
SIGKILL it right after the stage named by --kill-after-stage reports;  3. check the published
version is still the old one;  4. rerun the update;  5. do the same update again without the kill
and compare every data table row for row (ignoring run ids).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from graphwright.storage import contracts
from graphwright.storage.delta import IndexStore
from graphwright.storage.manifest import DATA_TABLES, load_manifest

CONFIG = "pipelines/tiny-test.yaml"


def index(sources: list[str], index_dir: Path, config: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "graphwright.cli", "index", *sources, "--index", str(index_dir), "-c", config, "--json"],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default="../shared/data/hotpotqa-dev/corpus.jsonl")
    parser.add_argument("--kill-after-stage", default="chunk")
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait after that stage before the kill")
    args = parser.parse_args()
    corpus = Path(args.corpus)
    if not corpus.exists():
        print(f"skipped: {corpus} not found")
        return 0
    work = Path(tempfile.mkdtemp(prefix="gw-kill-"))
    lines = corpus.read_text().splitlines()
    half = work / "half.jsonl"
    half.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    full = work / "full.jsonl"
    full.write_text("\n".join(lines) + "\n")
    killed, fresh = work / "killed", work / "uninterrupted"

    v1 = index([str(half)], killed, args.config)
    print(f"indexed half: version {v1['version']}, {v1['documents']} documents")

    proc = subprocess.Popen([sys.executable, "-m", "graphwright.cli", "index", str(full), "--index", str(killed), "-c", args.config],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:
        if line.split()[:1] == [args.kill_after_stage]:
            time.sleep(args.delay)
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    print(f"update killed {args.delay}s after stage {args.kill_after_stage!r} finished (exit {proc.returncode})")
    store = IndexStore(killed)
    manifest = load_manifest(store)
    print(f"published version after the kill: {manifest['version']} with {manifest['counts']['documents']} documents (unchanged: {manifest['version'] == v1['version']})")

    resumed = index([str(full)], killed, args.config)
    print(f"rerun: version {resumed['version']}, extracted {resumed['chunks_extracted']} chunks")
    index([str(half)], fresh, args.config)
    index([str(full)], fresh, args.config)

    ok = True
    for name in DATA_TABLES:
        key = [(k, "ascending") for k in contracts.schema(name).primary_key]
        cols = [c for c in contracts.schema(name).arrow.names if c != "run_id"]
        a = IndexStore(killed).read(name, columns=cols).sort_by(key)
        b = IndexStore(fresh).read(name, columns=cols).sort_by(key)
        same = a.equals(b)
        ok &= same
        print(f"{name:<18} rows {a.num_rows:6d} vs {b.num_rows:6d}  identical: {same}")
    print("RESULT:", "killed + rerun update equals the uninterrupted update" if ok else "DIFFERENCES FOUND")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
