"""What an update costs on the LLM path (bench/llm_path_scale.py's configuration: LLM extraction
and LLM reports through the `openai` engine against bench/llm_stub.py, on Ray, hashing embedder),
side by side for several checkouts from the same index state.

    python bench/llm_update_cost.py --index DIR/index-1000000 --corpus DIR/corpus-1000000 --work /tmp/luc \\
        --share 0.001 [--on-top 0.01] --src before=/old/checkout --src after=/new/checkout [--full-build-s 8966] [--profile DIR]
        [--both-orders] [--warmup] [--steps]

Each checkout runs in a fresh process on its own copy of --index (data files hard-linked: Delta
and the state put new files, never rewrite). The edit is pipeline_scale.edited_corpus's: `share`
of the documents changed, half as many deleted and as many added. With --on-top S the index is
taken to hold the edit of share S already (an earlier update), and the measured edit is `share`
more on top of it: documents past those S changed, deleted and added. --share 0 measures a no-op
rerun. An index that holds what bench/record_run_state.py leaves (the state a nightly run leaves for
the next) reads only the source files the edit changed and only the LLM calls appended since.
--steps prints, under each run and each mean, the seconds of the steps the stages record in
stage_metrics (resolve's linking, cluster's and report's laps, embed's indexes), where the
checkout records them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _ports import free_port, wait_listening
from llm_path_scale import llm_settings
from pipeline_scale import _restore, edited_corpus
from update_cost import copy_index


def edit_on_top(corpus: Path, documents: int, base_share: float, share: float) -> dict:
    """Inside an edited_corpus(base_share) edit: `share` more of the documents changed (those after
    the ones the base edit changed), half as many deleted and as many added, in the first file."""
    first = min(corpus.glob("part-*.jsonl"))
    records = [json.loads(line) for line in first.read_text().splitlines()]
    start, changed = max(1, round(documents * base_share)), max(1, round(documents * share))
    deleted = max(1, changed // 2)
    if start + changed + deleted > len(records):
        raise SystemExit(f"the first corpus file holds {len(records)} documents, too few for this edit")
    for r in records[start:start + changed]:
        r["text"] += " A second edition added another sentence."
    gone = set(range(start + changed, start + changed + deleted))
    model = records[min(5, len(records) - 1)]
    added = [dict(model, id=f"extra-{n:05d}", text=model["text"] + f" Extra record {n}.") for n in range(deleted)]
    first.write_text("".join(json.dumps(r) + "\n" for i, r in enumerate(records) if i not in gone)
                     + "".join(json.dumps(r) + "\n" for r in added))
    return {"changed": changed, "deleted": deleted, "new": len(added)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path("/tmp/graphwright-llm-update-cost"))
    p.add_argument("--share", type=float, default=0.001, help="0: a no-op rerun (the corpus unedited)")
    p.add_argument("--on-top", type=float, default=0.0, metavar="SHARE", help="the edit the index already holds")
    p.add_argument("--src", action="append", required=True, metavar="LABEL=CHECKOUT[:INDEX]",
                   help="a checkout to run (from its own copy of INDEX when given, e.g. one its own build left)")
    p.add_argument("--full-build-s", type=float)
    p.add_argument("--keep", action="store_true", help="keep each checkout's updated index (WORK/run-LABEL)")
    p.add_argument("--profile", type=Path, metavar="DIR", help="run each checkout under cProfile, writing DIR/LABEL.prof")
    p.add_argument("--check", action="store_true",
                   help="check each updated index (this checkout's code): entities, aliases and relationships against a "
                        "full resolve of the same state, top-level modularity against a fresh clustering (bench/update_cost.py)")
    p.add_argument("--both-orders", action="store_true",
                   help="run the checkouts in the order given, then reversed, and print each one's mean: the run that "
                        "comes second is favoured (a warmer page cache), by tens of seconds at 1.2M chunks")
    p.add_argument("--steps", action="store_true", help="print the seconds of each stage's steps (stage_metrics details)")
    p.add_argument("--warmup", action="store_true",
                   help="run the first checkout once before the measured runs, and count it nowhere: the first run "
                        "after the index is copied is the slowest whatever its code (53 s against 47.5 s for the same "
                        "code at 1.2M chunks, 0.1%%), which --both-orders alone puts on the first checkout's mean")
    a = p.parse_args()
    if a.profile:
        a.profile.mkdir(parents=True, exist_ok=True)
    _restore(a.corpus)
    a.work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    stub = subprocess.Popen([sys.executable, str(HERE / "llm_stub.py"), str(port)], stdout=subprocess.DEVNULL)
    wait_listening(port)
    results: dict = {}
    try:
        if a.share == 0 and not a.on_top:  # a no-op rerun: the corpus the index holds
            base = contextlib.nullcontext({"changed": 0, "deleted": 0, "new": 0})
        else:
            base = edited_corpus(a.corpus, a.on_top if a.on_top else a.share)
        with base as edit:
            if a.on_top:
                edit = edit_on_top(a.corpus, edit["documents"], a.on_top, a.share)
            results["edit"] = edit
            print(time.strftime("%T"), edit, flush=True)
            runs = [tuple(s.split("=", 1)) for s in a.src]
            if a.both_orders:
                runs += [(f"{label}#2", checkout) for label, checkout in reversed(runs)]
            if a.warmup:
                runs.insert(0, (f"{runs[0][0]}#warmup", runs[0][1]))
            for label, checkout in runs:
                checkout, _, index = checkout.partition(":")  # LABEL=CHECKOUT:INDEX: this run's own starting index
                target = a.work / f"run-{label}"
                copy_index(Path(index) if index else a.index, target)
                script = Path(checkout) / "bench" / "llm_path_scale.py"
                profile = ["-m", "cProfile", "-o", str(a.profile / f"{label}.prof")] if a.profile else []
                out = subprocess.run([sys.executable, *profile, str(script), "--one", str(a.corpus), str(target), f"http://127.0.0.1:{port}/v1"],
                                     capture_output=True, text=True, check=False, env=dict(os.environ, PYTHONPATH=str(Path(checkout) / "src")))
                if out.returncode:
                    raise SystemExit(f"the {label} run failed:\n{out.stderr[-3000:]}")
                r = results[label] = json.loads(out.stdout.strip().splitlines()[-1])
                if a.check and not label.endswith("#warmup"):
                    r["check"] = _check(target, a.index, a.work / "check", port)
                if not a.keep:
                    shutil.rmtree(target)
                share = f" ({r['wall_s'] / a.full_build_s:.2%} of the build)" if a.full_build_s else ""
                cpu = f", CPU {r['cpu_s']:.1f} s (system {r['sys_s']:.1f})" if "cpu_s" in r else ""
                print(f"  {label:<8} total {r['wall_s']:7.1f} s{share}{cpu}  peak {r['peak_rss_mb'] / 1024:5.2f} GiB | "
                      + " ".join(f"{k} {v['wall_s']:.1f}" for k, v in r["stages"].items()), flush=True)
                if "check" in r:
                    print(f"           reports written {r['stages'].get('report', {}).get('work_done')}; check {json.dumps(r['check'])}", flush=True)
                if a.steps:
                    _print_steps([r])
        if a.both_orders:
            print("mean of both orders:")
            for label, _ in (s.split("=", 1) for s in a.src):
                pair = (results[label], results[f"{label}#2"])
                wall = sum(r["wall_s"] for r in pair) / 2
                share = f" ({wall / a.full_build_s:.2%} of the build)" if a.full_build_s else ""
                cpu = f", CPU {sum(r['cpu_s'] for r in pair) / 2:.1f} s" if all("cpu_s" in r for r in pair) else ""
                print(f"  {label:<8} total {wall:7.1f} s{share}{cpu}  peak {max(r['peak_rss_mb'] for r in pair) / 1024:5.2f} GiB | "
                      + " ".join(f"{k} {sum(r['stages'][k]['wall_s'] for r in pair) / 2:.1f}" for k in pair[0]["stages"]), flush=True)
                if a.steps:
                    _print_steps(pair)
    finally:
        stub.terminate()
    (a.work / "results.json").write_text(json.dumps(results))


def _print_steps(runs: list[dict]) -> None:
    """One line per stage: each step's seconds, the mean over `runs` of those every run records."""
    for stage in runs[0]["stages"]:
        steps = [r["stages"].get(stage, {}).get("steps") or {} for r in runs]
        names = [k for k in steps[0] if all(k in s for s in steps[1:])]
        if names:
            print(f"           {stage}: " + " ".join(f"{k} {sum(s[k] for s in steps) / len(steps):.2f}" for k in names), flush=True)


def _check(index: Path, previous: Path, work: Path, port: int) -> dict:
    """bench/update_cost.py's check of an updated index, with the LLM path's extractor key."""
    overrides = llm_settings(f"http://127.0.0.1:{port}/v1")
    out = subprocess.run([sys.executable, str(HERE / "update_cost.py"), "--check", str(index), str(previous), str(work), json.dumps(overrides)],
                         capture_output=True, text=True, check=False, env=dict(os.environ, PYTHONPATH=str(HERE.parent / "src")))
    if out.returncode:
        raise SystemExit(f"the check of {index} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
