"""The run lock on a local index: a second run refuses naming the holder; a SIGKILLed holder does
not block the next run; a finished run releases it."""

import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
from _helpers import CONFIG_FILE, CORPUS, make_config
from typer.testing import CliRunner

from graphwright.cli import app
from graphwright.storage.delta import IndexStore
from graphwright.storage.lock import LOCKED_EXIT, IndexLocked, run_lock

HOLD = textwrap.dedent("""
    import sys, time
    from graphwright.storage.lock import run_lock
    from graphwright.storage.delta import IndexStore
    lease = float(sys.argv[2]) if len(sys.argv) > 2 else None
    with run_lock(IndexStore(sys.argv[1]), "run-holder", "index", lease):
        print("held", flush=True)
        time.sleep(600)
""")


def start_holder(location: str, lease_s: float | None = None) -> subprocess.Popen:
    """A process that takes the run lock and sleeps holding it."""
    args = [sys.executable, "-c", HOLD, location] + ([str(lease_s)] if lease_s else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "held":
        proc.kill()
        raise AssertionError(f"holder did not take the lock: {line!r} {proc.stderr.read()}")
    return proc


def kill_holder(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_second_lock_refuses_naming_the_holder_and_release_frees_it(tmp_path):
    store = IndexStore(tmp_path / "index")
    with run_lock(store, "run-a", "index"):
        with pytest.raises(IndexLocked) as refused:
            run_lock(store, "run-b", "delete").__enter__()
        message = str(refused.value)
        for part in ("run-a", "(index)", socket.gethostname(), f"pid {os.getpid()}", "since 20"):
            assert part in message
    with run_lock(store, "run-b", "delete"):
        pass


def test_sigkilled_holder_does_not_block_the_next_run(tmp_path):
    store = IndexStore(tmp_path / "index")
    holder = start_holder(str(store.root))
    try:
        with pytest.raises(IndexLocked, match=f"run-holder .* pid {holder.pid}"):
            run_lock(store, "run-b", "index").__enter__()
    finally:
        kill_holder(holder)
    with run_lock(store, "run-b", "index"):  # at once: the kernel dropped the dead holder's flock
        pass


def test_a_run_refuses_while_another_holds_the_index_and_changes_nothing(tmp_path):
    from graphwright.pipeline.runner import run_index

    index = tmp_path / "index"
    holder = start_holder(str(index))
    try:
        with pytest.raises(IndexLocked, match=f"pid {holder.pid}"):
            run_index([str(CORPUS)], index, make_config(), show_progress=False, log=lambda m: None)
        assert not (index / "tables").exists()
        result = CliRunner().invoke(app, ["index", str(CORPUS), "--index", str(index), "--config", str(CONFIG_FILE)])
        assert result.exit_code == LOCKED_EXIT
        assert "locked by run run-holder" in " ".join(result.output.split())
    finally:
        kill_holder(holder)
