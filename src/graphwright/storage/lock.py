"""One run at a time per index: runs that write (index, delete, rollback, vacuum) hold the index's
run lock; a second one refuses, naming the holder.

A local index locks `<root>/run.lock` with fcntl.flock: the kernel releases it when the holder
exits, however it dies. An object-store index has no such thing, so the lock is a lease object
`<root>/run.lock` holding the holder and an expiry. It is taken with a conditional put (create if
absent, or replace the exact version read if that lease has expired or was released), so two
takers cannot both win; the holder renews it every lease/3 seconds from a background thread; a
holder that dies stops renewing and the next run takes the lease over once it has expired.
Expiry compares the writer's clock with the reader's: keep the lease well above clock skew.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from datetime import UTC, datetime, timedelta

LOCK_FILE = "run.lock"
LEASE_ENV = "GRAPHWRIGHT_LOCK__LEASE_S"
DEFAULT_LEASE_S = 120.0
# exit status of a command refused because another run holds the index (EX_TEMPFAIL: try later)
LOCKED_EXIT = 75


class IndexLocked(RuntimeError):
    """Another run holds the index."""


class LockLost(RuntimeError):
    """This run's lease expired and another run took the index over."""


def lease_seconds() -> float:
    return float(os.environ.get(LEASE_ENV) or DEFAULT_LEASE_S)


def _holder(run_id: str, command: str) -> dict:
    return {"run_id": run_id, "command": command, "host": socket.gethostname(), "pid": os.getpid(),
            "since": datetime.now(UTC).isoformat(timespec="seconds")}


def describe(location, holder: dict | None) -> str:
    if not holder:
        return f"{location} is locked by another run (holder unknown)"
    expires = f", lease expires {holder['expires_at']}" if holder.get("expires_at") else ""
    return (f"{location} is locked by run {holder.get('run_id')} ({holder.get('command')}) on host "
            f"{holder.get('host')}, pid {holder.get('pid')}, since {holder.get('since')}{expires}; "
            "try again when it has finished")


class FileLock:
    """flock on a local file; the holder is written into it for the refusal message."""

    def __init__(self, root, run_id: str, command: str, name: str = LOCK_FILE):
        self.path = os.path.join(root, name)
        self.root, self.run_id, self.command = root, run_id, command
        self.fd: int | None = None

    def acquire(self) -> FileLock:
        import fcntl

        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with os.fdopen(fd, "rb") as fh:
                raw = fh.read()
            raise IndexLocked(describe(self.root, _parse(raw))) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder(self.run_id, self.command)).encode(), 0)
        self.fd = fd
        return self

    def check(self) -> None:
        pass  # the kernel holds a flock until release or death

    def release(self) -> None:
        if self.fd is not None:
            import fcntl

            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


class LeaseLock:
    """A lease object on an object store, taken and renewed with conditional puts."""

    def __init__(self, files, location, run_id: str, command: str, lease_s: float, name: str = LOCK_FILE):
        self.files, self.location, self.name = files, location, name
        self.run_id, self.command, self.lease_s = run_id, command, lease_s
        self.etag: str | None = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._record = _holder(run_id, command)

    def _body(self, released: bool = False) -> bytes:
        expires = datetime.now(UTC) + timedelta(seconds=0 if released else self.lease_s)
        return json.dumps({**self._record, "expires_at": expires.isoformat(timespec="seconds"),
                           "released": released}).encode()

    def acquire(self) -> LeaseLock:
        self.etag = self._take()
        self._thread = threading.Thread(target=self._renew, name="graphwright-lease", daemon=True)
        self._thread.start()
        return self

    def _take(self) -> str:
        """Create the lease, or replace exactly the version read when it is free; the etag."""
        import obstore
        from obstore.exceptions import (
            AlreadyExistsError,
            NotFoundError,
            PreconditionError,
        )

        store = self.files.store
        for _ in range(3):  # the lease object may be deleted by hand between two calls
            try:
                return obstore.put(store, self.name, self._body(), mode="create")["e_tag"]
            except AlreadyExistsError:
                pass
            try:
                current = obstore.get(store, self.name)
            except NotFoundError:
                continue
            holder = _parse(bytes(current.bytes()))
            if holder and not holder.get("released") and not _expired(holder):
                raise IndexLocked(describe(self.location, holder))
            try:
                return obstore.put(store, self.name, self._body(), mode={"e_tag": current.meta["e_tag"]})["e_tag"]
            except PreconditionError:  # another run took the free lease first
                raise IndexLocked(describe(self.location, _parse(bytes(obstore.get(store, self.name).bytes())))) from None
        raise IndexLocked(describe(self.location, None))

    def _renew(self) -> None:
        import obstore
        from obstore.exceptions import BaseError, PreconditionError

        while not self._stop.wait(self.lease_s / 3):
            try:
                self.etag = obstore.put(self.files.store, self.name, self._body(), mode={"e_tag": self.etag})["e_tag"]
            except PreconditionError:
                self.lost = f"the lease on {self.location} expired and another run took it over"
                return
            except BaseError:  # a transient store error: try again at the next beat (the lease
                continue       # outlives two missed beats)
            except Exception as exc:  # anything else: say so, rather than let the lease lapse unnoticed
                self.lost = f"renewing the lease on {self.location} failed: {type(exc).__name__}: {exc}"
                return

    def check(self) -> None:
        """Raise LockLost when the lease was taken over (call before publishing)."""
        if self.lost:
            raise LockLost(self.lost)

    def release(self) -> None:
        import obstore
        from obstore.exceptions import PreconditionError

        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.etag and not self.lost:
            try:
                obstore.put(self.files.store, self.name, self._body(released=True), mode={"e_tag": self.etag})
            except PreconditionError:
                pass  # taken over after expiry: it is no longer ours to release
        self.etag = None


def _parse(raw: bytes) -> dict | None:
    try:
        holder = json.loads(raw)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def _expired(holder: dict) -> bool:
    try:
        return datetime.fromisoformat(holder["expires_at"]) <= datetime.now(UTC)
    except (KeyError, TypeError, ValueError):
        return True


def holder(store) -> dict | None:
    """Who holds the index's run lock as its lock file or lease records it (None: nobody, or
    unknown)."""
    if store.is_remote:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            record = _parse(bytes(obstore.get(store.files.store, LOCK_FILE).bytes()))
        except (NotFoundError, FileNotFoundError):
            return None
        return None if not record or record.get("released") or _expired(record) else record
    try:
        with open(os.path.join(store.root, LOCK_FILE), "rb") as fh:
            return _parse(fh.read())
    except OSError:
        return None


class run_lock:
    """`with run_lock(store, run_id, command) as lock:` hold the index's run lock. `name`: another
    lock of the index, by its path under the root (each LLM batch's collection has one)."""

    def __init__(self, store, run_id: str, command: str, lease_s: float | None = None, name: str = LOCK_FILE):
        if store.is_remote:
            self.lock = LeaseLock(store.files, store.root, run_id, command, lease_s or lease_seconds(), name)
        else:
            self.lock = FileLock(store.root, run_id, command, name)

    def __enter__(self):
        return self.lock.acquire()

    def __exit__(self, *exc) -> None:
        self.lock.release()

