"""The pipeline's own cost as the corpus grows: per-stage wall and CPU seconds, throughput and
peak memory at several corpus sizes, and the growth exponent of the total time.

    python bench/pipeline_scale.py --chunks 1000,10000,100000 [--out /tmp/scale] [--executor local|ray] [--update 0.01]

Extraction uses the zero-LLM `nlp` engine and embeddings the `hashing` engine, so what is
measured is graphwright itself, not a model. Each size runs in a fresh process (its peak RSS is
the peak memory; with --executor ray the Ray workers' memory is not included). The corpus is
generated: documents of ~10 chunks whose sentences mention people, organisations and places
drawn from Zipf-distributed populations, as names recur in real text.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _fresh_process import MeasurementFailed, measure

FIRST = ("Ada Alan Amara Anton Beatrix Bruno Carmen Cyrus Dara Dmitri Elena Emil Farah Felix Greta Hugo Ines Ivan Jonas Julia "
         "Kenji Kira Lars Leila Mateo Mira Nadia Nils Olga Omar Petra Quentin Rosa Ravi Sana Stefan Tariq Tess Ulla Viktor "
         "Wanda Xavier Yara Yusuf Zofia Zane Aiko Boris Celia Diego").split()
LAST = ("Okafor Lindqvist Moreau Tanaka Novak Castillo Haddad Fischer Ivanova Mensah Kowalski Rossi Sato Abara Brandt "
        "Costa Dumont Eriksen Ferreira Gallo Horvat Iqbal Jansen Kaur Laine Madsen Nakamura Oyelaran Petrov Quist Ramos "
        "Schmidt Takahashi Ueda Varga Weber Xu Yilmaz Zielinski Achebe Bianchi Cohen Dubois Engel Fontaine Grieg Hale").split()
ORG_WORDS = "Northwind Blue Harbor Granite Meridian Aurora Copper Summit Cedar Atlas Beacon Silver Orchid Falcon Tidal".split()
ORG_KINDS = "Holdings Institute Foundation Labs Partners Council Works Trust Society Company".split()
PLACES = ("Port Elling Amberfield Kestrel Island Greywater Valley Northmoor Saltmarsh Highcliff Dunmore Riverside "
          "Eastbrook Westhaven Stonebridge Millford Oakridge Fairport Ashdown Redfern Lowmoor").split()
FILLER = ("the committee reviewed the annual figures before the meeting ended and several members asked for more time to "
          "study the proposal while others wanted a decision that week because the season was short and the roads "
          "were poor after the storms").split()


def _zipf_index(rng: random.Random, n: int, s: float = 1.1) -> int:
    """An index in [0, n) with P(i) ~ 1/(i+1)^s, by inverse transform on the continuous bound."""
    u = rng.random()
    return min(n - 1, int(((n ** (1 - s) - 1) * u + 1) ** (1 / (1 - s))) - 1)


class CorpusGenerator:
    def __init__(self, seed: int = 7, people: int = 50_000, orgs: int = 5_000):
        self.rng = random.Random(seed)
        self.people = [f"{FIRST[i % len(FIRST)]} {LAST[(i // len(FIRST)) % len(LAST)]}"
                       + (f" {LAST[(i // (len(FIRST) * len(LAST))) % len(LAST)]}" if i >= len(FIRST) * len(LAST) else "")
                       for i in range(people)]
        self.orgs = [f"{ORG_WORDS[i % len(ORG_WORDS)]} {ORG_WORDS[(i // len(ORG_WORDS)) % len(ORG_WORDS)]} {ORG_KINDS[(i // len(ORG_WORDS) ** 2) % len(ORG_KINDS)]}"
                     for i in range(orgs)]

    def sentence(self) -> str:
        r = self.rng
        person = lambda: self.people[_zipf_index(r, len(self.people))]  # noqa: E731
        org = lambda: self.orgs[_zipf_index(r, len(self.orgs))]  # noqa: E731
        place = PLACES[_zipf_index(r, len(PLACES))]
        filler = " ".join(r.sample(FILLER, 8))
        return r.choice((
            f"{person()} met {person()} in {place} to discuss {filler}.",
            f"{person()}, who leads {org()}, said that {filler}.",
            f"In {place}, {org()} hired {person()} after {filler}.",
            f"The report by {person()} and {person()} for {org()} noted that {filler}.",
            f"Later {filler}.",
        ))

    def document(self, n: int, words: int) -> dict:
        parts, count = [], 0
        while count < words:
            s = self.sentence()
            parts.append(s)
            count += len(s.split())
        return {"id": f"doc-{n:07d}", "title": f"Document {n}", "text": " ".join(parts)}


def generate(folder: Path, documents: int, words_per_doc: int, per_file: int = 10_000) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    gen = CorpusGenerator()
    for start in range(0, documents, per_file):
        with open(folder / f"part-{start // per_file:05d}.jsonl", "w") as f:
            for n in range(start, min(documents, start + per_file)):
                f.write(json.dumps(gen.document(n, words_per_doc)) + "\n")


@contextmanager
def edited_corpus(folder: Path, share: float) -> Iterator[dict]:
    """The corpus with `share` of its documents changed (a sentence appended), share/2 deleted and
    share/2 new ones added, all in its first file; restored on exit. The original waits beside
    it under a hidden name, which ingest skips (and `_restore` puts back, should this run die)."""
    files = sorted(folder.glob("part-*.jsonl"))
    first, lines = files[0], files[0].read_text().splitlines()
    total = len(lines) + sum(1 for f in files[1:] for _ in f.open())
    changed, deleted = max(1, round(total * share)), max(1, round(total * share / 2))
    if changed + deleted > len(lines):
        raise SystemExit(f"--update {share} needs {changed + deleted} documents in {first.name}, which holds {len(lines)}")
    records = [json.loads(line) for line in lines]
    for r in records[:changed]:
        r["text"] += " A later edition added this sentence to the record."
    gen = CorpusGenerator(seed=11)
    added = [gen.document(n, len(records[0]["text"].split())) | {"id": f"new-{n:07d}"} for n in range(deleted)]
    kept = first.with_name(f".{first.name}.orig")
    first.rename(kept)
    try:
        first.write_text("".join(json.dumps(r) + "\n" for r in records[:len(records) - deleted] + added))
        yield {"documents": total, "changed": changed, "deleted": deleted, "new": len(added)}
    finally:
        kept.replace(first)


def _restore(folder: Path) -> None:
    for kept in folder.glob(".part-*.jsonl.orig"):  # left by a run that died while updating
        kept.replace(folder / kept.name[1:-len(".orig")])


def run_one(corpus: Path, index: Path, executor: str) -> dict:
    """Index `corpus` in this process; returns the per-stage metrics and the peak RSS."""
    from graphwright.config import load_config
    from graphwright.pipeline.runner import run_index
    from graphwright.storage.delta import IndexStore

    config = load_config(None, {"embed": {"engine": "hashing"}, "execution": {"executor": executor, "commit_every": 4096}})
    started = time.perf_counter()
    summary = run_index([str(corpus)], index, config, show_progress=False, log=lambda m: None)
    wall = time.perf_counter() - started
    rows = IndexStore(index).read("stage_metrics", where=f"run_id = '{summary['run_id']}'").to_pylist()
    return {"chunks": summary["chunks"], "entities": summary["entities"], "relationships": summary["relationships"],
            "communities": summary["communities"], "wall_s": wall,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "stages": {r["stage"]: {k: r[k] for k in ("wall_s", "cpu_s", "worker_cpu_s", "work_done", "work_unit", "rows_out")}
                       | {"peak_mb": json.loads(r["details"]).get("driver_peak_rss_mb"), "parts": _parts(json.loads(r["details"]))}
                       for r in rows}}


def _parts(details: dict) -> dict:
    """The seconds a stage's details break out (embed: lexical_s, synonyms_s, passage_graph_s)."""
    return {k: v for k, v in details.items() if k.endswith("_s") and isinstance(v, (int, float))}


def _measure(a, corpus: Path, index: Path, what: str) -> dict:
    try:
        return measure(__file__, "--executor", a.executor, "--one", str(corpus), str(index))
    except MeasurementFailed as exc:
        print(exc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"the run for {what} failed") from exc


def _line(r: dict) -> str:
    stages = "  ".join(f"{name} {s['wall_s']:.1f}s" + (f" ({s['work_done'] / s['wall_s']:.0f} {s['work_unit']}/s)" if s["work_done"] and s["wall_s"] > 0.05 and name in ("chunk", "extract", "embed") else "")
                       + (f" [{s['peak_mb']} MB]" if s.get("peak_mb") else "")
                       for name, s in r["stages"].items())
    return (f"{r['chunks']:>8} chunks {r['entities']:>8} entities {r['relationships']:>9} relationships | "
            f"total {r['wall_s']:7.1f} s  {r['chunks'] / r['wall_s']:6.0f} chunks/s  peak {r['peak_rss_mb']:7.0f} MB | {stages}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", default="1000,10000")
    p.add_argument("--out", type=Path, default=Path("/tmp/graphwright-scale"))
    p.add_argument("--executor", default="local", choices=("local", "ray"))
    p.add_argument("--words-per-doc", type=int, default=1800)  # ~10 chunks of 254 tokens
    p.add_argument("--update", type=float, metavar="SHARE",
                   help="after each full build, an incremental run with this share of the documents changed "
                        "(and half as many deleted and added), against the full build")
    p.add_argument("--reuse-index", action="store_true",
                   help="with --update: an index already built at a size is not rebuilt (its full build is not printed)")
    p.add_argument("--plot", type=Path, metavar="FILE",
                   help="draw per-stage seconds per 1000 chunks and peak memory against corpus size (PNG or SVG)")
    p.add_argument("--replot", action="store_true",
                   help="with --plot: draw the figures OUT/results.json holds from an earlier invocation, measuring nothing")
    p.add_argument("--one", nargs=2, metavar=("CORPUS", "INDEX"), help=argparse.SUPPRESS)  # child process
    a = p.parse_args()
    if a.one:
        print(json.dumps(run_one(Path(a.one[0]), Path(a.one[1]), a.executor)))
        return
    saved = a.out / "results.json"
    if a.replot:
        plot(json.loads(saved.read_text()), a.plot)
        return
    # figures by corpus size, merged with what earlier invocations saved (--reuse-index measures
    # only an update, and the build it updates stays in the file)
    figures = json.loads(saved.read_text()) if saved.exists() else {"builds": {}, "updates": {}}
    results = []
    for target in (int(x) for x in a.chunks.split(",")):
        corpus, index = a.out / f"corpus-{target}", a.out / f"index-{target}"
        documents = max(1, target // 10)
        if not corpus.exists():
            t = time.perf_counter()
            generate(corpus, documents, a.words_per_doc)
            print(f"generated {documents} documents for ~{target} chunks in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        _restore(corpus)
        built = None
        if not (a.reuse_index and a.update and index.exists()):
            subprocess.run(["rm", "-rf", str(index)], check=True)
            built = _measure(a, corpus, index, f"{target} chunks")
            results.append(built)
            figures["builds"][str(target)] = built
            print(_line(built), flush=True)
        if a.update:
            with edited_corpus(corpus, a.update) as edit:
                r = _measure(a, corpus, index, f"the update of {target} chunks")
            full = built or figures["builds"].get(str(target))  # with --reuse-index: the build saved earlier
            print(f"  update: {edit['changed']} changed, {edit['deleted']} deleted, {edit['new']} new of {edit['documents']} documents"
                  + (f" -> {r['wall_s'] / full['wall_s']:.1%} of the full build's time" if full else ""), flush=True)
            print("  " + _line(r), flush=True)
            figures["updates"][str(target)] = r | {"edit": edit}
        a.out.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(figures))
    if len(results) >= 2:
        a0, a1 = results[1 if len(results) > 2 else 0], results[-1]
        exponent = math.log(a1["wall_s"] / a0["wall_s"]) / math.log(a1["chunks"] / a0["chunks"])
        print(f"growth exponent of total time from {a0['chunks']} to {a1['chunks']} chunks: {exponent:.2f} (1 = linear)")
    if a.plot:
        plot(figures, a.plot)


def plot(saved: dict, path: Path) -> None:
    """Seconds per 1000 chunks by stage (flat lines are linear growth) and the peak memory, against
    corpus size; updates are drawn beside the builds. `saved`: results.json's figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    builds = sorted(saved["builds"].values(), key=lambda r: r["chunks"])
    chunks = [r["chunks"] for r in builds]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for stage in builds[-1]["stages"]:
        per = [1000 * r["stages"].get(stage, {}).get("wall_s", 0) / r["chunks"] for r in builds]
        if max(per) > 0.05:
            left.plot(chunks, per, marker="o", label=stage)
    left.plot(chunks, [1000 * r["wall_s"] / r["chunks"] for r in builds], marker="o", color="black", label="total")
    updates = sorted(saved["updates"].values(), key=lambda r: r["chunks"])
    if updates:
        left.plot([r["chunks"] for r in updates], [1000 * r["wall_s"] / r["chunks"] for r in updates], marker="s",
                  color="black", linestyle="--", label="total of an update")
    left.set(xscale="log", xlabel="chunks", ylabel="seconds per 1000 chunks indexed", title="Time per chunk")
    left.legend(fontsize=8)
    right.plot(chunks, [r["peak_rss_mb"] / 1024 for r in builds], marker="o", label="full build")
    if updates:
        right.plot([r["chunks"] for r in updates], [r["peak_rss_mb"] / 1024 for r in updates], marker="s", label="update")
    right.axhline(8e9 / 2**30, color="grey", linestyle="--", label="8 GB")
    right.set(xscale="log", xlabel="chunks", ylabel="peak RSS, GiB", title="Peak memory")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
