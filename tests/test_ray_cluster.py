"""The job entrypoints against a real Ray cluster: a head and a second worker node started here
with `ray start`, token authentication on, jobs submitted through the Ray Jobs API."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
pytestmark = pytest.mark.skipif(not RAY.exists(), reason="the ray CLI is not installed beside this python")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _node_ports(ports: list[int]) -> list[str]:
    agent, grpc, runtime_env, metrics, object_manager, node_manager = ports
    return [f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={grpc}",
            f"--runtime-env-agent-port={runtime_env}", f"--metrics-export-port={metrics}",
            f"--object-manager-port={object_manager}", f"--node-manager-port={node_manager}"]


class Cluster:
    def __init__(self, tmp: Path):
        self.token = secrets.token_hex(16)
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "RAY_USAGE_STATS_ENABLED": "0"}
        self.env.pop("RAY_ADDRESS", None)
        gcs, dashboard, client, *node_ports = _free_ports(15)
        self.gcs = f"127.0.0.1:{gcs}"
        self.dashboard = f"http://127.0.0.1:{dashboard}"
        self.processes: list[subprocess.Popen] = []
        self._start("head", ["--head", f"--port={gcs}", f"--dashboard-port={dashboard}", "--dashboard-host=127.0.0.1",
                             "--include-dashboard=true", f"--ray-client-server-port={client}", "--num-cpus=1",
                             f"--temp-dir={tmp / 'ray'}", *_node_ports(node_ports[:6])], tmp)
        self._wait(lambda: requests.get(f"{self.dashboard}/api/version", headers=self.auth, timeout=2).ok, "the head's dashboard")
        self._start("worker", [f"--address={self.gcs}", "--num-cpus=1", *_node_ports(node_ports[6:12])], tmp)
        self._wait(lambda: self.alive_nodes() == 2, "the second node")

    def _start(self, name: str, args: list[str], tmp: Path) -> None:
        log = open(tmp / f"ray-{name}.log", "w")
        # --block keeps `ray start` in the foreground, so its process group holds the node's processes
        self.processes.append(subprocess.Popen([str(RAY), "start", "--block", "--disable-usage-stats", *args], env=self.env,
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _wait(self, ready, what: str, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if ready():
                    return
            except requests.RequestException:
                pass
            if any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"a ray node exited while waiting for {what}")
            time.sleep(1)
        raise TimeoutError(f"{what} did not come up in {timeout:.0f} s")

    def alive_nodes(self) -> int:
        reply = requests.get(f"{self.dashboard}/nodes?view=summary", headers=self.auth, timeout=5).json()
        return sum(1 for n in reply["data"]["summary"] if n["raylet"]["state"] == "ALIVE")

    @property
    def auth(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def submit(self, *args: str, timeout: float = 600) -> tuple[str, str]:
        """Run `python jobs/<args>` as a Ray job; returns (final status, logs)."""
        from ray.job_submission import JobStatus, JobSubmissionClient

        client = JobSubmissionClient(self.dashboard, headers=self.auth)
        job = client.submit_job(entrypoint=" ".join([sys.executable, *args]))
        deadline = time.time() + timeout
        while (status := client.get_job_status(job)) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            if time.time() > deadline:
                client.stop_job(job)
                raise TimeoutError(f"job {job} still {status} after {timeout:.0f} s")
            time.sleep(2)
        return str(status), client.get_job_logs(job)

    def stop(self) -> None:
        for p in reversed(self.processes):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for p in self.processes:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def _result(logs: str) -> dict:
    """The job's JSON result: the last line of its output that parses as an object."""
    for line in reversed(logs.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON result in the job's output:\n{logs[-3000:]}")


@pytest.fixture(scope="module")
def cluster():
    tmp = Path(tempfile.mkdtemp(prefix="gwray-", dir="/tmp"))  # Ray's socket paths must stay under 107 bytes
    c = Cluster(tmp)
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


def test_jobs_api_refuses_requests_without_the_token(cluster):
    assert requests.get(f"{cluster.dashboard}/api/jobs/", timeout=5).status_code == 401
    assert requests.get(f"{cluster.dashboard}/api/jobs/", headers={"Authorization": "Bearer wrong"}, timeout=5).status_code in (401, 403)
    assert requests.get(f"{cluster.dashboard}/api/jobs/", headers=cluster.auth, timeout=5).status_code == 200


def test_nightly_job_indexes_on_the_cluster(cluster, corpus, tmp_path_factory):
    index = tmp_path_factory.mktemp("nightly") / "index"
    status, logs = cluster.submit(str(REPO / "jobs" / "nightly.py"), str(corpus), "--index", str(index),
                                  "--config", str(REPO / "pipelines" / "tiny-test.yaml"))
    assert status == "SUCCEEDED", logs[-3000:]
    assert "executor: ray (auto" in logs  # the job joined the cluster instead of running in-process
    result = _result(logs)
    assert result["run"]["version"] == 1 and result["run"]["new_version"]
    assert result["cost"]["worker_cpu_s"] > 0  # batches ran in Ray workers and their CPU was counted
    assert (index / "reports" / "cost.png").stat().st_size > 0


@pytest.mark.slow
def test_nightly_sequence_noop_add_delete(cluster, corpus, tmp_path_factory):
    """First run, a no-op rerun, a run after adding a document, a run after deleting one, then
    the cost history says what each incremental run saved against a full rebuild."""
    index = tmp_path_factory.mktemp("sequence") / "index"
    args = [str(REPO / "jobs" / "nightly.py"), str(corpus), "--index", str(index), "--config", str(REPO / "pipelines" / "tiny-test.yaml")]
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
