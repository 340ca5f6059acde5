"""Shared plumbing of the job entrypoints: arguments, JSON output, exit codes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", required=True, help="index location: a directory or an object-store URI")
    return p


def run(action: Callable[[], dict]) -> int:
    """Print the result as one JSON line; on failure print why on stderr and exit 1, or 75
    (EX_TEMPFAIL: try again later) when another run holds the index."""
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
    return 0
