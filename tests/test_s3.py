"""An index on S3, for real: a moto server on a loopback port stands in for S3 (it implements
If-None-Match and If-Match on PutObject, which Delta commits and the run lease rely on)."""

import json
import multiprocessing
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from _helpers import CONFIG_FILE, CORPUS, CORPUS_KEYS
from test_lock import kill_holder, start_holder

from graphwright.storage.delta import IndexStore
from graphwright.storage.lock import (
    LOCK_FILE,
    LOCKED_EXIT,
    IndexLocked,
    LockLost,
    run_lock,
)
from graphwright.storage.manifest import load_manifest

pytest.importorskip("moto", reason="needs the dev extra (moto[server])")
BUCKET = "graphwright-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server with one bucket; the standard AWS_* variables point at it. Yields the
    boto3 client and the server's request log (one line per request, with its status)."""
    import boto3

    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "requests.log"
    with log.open("wb") as sink:
        server = subprocess.Popen([sys.executable, str(Path(__file__).parent / "_moto_serial.py"), "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=sink, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail("the moto server did not start")
            time.sleep(0.1)
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.delenv("AWS_PROFILE", raising=False)
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield SimpleNamespace(client=client, log=log)
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture
def prefix(s3) -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


def upload(client, folder: Path, uri: str) -> None:
    key_prefix = uri.removeprefix(f"s3://{BUCKET}/")
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        client.put_object(Bucket=BUCKET, Key=f"{key_prefix}/{path.relative_to(folder).as_posix()}", Body=path.read_bytes())


# ---------------------------------------------------------------- configuration (no server)


def test_storage_options_come_from_graphwright_storage_variables_and_stay_out_of_the_config():
    from graphwright.config import load_config
    from graphwright.storage.location import is_uri, join, storage_options

    env = {"GRAPHWRIGHT_STORAGE__AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "GRAPHWRIGHT_STORAGE__AWS_ALLOW_HTTP": "true",
           "GRAPHWRIGHT_LOCK__LEASE_S": "30", "GRAPHWRIGHT_CHUNK__SIZE_TOKENS": "100"}
    assert storage_options(env) == {"aws_endpoint_url": "http://127.0.0.1:9000", "aws_allow_http": "true"}
    cfg = load_config(None, environ=env)
    assert cfg.chunk.size_tokens == 100
    assert "9000" not in cfg.model_dump_json()  # never reaches the manifest
    assert is_uri("s3://b/p") and is_uri("abfss://c@a.dfs.core.windows.net/p") and not is_uri("/tmp/x")
    assert not is_uri("file:///tmp/x")
    assert join("s3://b/p/", "tables", "chunks") == "s3://b/p/tables/chunks"
    assert IndexStore("file:///tmp/x").root == Path("/tmp/x")


# ---------------------------------------------------------------- Delta commits on S3


def test_a_stale_delta_writer_on_s3_fails_or_rebases_and_never_overwrites(prefix):
    """Two writers prepare a commit of the same version: the second one fails (no retries) or
    rebases onto the first (retries); delta-rs will not write to S3 without conditional puts."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, write_deltalake
    from deltalake.exceptions import CommitFailedError

    uri = f"{prefix}/t"
    write_deltalake(uri, pa.table({"w": ["init"]}))
    first, second = DeltaTable(uri), DeltaTable(uri)  # both at version 0
    no_retry = CommitProperties(max_commit_retries=0)
    write_deltalake(first, pa.table({"w": ["first"]}), mode="append", commit_properties=no_retry)
    with pytest.raises(CommitFailedError):
        write_deltalake(second, pa.table({"w": ["second"]}), mode="append", commit_properties=no_retry)
    table = DeltaTable(uri)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_dataset().to_table().column("w").to_pylist()) == ["first", "init"]
    # with the default retries the late writer rebases onto version 1 and commits version 2
    write_deltalake(second, pa.table({"w": ["second"]}), mode="append")
    assert DeltaTable(uri).version() == 2
    # delta-rs will not write to S3 without conditional puts (there is no unsafe fallback)
    with pytest.raises(OSError, match="conditional put is disabled"):
        write_deltalake(f"{prefix}/unsafe", pa.table({"w": ["x"]}), storage_options={"aws_conditional_put": "disabled"})


def _append_rows(uri: str, writer: int, commits: int, barrier, results) -> None:
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake
    from deltalake.exceptions import CommitFailedError

    refused = 0
    barrier.wait()
    for n in range(commits):
        while True:
            try:  # no retries inside delta-rs: every refused conditional put is counted here
                write_deltalake(uri, pa.table({"w": [f"{writer}-{n}"]}), mode="append",
                                commit_properties=CommitProperties(max_commit_retries=0))
                break
            except CommitFailedError:
                refused += 1
    results.put((writer, refused))


def test_a_trimmed_log_on_s3_reads_from_its_floor(prefix):
    from datetime import datetime, timezone

    from graphwright.storage.health import log_entries
    from graphwright.storage.log_retention import trim_log

    store = IndexStore(prefix)
    for n in range(14):
        store.upsert("runs", pa.Table.from_pylist([{"run_id": f"run-{n:03d}", "command": "index", "started_at": datetime.now(timezone.utc),
                                                    "status": "succeeded", "config_hash": "c", "summary": "{}", "finished_at": None,
                                                    "error": None}]))
        if n == 9:
            store.ensure("runs").create_checkpoint()
            floor = store.version("runs")
    assert trim_log(store, "runs", store.version("runs")) == floor  # the commits 0 .. floor - 1, deleted through obstore
    assert min(int(n[:20]) for n in log_entries(store.table_files("runs")) if n[:20].isdigit()) == floor
    assert store.read("runs", version=floor).num_rows == floor and store.read("runs").num_rows == 14


@pytest.mark.slow
def test_a_stage_input_staged_on_s3_reads_back_and_goes(prefix):
    from graphwright.pipeline.staging import PART_COLUMN, Staging, index_files, read_parts

    staging = Staging(prefix, "run-a")
    table = pa.table({"x": list(range(100))})
    folder, parts = staging.write("extract", [table.slice(0, 60), table.slice(60)])
    assert read_parts(pa.table({PART_COLUMN: parts}), index_files(prefix)).equals(table)
    staging.write("embed", [table])
    assert staging.remove(folder) == 2
    assert staging.clear_all() == 1 and index_files(prefix).list("staging/") == []


def test_concurrent_delta_writers_on_s3_lose_no_commit(s3, prefix):
    """Writers racing for the same versions: each version's log entry is written by exactly one
    PUT; the server refuses the others (If-None-Match -> 412) and their writers retry."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    uri, writers, commits = f"{prefix}/concurrent", 4, 5
    write_deltalake(uri, pa.table({"w": ["init"]}))
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=_append_rows, args=(uri, w, commits, barrier, results)) for w in range(writers)]
    for p in procs:
        p.start()
    refused = dict(results.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    table = DeltaTable(uri)
    rows = table.to_pyarrow_dataset().to_table().column("w").to_pylist()
    assert sorted(rows) == sorted(["init"] + [f"{w}-{n}" for w in range(writers) for n in range(commits)])
    assert table.version() == writers * commits  # one version per commit, none overwritten
    assert len(table.history()) == writers * commits + 1
    log_prefix = f"PUT /{uri.removeprefix('s3://')}/_delta_log/"
    puts = [line for line in s3.log.read_text().splitlines() if log_prefix in line and ".json " in line]
    won = [line.split(log_prefix)[1].split()[0] for line in puts if '" 200 ' in line]
    assert sorted(won) == [f"{v:020d}.json" for v in range(writers * commits + 1)]  # one PUT won each version
    print(f"\n{writers} writers x {commits} commits: {sum(refused.values())} failed commit attempts "
          f"(per writer {refused}), {sum(1 for line in puts if chr(34) + ' 412 ' in line)} log PUTs refused by the server (412)")


# ---------------------------------------------------------------- sources on S3


def test_sources_read_from_s3_prefix_object_and_glob(s3, prefix):
    from graphwright.stages.ingest.sources import read_sources

    upload(s3.client, CORPUS, f"{prefix}/corpus")
    batch = read_sources([f"{prefix}/corpus"])
    assert {d.source_key for d in batch.documents} == CORPUS_KEYS and not batch.errors
    assert {d.source for d in batch.documents if d.source_key == "harbor.txt"} == {f"{prefix}/corpus/harbor.txt"}
    one = read_sources([f"{prefix}/corpus/letters.jsonl"])
    assert {d.source_key for d in one.documents} == {"letter-1", "letter-2"}
    globbed = read_sources([f"{prefix}/corpus/*.txt"])
    assert {d.source_key for d in globbed.documents} == {"harbor.txt", "council.txt", "notes/river.txt"}
    missing = read_sources([f"{prefix}/nothing-here/"])
    assert not missing.documents and missing.errors[0].reason.startswith("no such object")
    no_bucket = read_sources(["s3://no-such-bucket-here/docs/"])
    assert not no_bucket.documents and no_bucket.errors[0].reason.startswith("cannot list")
    assert no_bucket.failed_sources == {"s3://no-such-bucket-here/docs/"}


# ---------------------------------------------------------------- the run lease on S3


def test_lease_refuses_a_second_run_naming_the_holder_and_release_frees_it(prefix):
    store = IndexStore(prefix)
    with run_lock(store, "run-a", "index", lease_s=30), \
            pytest.raises(IndexLocked, match=r"run-a \(index\) on host .*, pid \d+, since .*lease expires"):
        run_lock(store, "run-b", "index", lease_s=30).__enter__()
    with run_lock(store, "run-b", "delete", lease_s=30):  # released: taken at once
        pass
    assert json.loads(store.files.read_bytes(LOCK_FILE))["released"] is True


def _race(store, name: str, takers: int) -> tuple[list, list]:
    """`takers` threads try to take the lease at the same moment: (locks won, refusals)."""
    barrier, won, refused = threading.Barrier(takers), [], []

    def take(i):
        lock = run_lock(store, f"run-{name}-{i}", "index", lease_s=30)
        barrier.wait()
        try:
            lock.__enter__()
            won.append(lock)
        except IndexLocked:
            refused.append(i)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(takers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won, refused


def test_racing_takers_of_a_lease_exactly_one_wins(prefix):
    store = IndexStore(prefix)
    for round_ in ("absent", "released"):  # create-if-absent, then replace-if-unchanged
        won, refused = _race(store, round_, 6)
        assert len(won) == 1 and len(refused) == 5, round_
        won[0].__exit__(None, None, None)


def test_a_holder_that_renews_keeps_the_lease_past_its_length(prefix):
    store = IndexStore(prefix)
    with run_lock(store, "run-a", "index", lease_s=1.5):
        time.sleep(3)  # two lease lengths: only the renewals keep it
        with pytest.raises(IndexLocked, match="run-a"):
            run_lock(store, "run-b", "index", lease_s=1.5).__enter__()


def test_a_holder_whose_lease_was_taken_over_knows_it(prefix):
    store = IndexStore(prefix)
    with run_lock(store, "run-a", "index", lease_s=1.5) as lock:
        store.files.write_bytes(LOCK_FILE, json.dumps({"run_id": "run-b", "expires_at": "2999-01-01T00:00:00+00:00"}).encode())
        deadline = time.monotonic() + 10
        while lock.lost is None and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(LockLost):
            lock.check()
    assert json.loads(store.files.read_bytes(LOCK_FILE))["run_id"] == "run-b"  # not released by run-a


def test_sigkilled_holder_blocks_until_its_lease_expires(prefix):
    store = IndexStore(prefix)
    holder = start_holder(prefix, lease_s=2)
    kill_holder(holder)
    with pytest.raises(IndexLocked, match=f"pid {holder.pid}"):  # the dead holder's lease still runs
        run_lock(store, "run-b", "index", lease_s=2).__enter__()
    time.sleep(2.5)
    with run_lock(store, "run-b", "index", lease_s=2):
        assert json.loads(store.files.read_bytes(LOCK_FILE))["run_id"] == "run-b"


# ---------------------------------------------------------------- the pipeline on S3


def invoke(*args):
    from typer.testing import CliRunner

    from graphwright.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


@pytest.mark.slow
def test_index_query_delete_rollback_vacuum_on_s3(s3, prefix):
    """`graphwright ... --index s3://...` end to end, sources on S3 too."""
    upload(s3.client, CORPUS, f"{prefix}/corpus")
    index = f"{prefix}/index"
    first = invoke("index", f"{prefix}/corpus", "--index", index, "--config", CONFIG_FILE, "--json")
    assert first["version"] == 1 and first["documents"] == len(CORPUS_KEYS) and not first["source_errors"]
    listed = s3.client.list_objects_v2(Bucket=BUCKET, Prefix=index.removeprefix(f"s3://{BUCKET}/") + "/vectors/")
    assert any(o["Key"].endswith(".faiss") for o in listed.get("Contents", []))

    hits = invoke("query", "harbor festival", "--index", index, "--json")
    assert hits["version"] == 1 and hits["evidence"]
    naive = invoke("query", "harbor festival", "--index", index, "--mode", "naive", "--json")
    assert naive["evidence"]

    again = invoke("index", f"{prefix}/corpus", "--index", index, "--config", CONFIG_FILE, "--json")
    assert again["new_version"] is False and again["chunks_extracted"] == 0

    deleted = invoke("delete", "--index", index, "--doc-id", "harbor.txt", "--json")
    assert deleted["version"] == 2 and deleted["documents"] == len(CORPUS_KEYS) - 1

    rolled = invoke("rollback", "--index", index, "--to", "1", "--json")
    assert rolled["version"] == 3 and rolled["counts"]["documents"] == len(CORPUS_KEYS)
    assert [v["version"] for v in invoke("versions", "--index", index, "--json")] == [1, 2, 3]
    assert invoke("query", "harbor", "--index", index, "--json")["version"] == 3

    vacuumed = invoke("vacuum", "--index", index, "--keep", "1", "--json")
    assert vacuumed["kept"] == [3] and vacuumed["dropped"] == [1, 2]
    assert [v["version"] for v in invoke("versions", "--index", index, "--json")] == [3]
    assert invoke("query", "harbor", "--index", index, "--json")["evidence"]
    store = IndexStore(index)
    kept = set(load_manifest(store)["vector_indexes"].values())  # vector files, lexical indexes, the passage graph
    assert {p for p in store.files.list("vectors") if p.endswith(".faiss")} == {p for p in kept if p.endswith(".faiss")}  # the others went
    assert all(store.files.exists(p) for p in kept)
    assert invoke("check", "--index", index, "--json")["ok"]  # its logs trimmed too


def test_commands_on_a_missing_s3_index_say_so(prefix):
    from typer.testing import CliRunner

    from graphwright.cli import app

    result = CliRunner().invoke(app, ["versions", "--index", f"{prefix}/none"])
    assert result.exit_code == 1 and "not an index" in result.output


@pytest.mark.slow
def test_nightly_job_with_the_index_on_s3(s3, prefix, tmp_path):
    """jobs/nightly.py with --index s3://...: while another run holds the index the job
    refuses (exit 75); once that holder has been SIGKILLed and its lease has run out, it publishes."""
    index = f"{prefix}/index"
    job = [sys.executable, str(Path(__file__).parents[1] / "jobs" / "nightly.py"), str(CORPUS),
           "--index", index, "--config", str(CONFIG_FILE)]
    holder = start_holder(index, lease_s=3)
    try:
        refused = subprocess.run(job, capture_output=True, text=True, timeout=300, check=False)
    finally:
        kill_holder(holder)
    assert refused.returncode == LOCKED_EXIT, refused.stderr[-2000:]
    assert f"locked by run run-holder (index) on host {socket.gethostname()}, pid {holder.pid}" in refused.stderr
    time.sleep(3.5)  # the killed holder's lease runs out
    done = subprocess.run(job, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])["run"]
    assert summary["index"] == index and summary["version"] == 1 and summary["documents"] == len(CORPUS_KEYS)


def test_a_data_file_gone_from_s3_is_named_as_missing(s3, prefix):
    """obstore's errors are not OSErrors: a data file gone from the bucket is still reported as the
    table's missing file (and as a FileNotFoundError, which the LLM cache's lookup falls back on)."""
    from graphwright.storage.health import DataFileMissing
    from graphwright.storage.patch import data_files, read_data_file

    from datetime import datetime, timezone

    store = IndexStore(prefix)
    store.upsert("runs", pa.Table.from_pylist([{"run_id": "run-1", "command": "index", "started_at": datetime.now(timezone.utc), "status": "succeeded",
                                                "config_hash": "c", "summary": "{}", "finished_at": None, "error": None}]))
    (path, _), = data_files(store, "runs")
    assert read_data_file(store, "runs", path, ["run_id"]).column("run_id").to_pylist() == ["run-1"]
    s3.client.delete_object(Bucket=BUCKET, Key=f"{prefix.removeprefix(f's3://{BUCKET}/')}/tables/runs/{path}")
    with pytest.raises(DataFileMissing, match=rf"table runs of {prefix} cannot be read: its data file {path} is missing") as gone:
        read_data_file(store, "runs", path, ["run_id"])
    assert str(gone.value).count("its data file") == 1
