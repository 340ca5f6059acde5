"""Shared plumbing of the job entrypoints: arguments, JSON output, exit codes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable


def parser(doc: str, waits: bool = False) -> argparse.ArgumentParser:
    """The job's arguments; `waits`: its run may end waiting on LLM batches (llm.engine openai-batch)."""
    from graphwright.pipeline.errors import WAITING_EXIT

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", required=True, help="index location: a directory or an object-store URI")
    if waits:
        p.add_argument("--waiting-exit-code", type=int, default=WAITING_EXIT, metavar="N",
                       help=f"exit status of a run that ends waiting on LLM batches (default {WAITING_EXIT}; "
                            "0 where the scheduler must not count it as failed, e.g. a RayJob)")
    return p


def run(action: Callable[[], dict], waiting_exit: int | None = None) -> int:
    """Print the result as one JSON line; on failure print why on stderr and exit 1, or 75
    (EX_TEMPFAIL: try again later) when another run holds the index. A run that stopped waiting
    on LLM batches (its JSON's status `waiting`) exits `waiting_exit` (default 3), its reason
    on stderr: nothing was published, and the next run collects the batches."""
    from graphwright.pipeline.errors import (
        NothingToIndex,
        RefusedDeletion,
        TooManyFailures,
    )
    from graphwright.storage.lock import LOCKED_EXIT, IndexLocked, LockLost
    from graphwright.storage.manifest import NoPublishedVersion

    try:
        result = action()
    except (IndexLocked, LockLost) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return LOCKED_EXIT
    except (NothingToIndex, RefusedDeletion, TooManyFailures, NoPublishedVersion, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, default=str))
    if result.get("status") == "waiting":
        from graphwright.pipeline.errors import WAITING_EXIT

        print(f"waiting: {result['run']['waiting']['message']}", file=sys.stderr)
        return WAITING_EXIT if waiting_exit is None else waiting_exit
    return 0
