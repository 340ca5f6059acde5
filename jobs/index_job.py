"""Ray job entrypoint: index SOURCES into INDEX and publish.

    ray job submit --working-dir . -- python jobs/index_job.py SOURCE... --index DIR|URI [--config FILE]

Inside a Ray job the driver joins the job's cluster (execution.address defaults to 'auto' there).
Run it with plain `python` for a local Ray. The index and the sources may be object-store URIs
(s3://bucket/prefix; see "Object storage" in README.md). Exit status 75 when another run holds
the index.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from graphwright.config import load_config
from graphwright.lock import LOCKED_EXIT, IndexLocked
from graphwright.pipeline import run_index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--index", required=True)
    parser.add_argument("--config")
    parser.add_argument("--append", action="store_true")
    args = parser.parse_args(argv)
    overrides = {"execution": {"address": "auto"}} if os.environ.get("RAY_JOB_ID") else None
    try:
        summary = run_index(args.sources, args.index, load_config(args.config, overrides), mirror=not args.append, show_progress=False)
    except IndexLocked as exc:  # another run is at work on this index: the scheduler should retry later
        print(f"index_job: {exc}", file=sys.stderr)
        return LOCKED_EXIT
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
