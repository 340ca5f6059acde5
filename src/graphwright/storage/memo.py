"""A fan-in stage's note of the table versions it last read and wrote, so that a run in which none
of them moved skips the stage without reading a table to find out (a Delta version is read from
the log, not the data). The note is put after the stage's writes: a stage killed before it leaves
the old note, whose versions no longer match, and the rerun does the work."""

from __future__ import annotations

import json


class StageMemo:
    """`reads` and `writes`: the stage's tables; `key`: whatever else its output depends on (its
    configuration); `extra`: what the stage returns that the note must give back when it skips."""

    def __init__(self, store, stage: str, reads: tuple[str, ...], writes: tuple[str, ...], key: str):
        self.store, self.stage, self.reads, self.writes, self.key = store, stage, reads, writes, key
        self.path = f"state/{stage}.json"
        self.seen = self._versions(reads)

    def _versions(self, names: tuple[str, ...]) -> dict[str, int | None]:
        return {name: self.store.version(name) for name in names}

    def unchanged(self) -> dict | None:
        """What the stage returned last time, if its tables are at the versions it left them."""
        try:
            note = json.loads(self.store.files.read_bytes(self.path))
        except Exception:  # noqa: BLE001 - no note (first run, or written by an older version)
            return None
        if note.get("key") != self.key or note.get("reads") != self.seen or note.get("writes") != self._versions(self.writes):
            return None
        return note.get("result", {})

    def record(self, result: dict | None = None) -> None:
        note = {"key": self.key, "reads": self.seen, "writes": self._versions(self.writes), "result": result or {}}
        self.store.files.write_bytes(self.path, json.dumps(note, sort_keys=True, default=str).encode())
