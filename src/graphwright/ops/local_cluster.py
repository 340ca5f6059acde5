"""A Ray cluster of two nodes on this machine (`ray start --head` plus a worker node), with token
authentication on: what the tests and the nightly demo submit jobs to. Each node runs under
`ray start --block` in its own process group, so stopping it stops exactly its processes (never
`ray stop`, which would stop every Ray on the machine)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

RAY = Path(sys.executable).with_name("ray")
AGENT_WAIT_S = 60  # how long a submission waits for the job manager to have a node's agent


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


class LocalCluster:
    """Start with `LocalCluster(tmp)`; `tmp` must be a short path (Ray's socket paths are limited to 107 bytes)."""

    def __init__(self, tmp: Path):
        self.token = secrets.token_hex(16)
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "RAY_USAGE_STATS_ENABLED": "0"}
        self.env.pop("RAY_ADDRESS", None)
        gcs, dashboard, client, *node_ports = _free_ports(15)
        self.gcs = f"127.0.0.1:{gcs}"
        self.dashboard = f"http://127.0.0.1:{dashboard}"
        self.processes: list[subprocess.Popen] = []
        try:
            self._start("head", ["--head", f"--port={gcs}", f"--dashboard-port={dashboard}", "--dashboard-host=127.0.0.1",
                                 "--include-dashboard=true", f"--ray-client-server-port={client}", "--num-cpus=1",
                                 f"--temp-dir={tmp / 'ray'}", *_node_ports(node_ports[:6])], tmp)
            self._wait(lambda: requests.get(f"{self.dashboard}/api/version", headers=self.auth, timeout=2).ok, "the head's dashboard")
            self._start("worker", [f"--address={self.gcs}", "--num-cpus=1", *_node_ports(node_ports[6:12])], tmp)
            self._wait(lambda: self.alive_nodes() == 2, "the second node")
        except BaseException:
            self.stop()  # a node that came up must not outlive a failed start
            raise

    def _start(self, name: str, args: list[str], tmp: Path) -> None:
        # --block keeps `ray start` in the foreground, so its process group holds the node's processes
        with open(tmp / f"ray-{name}.log", "w") as log:
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
        deadline = time.time() + timeout
        agent_deadline = time.time() + AGENT_WAIT_S
        while True:
            try:
                job = client.submit_job(entrypoint=" ".join([sys.executable, *args]))
                break
            except RuntimeError as e:
                # the job manager answers 500 "No available agent to submit job, please try again
                # later" until a node's dashboard agent has registered with it, which can come
                # seconds after the node is ALIVE (a CI run's first submission met it)
                if "No available agent" not in str(e) or time.time() > agent_deadline:
                    raise
                time.sleep(1)
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
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                p.wait()
