"""How many times the vllm engine's replicas start in one run: LLM extraction of several commits'
worth of chunks, then LLM community reports, with the vLLM engine replaced by a CPU stand-in on
the same code path, in this checkout and (with --old-src) in a checkout from before the LLM
session, side by side.

    python bench/engine_starts.py [--old-src /path/to/old/src] [--corpus sample] [--commit-every 64]

This checkout: the stand-in Ray Serve application (graphwright.engines.llm.standin) in place of
Ray Serve LLM's vLLM application. The old checkout: its Ray Data LLM processor as built, with the
vLLM engine stage's UDF replaced by bench/_fake_vllm.py. Each stand-in logs one line per
construction; the figure is that count, against the replicas configured.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPLICAS = 2


def child(old: bool, corpus: str, index: str, commit_every: int) -> dict:
    import ray

    from graphwright.config import load_config

    llm = {"engine": "vllm", "model": "", "replicas": REPLICAS, "tensor_parallel_size": 1, "batch_size": 16, "concurrency": 8}
    if old:
        import graphwright.llm.vllm_engine as engine

        from graphwright.pipeline import run_index

        model = tempfile.mkdtemp(prefix="tiny-model-")  # a config only: nothing is downloaded
        Path(model, "config.json").write_text(json.dumps({
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000,
            "max_position_embeddings": 2048}))
        llm["model"] = model
        built = engine.processor_config

        def processor_config(config):
            c = built(config)
            c.chat_template_stage = c.tokenize_stage = c.detokenize_stage = False  # the stand-in reads messages
            return c

        made = engine.VLLMEngine.__init__

        def init(self, config):
            made(self, config)
            from _fake_vllm import FakeVLLMEngineUDF

            self.processor.get_stage_by_name("vLLMEngineStage").fn = FakeVLLMEngineUDF

        engine.processor_config, engine.VLLMEngine.__init__ = processor_config, init
        ray.init(num_cpus=4, num_gpus=REPLICAS, include_dashboard=False, log_to_driver=False)  # logical GPUs for the plan
    else:
        from graphwright.pipeline.runner import run_index

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            llm.update(model="standin", serve_app="graphwright.engines.llm.standin:app", serve_port=s.getsockname()[1])
    config = load_config(None, {"extract": {"engine": "llm"}, "llm": llm, "report": {"mode": "llm"},
                                "embed": {"engine": "hashing"}, "execution": {"executor": "local", "commit_every": commit_every}})
    started = time.perf_counter()
    summary = run_index([corpus], index, config, show_progress=False, log=lambda m: None)
    return {"chunks": summary["chunks"], "reports": summary["reports"], "calls": summary["llm"]["calls"],
            "wall_s": round(time.perf_counter() - started, 1)}


def measure(src: str | None, old: bool, a) -> dict:
    log = Path(tempfile.mkdtemp(prefix="gw-starts-")) / "starts.log"
    env = dict(os.environ, GRAPHWRIGHT_STANDIN_LOG=str(log))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, str(HERE)) if p)
    index = Path(tempfile.mkdtemp(prefix="gw-starts-index-"))
    out = subprocess.run([sys.executable, __file__, "--child", "old" if old else "new", a.corpus, str(index), str(a.commit_every)],
                         capture_output=True, text=True, env=env, check=False)
    if out.returncode:
        print(out.stderr[-3000:], file=sys.stderr)
        raise SystemExit("the run failed")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["engine_starts"] = len(log.read_text().split()) if log.exists() else 0
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old-src", help="src/ of a checkout from before the LLM session")
    p.add_argument("--corpus", default=str(HERE.parent / "sample"))
    p.add_argument("--commit-every", type=int, default=64)
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0] == "old", a.child[1], a.child[2], int(a.child[3]))))
        return
    runs = [("this checkout", measure(None, False, a))]
    if a.old_src:
        runs.insert(0, ("old checkout", measure(a.old_src, True, a)))
    for label, r in runs:
        print(f"{label:<14} {r['chunks']} chunks (commit every {a.commit_every}), {r['reports']} reports, {r['calls']} LLM calls, "
              f"{r['wall_s']} s: {r['engine_starts']} engine replica starts for {REPLICAS} replicas")


if __name__ == "__main__":
    main()
