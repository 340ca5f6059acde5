"""The job entrypoints against a real Ray cluster: a head and a second worker node started here
with `ray start`, token authentication on, jobs submitted through the Ray Jobs API."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import requests

from graphwright.ops.local_cluster import RAY, LocalCluster

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not RAY.exists(), reason="the ray CLI is not installed beside this python")


def _result(logs: str) -> dict:
    """The job's JSON result: the last line of its output that parses as an object."""
    for line in reversed(logs.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON result in the job's output:\n{logs[-3000:]}")


@pytest.fixture(scope="module")
def cluster():
    tmp = Path(tempfile.mkdtemp(prefix="gwray-", dir="/tmp"))  # Ray's socket paths must stay under 107 bytes
    c = LocalCluster(tmp)
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("nightly-corpus")
    shutil.copytree(REPO / "tests" / "data" / "corpus", root / "corpus")
    return root / "corpus"


@pytest.fixture(scope="module")
def job_config(tmp_path_factory) -> str:
    """pipelines/tiny-test.yaml with every batch sent to the cluster: the corpus is a few batches,
    which a run would otherwise do in the driver (execution.inline_batches, inline_seconds)."""
    path = tmp_path_factory.mktemp("config") / "cluster-test.yaml"
    path.write_text((REPO / "pipelines" / "tiny-test.yaml").read_text().replace("execution:\n", "execution:\n  inline_batches: 0\n  inline_seconds: 0\n"))
    return str(path)


def test_jobs_api_refuses_requests_without_the_token(cluster):
    assert requests.get(f"{cluster.dashboard}/api/jobs/", timeout=5).status_code == 401
    assert requests.get(f"{cluster.dashboard}/api/jobs/", headers={"Authorization": "Bearer wrong"}, timeout=5).status_code in (401, 403)
    assert requests.get(f"{cluster.dashboard}/api/jobs/", headers=cluster.auth, timeout=5).status_code == 200


def test_nightly_job_indexes_on_the_cluster(cluster, corpus, job_config, tmp_path_factory):
    index = tmp_path_factory.mktemp("nightly") / "index"
    status, logs = cluster.submit(str(REPO / "jobs" / "nightly.py"), str(corpus), "--index", str(index),
                                  "--config", job_config)
    assert status == "SUCCEEDED", logs[-3000:]
    assert "executor: ray (auto" in logs  # the job joined the cluster instead of running in-process
    result = _result(logs)
    assert result["run"]["version"] == 1 and result["run"]["new_version"]
    assert result["cost"]["worker_cpu_s"] > 0  # batches ran in Ray workers and their CPU was counted
    assert (index / "reports" / "cost.png").stat().st_size > 0


@pytest.mark.slow
def test_nightly_sequence_noop_add_delete(cluster, corpus, job_config, tmp_path_factory):
    """First run, a no-op rerun, a run after adding a document, a run after deleting one, then
    the cost history says what each incremental run saved against a full rebuild."""
    index = tmp_path_factory.mktemp("sequence") / "index"
    args = [str(REPO / "jobs" / "nightly.py"), str(corpus), "--index", str(index), "--config", job_config]
    runs = []
    for step in ("first", "noop", "added", "deleted"):
        if step == "added":
            (corpus / "added.txt").write_text("Ada Lovelace corresponded with Charles Babbage about the Analytical Engine. "
                                              "Mary Somerville introduced Ada Lovelace to Charles Babbage in London.\n")
        if step == "deleted":
            (corpus / "added.txt").unlink()
        status, logs = cluster.submit(*args)
        assert status == "SUCCEEDED", logs[-3000:]
        runs.append(_result(logs))
    first, noop, added, deleted = (r["run"] for r in runs)
    assert first["new_version"] and first["chunks_extracted"] == first["chunks"]
    assert not noop["new_version"] and noop["chunks_extracted"] == 0
    assert added["new_version"] and added["documents_diff"]["new"] == 1 and added["chunks_extracted"] == 1
    assert deleted["new_version"] and deleted["documents_diff"]["deleted"] == 1 and deleted["chunks_extracted"] == 0
    assert deleted["entities"] == first["entities"] and deleted["relationships"] == first["relationships"]
    costs = [r["cost"] for r in runs]
    assert costs[-1]["runs_recorded"] == 4
    for c in costs[1:]:
        assert c["full_rebuild_cost"] > c["cost"]


def test_a_submission_waits_for_the_job_agent_and_reraises_other_errors(monkeypatch):
    """Ray's job manager refuses submissions ("No available agent ..., please try again later")
    until a node's dashboard agent has registered, which can come after both nodes are ALIVE:
    submit tries again for a while; any other error goes to the caller at once."""
    import ray.job_submission as jobs

    from graphwright.ops import local_cluster

    attempts = []

    class Client:
        def __init__(self, address, headers):
            pass

        def submit_job(self, entrypoint):
            attempts.append(entrypoint)
            if len(attempts) < 3:
                raise RuntimeError("Request failed with status code 500: No available agent to submit job, please try again later..")
            return "job-1"

        def get_job_status(self, job):
            return jobs.JobStatus.SUCCEEDED

        def get_job_logs(self, job):
            return "done"

    monkeypatch.setattr(jobs, "JobSubmissionClient", Client)
    monkeypatch.setattr(local_cluster.time, "sleep", lambda s: None)
    cluster = object.__new__(LocalCluster)
    cluster.dashboard, cluster.token = "http://127.0.0.1:1", "t"
    assert cluster.submit("jobs/nightly.py") == (str(jobs.JobStatus.SUCCEEDED), "done") and len(attempts) == 3

    class Refusing(Client):
        def submit_job(self, entrypoint):
            attempts.append(entrypoint)
            raise RuntimeError("Request failed with status code 400: bad entrypoint")

    monkeypatch.setattr(jobs, "JobSubmissionClient", Refusing)
    attempts.clear()
    with pytest.raises(RuntimeError, match="bad entrypoint"):
        cluster.submit("jobs/nightly.py")
    assert len(attempts) == 1
