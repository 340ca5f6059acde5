"""Intent records of the LLM requests extraction workers send, written before they are sent. A
worker killed with requests in flight takes its answers with it, but not its intents: at the end
of the stage the driver counts the requests intended that no recorded call accounts for (asked,
and perhaps paid, but lost; a batch Ray retries on a new actor is asked twice and recorded once).
The records are scratch files under INDEX/ledger/<run id>/, removed once counted."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections import Counter

from graphwright.storage.location import IndexFiles, storage_options

_attempts = itertools.count()


class CallLedger:
    def __init__(self, root: str, run_id: str):
        self.files = IndexFiles(root, storage_options() or None)
        self.prefix = f"ledger/{run_id}/"

    def intend(self, keys: list[str]) -> None:
        """Record that `keys` are about to be asked (one record per attempt)."""
        if not keys:
            return
        digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]
        self.files.write_bytes(f"{self.prefix}{os.getpid()}-{next(_attempts)}-{digest}.json", json.dumps(keys).encode())

    def lost(self, recorded: set[str]) -> int:
        """Requests intended beyond those recorded: each intended key counts once per attempt,
        minus one when a call for it was recorded."""
        intended = Counter()
        for relative in self.files.list(self.prefix):
            intended.update(json.loads(self.files.read_bytes(relative)))
        return sum(n - (1 if key in recorded else 0) for key, n in intended.items())

    def clear(self) -> None:
        for relative in self.files.list(self.prefix):
            self.files.delete(relative)
