"""A fan-in stage's note of the table versions it last read and wrote, so that a run in which none
of them moved skips the stage without reading a table to find out (a Delta version is read from
the log, not the data). The note is put after the stage's writes: a stage killed before it leaves
the old note, whose versions no longer match, and the rerun does the work."""

from __future__ import annotations

import json

from graphwright.storage import contracts


class StageMemo:
    """`reads` and `writes`: the stage's tables; `key`: whatever else its output depends on (its
    configuration; the contract versions of the tables it writes are added, so that a new layout
    is written once even where no input moved)."""

    def __init__(self, store, stage: str, reads: tuple[str, ...], writes: tuple[str, ...], key: str):
        layouts = ",".join(f"{name}:v{contracts.schema(name).version}" for name in writes)
        self.store, self.stage, self.reads, self.writes, self.key = store, stage, reads, writes, f"{key}|{layouts}"
        self.path = f"state/{stage}.json"
        self.seen = self._versions(reads)

    def _versions(self, names: tuple[str, ...]) -> dict[str, int | None]:
        return {name: self.store.version(name) for name in names}

    def _note(self) -> dict | None:
        try:
            note = json.loads(self.store.files.read_bytes(self.path))
        except Exception:  # noqa: BLE001 - no note (first run, or written by an older version)
            return None
        return note if note.get("key") == self.key else None

    def unchanged(self, ignoring: tuple[str, ...] = ()) -> dict | None:
        """What the stage returned last time, if its tables (but those it is `ignoring`) are at
        the versions it left them."""
        note = self._note()
        if note is None or note.get("writes") != self._versions(self.writes):
            return None
        seen = {name: v for name, v in self.seen.items() if name not in ignoring}
        if {name: v for name, v in (note.get("reads") or {}).items() if name not in ignoring} != seen:
            return None
        return note.get("result", {})

    def last_reads(self) -> dict[str, int | None] | None:
        """The versions of its tables the last recorded run with these settings read, from which
        a stage can bring its output up to date by the changes since; None without one."""
        note = self._note()
        return note.get("reads") if note is not None else None

    def writes_unmoved(self) -> bool:
        """Whether the stage's tables are at the versions its last recorded run left them: nothing
        wrote them since, not even an interrupted run of the stage."""
        note = self._note()
        return note is not None and note.get("writes") == self._versions(self.writes)

    def record(self, result: dict | None = None) -> None:
        note = {"key": self.key, "reads": self.seen, "writes": self._versions(self.writes), "result": result or {}}
        self.store.files.write_bytes(self.path, json.dumps(note, sort_keys=True, default=str).encode())


def rebase_notes(store, moved: dict[str, tuple[int | None, int | None]]) -> int:
    """After a rewrite that changed no row (compaction), move the versions the stages' notes under
    state/ recorded for the rewritten tables from the old version to the new one, so that the next
    run still finds its notes valid. Returns how many notes changed."""
    changed = 0
    for relative in store.files.list("state"):
        if not relative.endswith(".json"):
            continue
        note = json.loads(store.files.read_bytes(relative))
        if _rebase(note, moved):
            store.files.write_bytes(relative, json.dumps(note, sort_keys=True, default=str).encode())
            changed += 1
    return changed


def _rebase(value, moved) -> bool:
    hit = False
    if isinstance(value, dict):
        for k, v in value.items():
            if k in moved and not isinstance(v, (dict, list)) and v == moved[k][0]:
                value[k] = moved[k][1]
                hit = True
            else:
                hit |= _rebase(v, moved)
    elif isinstance(value, list):
        for v in value:
            hit |= _rebase(v, moved)
    return hit
