"""The LLM path as the corpus grows: LLM extraction and LLM community reports through the
`openai` engine against bench/llm_stub.py (an OpenAI-compatible server that answers
graphwright's prompts at once), on Ray, hashing embedder, generated corpus. Per size: each
stage's seconds, extraction chunks/s, the driver's peak RSS, and the seconds the cache lookups
and the call commits took per 1000 chunks; then the growth exponent of the total time.

    python bench/llm_path_scale.py --chunks 10000,100000 [--baseline-src [LABEL=]/path/to/old/src ... --baseline-max 30000]

Each size runs in a fresh process (its peak RSS is the driver's). --baseline-src runs the same
sizes (up to --baseline-max chunks) with other checkouts' code in the same invocation, for a
side-by-side comparison on this shared machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from _ports import free_port, wait_listening

HERE = Path(__file__).resolve().parent



class MemorySampler(threading.Thread):
    """The largest private (RssAnon) and shared (RssShmem: Ray object-store pages this process
    touched) resident sizes of this process, read from /proc every second. ru_maxrss counts both."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = {"RssAnon": 0, "RssShmem": 0}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            try:
                status = Path("/proc/self/status").read_text().splitlines()
            except OSError:
                return
            for row in status:
                name, _, value = row.partition(":")
                if name in self.peak:
                    self.peak[name] = max(self.peak[name], int(value.split()[0]) // 1024)


def llm_settings(base_url: str, concurrency: int = 16) -> dict:
    """The extract and llm sections of this bench's configuration (the stub's model, whose name
    is part of the extractor key every mention carries)."""
    return {"extract": {"engine": "llm"},
            "llm": {"engine": "openai", "model": "stub", "base_url": base_url, "api_key_env": None,
                    "response_format": "json_object", "concurrency": concurrency, "timeout_s": 120}}


def run_one(corpus: Path, index: Path, base_url: str, reports: str, concurrency: int) -> dict:
    """Index `corpus` in this process (whatever checkout is on the path); per-stage figures."""
    try:
        from graphwright.pipeline.runner import run_index
        from graphwright.storage.delta import IndexStore
    except ImportError:  # a checkout from before the package layout
        from graphwright.store import IndexStore

        from graphwright.pipeline import run_index
    from graphwright.config import load_config

    config = load_config(None, {
        **llm_settings(base_url, concurrency),
        "report": {"mode": reports},
        "embed": {"engine": "hashing"},
        "execution": {"executor": "ray", "commit_every": 4096},
    })
    memory = MemorySampler()
    memory.start()
    cpu = _cpu_s()
    started = time.perf_counter()
    summary = run_index([str(corpus)], index, config, show_progress=False, log=lambda m: None)
    wall = time.perf_counter() - started
    cpu = [b - a for a, b in zip(cpu, _cpu_s())]
    memory.stopped.set()
    rows = IndexStore(index).read("stage_metrics", where=f"run_id = '{summary['run_id']}'").to_pylist()
    stages = {}
    for r in rows:
        details = json.loads(r["details"] or "{}")
        stages[r["stage"]] = {"wall_s": r["wall_s"], "work_done": r["work_done"], "llm_calls": r["llm_calls"],
                              "peak_mb": details.get("driver_peak_rss_mb"), "lookup_s": details.get("lookup_s"),
                              "calls_commit_s": details.get("calls_commit_s"), "waves": details.get("waves"),
                              "steps": stage_steps(details)}
    return {"chunks": summary["chunks"], "entities": summary["entities"], "relationships": summary["relationships"],
            "reports": summary["reports"], "llm_calls": summary["llm"]["calls"], "wall_s": wall, "cpu_s": sum(cpu), "sys_s": cpu[1],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_anon_mb": memory.peak["RssAnon"], "peak_shmem_mb": memory.peak["RssShmem"], "stages": stages}


def _cpu_s() -> tuple[float, float]:
    """(user, system) CPU seconds of this process and its ended children (the clustering's
    worker processes; Ray's workers and the LLM server are not children)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + children.ru_utime, own.ru_stime + children.ru_stime


def stage_steps(details: dict) -> dict[str, float]:
    """The seconds of a stage's steps from its stage_metrics details: the `seconds` a stage
    records (resolve's under `linking`), else its top-level `*_s` figures (embed's; one per kind
    where a figure is given per kind)."""
    steps = details.get("seconds") or (details.get("linking") or {}).get("seconds")
    if steps:
        return dict(steps)
    out = {}
    for k, v in details.items():
        if not k.endswith("_s") or k == "lookup_s":
            continue
        if isinstance(v, (int, float)):
            out[k] = v
        elif isinstance(v, dict):
            out.update({f"{k}.{part}": seconds for part, seconds in v.items()})
    return out


def measure(corpus: Path, index: Path, src: str | None, a) -> dict:
    port = free_port()
    stub = subprocess.Popen([sys.executable, str(HERE / "llm_stub.py"), str(port)], stdout=subprocess.PIPE, text=True)
    try:
        wait_listening(port)
        env = dict(os.environ)
        if src:
            env["PYTHONPATH"] = src
        subprocess.run(["rm", "-rf", str(index)], check=True)
        out = subprocess.run([sys.executable, __file__, "--one", str(corpus), str(index), f"http://127.0.0.1:{port}/v1",
                              "--reports", a.reports, "--concurrency", str(a.concurrency)],
                             capture_output=True, text=True, env=env, check=False)
        if out.returncode:
            print(out.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"the run on {corpus} failed")
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        stub.terminate()
        stub.wait(timeout=30)


def line(label: str, r: dict) -> str:
    ex = r["stages"]["extract"]
    per_k = 1000 / r["chunks"]
    lookup = sum(s.get("lookup_s") or 0 for s in r["stages"].values())
    commit = sum(s.get("calls_commit_s") or 0 for s in r["stages"].values())
    stages = "  ".join(f"{name} {s['wall_s']:.1f}" for name, s in r["stages"].items())
    return (f"{label:<9} {r['chunks']:>8} chunks {r['entities']:>7} entities {r['reports']:>6} reports {r['llm_calls']:>8} calls | "
            f"total {r['wall_s']:7.1f} s, extract {ex['work_done'] / ex['wall_s']:5.0f} chunks/s, peak {r['peak_rss_mb']:6.0f} MB "
            f"(private {r.get('peak_anon_mb', 0):.0f}, object store {r.get('peak_shmem_mb', 0):.0f}), "
            f"cache lookup {lookup * per_k:.3f} s and call commits {commit * per_k:.3f} s per 1000 chunks | {stages}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", default="10000,100000")
    p.add_argument("--out", type=Path, default=Path("/tmp/graphwright-llm-scale"))
    p.add_argument("--reports", default="llm", choices=("llm", "extractive"))
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--baseline-src", action="append", default=[],
                   help="[LABEL=]another checkout's src/ to run the same sizes with, side by side (repeatable)")
    p.add_argument("--baseline-max", type=int, default=30_000, help="the largest size the baseline runs")
    p.add_argument("--one", nargs=3, metavar=("CORPUS", "INDEX", "URL"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(run_one(Path(a.one[0]), Path(a.one[1]), a.one[2], a.reports, a.concurrency)))
        return
    sys.path.insert(0, str(HERE))
    from pipeline_scale import generate

    results = []
    for target in (int(x) for x in a.chunks.split(",")):
        corpus = a.out / f"corpus-{target}"
        if not corpus.exists():
            generate(corpus, max(1, target // 10), 1800)
        for n, spec in enumerate(a.baseline_src if target <= a.baseline_max else []):
            label, _, src = spec.rpartition("=")
            label = label or "baseline"
            print(line(label, measure(corpus, a.out / f"index-{target}-baseline{n}", src, a)), flush=True)
        r = measure(corpus, a.out / f"index-{target}", None, a)
        results.append(r)
        print(line("this", r), flush=True)
        (a.out / f"result-{target}.json").write_text(json.dumps(r))
    if len(results) >= 2:
        a0, a1 = results[0], results[-1]
        exponent = math.log(a1["wall_s"] / a0["wall_s"]) / math.log(a1["chunks"] / a0["chunks"])
        print(f"growth exponent of total time from {a0['chunks']} to {a1['chunks']} chunks: {exponent:.2f} (1 = linear)")


if __name__ == "__main__":
    main()
