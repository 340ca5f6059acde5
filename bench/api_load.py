"""Load test of the HTTP API on loopback.

    python bench/api_load.py [--index-root DIR] [--requests 200] [--concurrency 8] [--workers 4]

Without --index-root it indexes sample/a_christmas_carol.txt (default pipeline, in-process
executor) into a temporary root first. Then it starts `graphwright serve` on 127.0.0.1 as a
subprocess with a fresh API key, waits for /health, sends one warm-up query per mode, fires
--requests queries (a mix of questions and modes) with at most --concurrency in flight, and
prints throughput and latency percentiles; then a batch without a key, one with a wrong key and a
few path-traversal names, with the status codes they got. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import numpy as np
from yarl import URL
from _ports import free_port

SAMPLE = Path(__file__).resolve().parent.parent / "sample" / "a_christmas_carol.txt"
QUESTIONS = [
    "Who is Scrooge's nephew?",
    "What happened to Jacob Marley?",
    "Who is Bob Cratchit?",
    "What does the Ghost of Christmas Past show Scrooge?",
    "Where does Scrooge see his own grave?",
    "What is wrong with Tiny Tim?",
    "Who is Fezziwig?",
    "What does Scrooge buy on Christmas morning?",
    "Who was Belle?",
    "What chain does Marley wear?",
]


def build_sample_index(root: Path) -> None:
    print(f"indexing {SAMPLE.name} into {root / 'carol'} ...", flush=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "graphwright.cli", "index", str(SAMPLE), "--index", str(root / "carol"),
                    "--executor", "local", "--json"], check=True, stdout=subprocess.DEVNULL)
    print(f"indexed in {time.perf_counter() - started:.1f} s", flush=True)



async def wait_healthy(session: aiohttp.ClientSession, base: str, server: subprocess.Popen, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with status {server.returncode} before answering /health")
        try:
            async with session.get(f"{base}/health") as r:
                if r.status == 200:
                    return await r.json()
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.25)
    raise SystemExit(f"no answer from {base}/health within {timeout_s:.0f} s")


async def timed_post(session, url: str, body: dict, headers: dict) -> tuple[int, float]:
    started = time.perf_counter()
    async with session.post(url, json=body, headers=headers) as r:
        await r.read()
        return r.status, time.perf_counter() - started


async def fire(session, url: str, bodies: list[dict], headers: dict, concurrency: int) -> tuple[list[tuple[int, float]], float]:
    gate = asyncio.Semaphore(concurrency)

    async def one(body):
        async with gate:
            return await timed_post(session, url, body, headers)

    started = time.perf_counter()
    results = await asyncio.gather(*(one(b) for b in bodies))
    return results, time.perf_counter() - started


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.array(seconds) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max()), "mean_ms": float(ms.mean())}


async def load_test(args, base: str, index: str, key: str, server: subprocess.Popen, started: float) -> dict:
    auth = {"Authorization": f"Bearer {key}"}
    load_before = os.getloadavg()[0]  # the machine may be shared: the figures depend on it
    timeout = aiohttp.ClientTimeout(total=args.request_timeout)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=args.concurrency)) as session:
        health = await wait_healthy(session, base, server, args.startup_timeout)
        ready_s = time.perf_counter() - started
        url = f"{base}/v1/indexes/{index}/query"
        modes = args.modes.split(",")
        warmup = {}
        for mode in modes:  # the first query of a version loads its vector indexes (and the model)
            status, seconds = await timed_post(session, url, {"question": QUESTIONS[0], "mode": mode}, auth)
            warmup[mode] = {"status": status, "ms": round(seconds * 1000, 1)}
        mix = itertools.cycle(itertools.product(QUESTIONS, modes))
        bodies = [{"question": q, "mode": m} for q, m in itertools.islice(mix, args.requests)]
        results, wall = await fire(session, url, bodies, auth, args.concurrency)
        statuses = Counter(s for s, _ in results)
        ok = [t for s, t in results if s == 200]
        per_mode = {m: percentiles([t for (s, t), b in zip(results, bodies) if s == 200 and b["mode"] == m]) for m in modes
                    if any(s == 200 and b["mode"] == m for (s, _), b in zip(results, bodies))}

        no_key, _ = await fire(session, url, bodies[:args.unauthenticated], {}, args.concurrency)
        wrong_key, _ = await fire(session, url, bodies[:args.unauthenticated], {"Authorization": f"Bearer {key}x"}, args.concurrency)
        traversal = {}
        for name in ("%2e%2e", "..%2f..%2fetc", "%2fetc", ".hidden", "no-such-index"):
            # encoded=True: sent as written, not normalized by the client
            async with session.get(URL(f"{base}/v1/indexes/{name}/versions", encoded=True), headers=auth) as r:
                traversal[name] = r.status
    return {
        "index": index, "health": health, "requests": args.requests, "concurrency": args.concurrency, "workers": args.workers,
        "modes": modes, "ready_s": ready_s, "warmup": warmup, "statuses": dict(statuses), "wall_s": wall, "throughput_rps": len(results) / wall,
        "latency": percentiles(ok) if ok else None, "latency_by_mode": per_mode,
        "without_key": {"sent": len(no_key), "401": sum(s == 401 for s, _ in no_key)},
        "wrong_key": {"sent": len(wrong_key), "401": sum(s == 401 for s, _ in wrong_key)},
        "traversal_statuses": traversal, "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
        "cpus": os.cpu_count(),
    }


def report(r: dict) -> None:
    print(f"index {r['index']} ({r['health']['indexes']} under the root); {r['requests']} queries, "
          f"{r['concurrency']} in flight, server --workers {r['workers']}, modes {','.join(r['modes'])}")
    print(f"server answered /health {r['ready_s']:.1f} s after it was started")
    print("warm-up (first query per mode): " + ", ".join(f"{m} {w['ms']:.0f} ms ({w['status']})" for m, w in r["warmup"].items()))
    print(f"statuses {r['statuses']}; wall {r['wall_s']:.2f} s; throughput {r['throughput_rps']:.1f} req/s")
    rows = ([("all", r["latency"])] if r["latency"] else []) + list(r["latency_by_mode"].items())
    print(f"{'latency':<8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mean ms':>8}")
    for name, p in rows:
        print(f"{name:<8} {p['p50_ms']:>8.1f} {p['p90_ms']:>8.1f} {p['p99_ms']:>8.1f} {p['max_ms']:>8.1f} {p['mean_ms']:>8.1f}")
    print(f"without a key: {r['without_key']['401']}/{r['without_key']['sent']} refused with 401; "
          f"wrong key: {r['wrong_key']['401']}/{r['wrong_key']['sent']} refused with 401")
    load = r["load_average_1m"]
    print(f"machine: {r['cpus']} CPUs, 1-minute load average {load['before']:.1f} before, {load['after']:.1f} after")
    print("traversal names -> status: " + ", ".join(f"{n} {s}" for n, s in r["traversal_statuses"].items()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--index-root", type=Path, help="Serve this root (default: index the sample into a temporary one).")
    parser.add_argument("--index", help="Index name under the root (default: the first one listed).")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8, help="Requests in flight at once.")
    parser.add_argument("--workers", type=int, default=4, help="The server's --workers (queries answered at once).")
    parser.add_argument("--modes", default="local,naive")
    parser.add_argument("--unauthenticated", type=int, default=50, help="Requests sent without a key (and again with a wrong one).")
    parser.add_argument("--startup-timeout", type=float, default=180)
    parser.add_argument("--request-timeout", type=float, default=120)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    root = args.index_root
    if root is None:
        root = Path(tempfile.mkdtemp(prefix="gw-api-")) / "root"
        build_sample_index(root)
    index = args.index or min(p.name for p in root.iterdir() if (p / "tables").is_dir())
    key, port = secrets.token_urlsafe(24), free_port()
    env = {**os.environ, "GRAPHWRIGHT_API_KEYS": key}
    with tempfile.TemporaryFile(mode="w+") as log:  # the server's own log; shown if it fails
        started = time.perf_counter()
        server = subprocess.Popen([sys.executable, "-m", "graphwright.cli", "serve", "--index-root", str(root), "--host", "127.0.0.1",
                                   "--port", str(port), "--workers", str(args.workers)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
        try:
            result = asyncio.run(load_test(args, f"http://127.0.0.1:{port}", index, key, server, started))
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            log.seek(0)
            errors = log.read()
            if server.returncode not in (0, -15) or "Traceback" in errors:
                print(errors[-3000:], file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    else:
        report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
