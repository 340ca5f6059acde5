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


# ------------------------------------------------------------------ runs left `running` (issue 22)

KILLED_MID_RUN = textwrap.dedent("""
    import dataclasses, sys, time
    from graphwright.config import load_config
    from graphwright.pipeline import definition, runner

    def hang(run, metrics):
        print("in cluster", flush=True)
        time.sleep(600)

    definition.INDEX = tuple(dataclasses.replace(s, execute=hang) if s.name == "cluster" else s for s in definition.INDEX)
    runner.run_index([sys.argv[1]], sys.argv[2], load_config(sys.argv[3]), show_progress=False, log=lambda m: None)
""")


def _runs(index) -> list[dict]:
    result = CliRunner().invoke(app, ["runs", "--index", str(index), "--json"])
    assert result.exit_code == 0, result.output
    import json

    return json.loads(result.stdout)


def test_a_killed_run_is_marked_interrupted_by_runs_and_by_the_next_run(tmp_path):
    index = tmp_path / "index"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_MID_RUN, str(CORPUS), str(index), str(CONFIG_FILE)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "in cluster", proc.stderr.read()
        (alive,) = _runs(index)
        assert alive["status"] == "running"  # its process holds the lock: it is running
    finally:
        kill_holder(proc)
    (killed,) = _runs(index)
    assert killed["status"] == "interrupted" and "ended without recording an outcome" in killed["error"]
    store = IndexStore(index)
    assert store.read("runs", columns=["status"]).column("status").to_pylist() == ["interrupted"]  # written, not only shown

    # a second killed run, found by the next run rather than by `runs`
    from graphwright.ops.runs import stale_runs
    from graphwright.pipeline.runner import run_index

    import pyarrow as pa

    store.upsert("runs", pa.Table.from_pylist([{**store.read("runs").to_pylist()[0], "run_id": "run-dead", "status": "running",
                                                 "error": None}]))
    run_index([str(CORPUS)], index, make_config(), show_progress=False, log=lambda m: None)
    statuses = dict(zip(*(store.read("runs").column(c).to_pylist() for c in ("run_id", "status"))))
    assert statuses.pop("run-dead") == "interrupted" and sorted(statuses.values()) == ["interrupted", "succeeded"]
    assert stale_runs(store, None) == []


def test_runs_while_another_run_holds_the_lock_shows_dead_runs_without_writing(tmp_path):
    import pyarrow as pa

    from graphwright.pipeline.runner import run_index

    index = tmp_path / "index"
    run_index([str(CORPUS)], index, make_config(), show_progress=False, log=lambda m: None)
    store = IndexStore(index)
    row = store.read("runs").to_pylist()[0]
    store.upsert("runs", pa.Table.from_pylist([{**row, "run_id": "run-dead", "status": "running", "error": None},
                                               {**row, "run_id": "run-holder", "status": "running", "error": None}]))
    holder = start_holder(str(index))
    try:
        shown = {r["run_id"]: r["status"] for r in _runs(index)}
        assert shown["run-holder"] == "running" and shown["run-dead"] == "interrupted"
        stored = dict(zip(*(store.read("runs").column(c).to_pylist() for c in ("run_id", "status"))))
        assert stored["run-dead"] == "running"  # the holder may be writing the runs table: not touched
    finally:
        kill_holder(holder)


def test_run_errors_are_stored_without_terminal_escapes(tmp_path, monkeypatch):
    import dataclasses

    from graphwright.pipeline import definition
    from graphwright.pipeline.runner import run_index

    def fail(run, metrics):
        raise RuntimeError("\x1b[31m\x1b[1mray worker died\x1b[0m \x1b]8;;http://x\x07link\x1b]8;;\x07")

    monkeypatch.setattr(definition, "INDEX", tuple(dataclasses.replace(s, execute=fail) if s.name == "cluster" else s
                                                   for s in definition.INDEX))
    with pytest.raises(RuntimeError):
        run_index([str(CORPUS)], tmp_path / "index", make_config(), show_progress=False, log=lambda m: None)
    store = IndexStore(tmp_path / "index")
    (error,) = store.read("runs", columns=["error"]).column("error").to_pylist()
    assert error == "RuntimeError: ray worker died link"
    failed = [m for m in store.read("stage_metrics", columns=["details"]).column("details").to_pylist() if "failed" in m]
    assert failed and all("\\u001b" not in m and "\x1b" not in m for m in failed)
