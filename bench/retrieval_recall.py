"""Evidence recall of the query modes on every development set, in one invocation, with
bootstrap intervals: so that a setting that wins on one set and loses on another shows it.

    python bench/retrieval_recall.py [--data ../shared/data] [--indexes DIR] [--modes naive,fusion,local,graph]
        [--ablation] [--baseline-src DIR] [--set KEY=VALUE ...] [--sets hotpotqa,distractors,novel] [--json FILE]

Sets (each indexed once, with the default configuration: `nlp` extractor, bundled
all-MiniLM-L6-v2, in-process executor; kept under --indexes and reused):
- hotpotqa: hotpotqa-dev's 50 questions over its 500 paragraphs;
- distractors: the same questions over those paragraphs plus wiki-scale's 6,119 2WikiMultihopQA
  paragraphs (one title both hold is taken from hotpotqa-dev);
- novel: novel-dev's 217 questions over its two books; every question has one gold book of two,
  so recall says little and answer-in-evidence@10 (the gold answer's text in the top 10, for the
  69 questions with a short answer) is the figure.

Per set and mode: recall@5, recall@10 (mean share of a question's gold documents in the top k),
all-gold@10 (share of questions with every gold document there), answer-in-evidence@10 and
answer_words@10 (the share of a short answer's content words in the top 10's text), each
with a bootstrap 95% interval over questions, and each mode's paired difference from `naive`
with its interval. --ablation adds the graph mode with one component removed at a time.
--baseline-src runs the modes of another checkout's code (e.g. the commit before this work,
`git archive`d) on the same indexes, as "before" rows. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SETS = ("hotpotqa", "distractors", "novel")
METRICS = ("recall@5", "recall@10", "all_gold@10", "answer@10", "answer_words@10")
# the graph mode with one component removed (query settings), what each adds
ABLATION = {
    "graph -facts": {"graph_facts": 0},
    "graph -links": {"graph_links": False},
    "graph -name matches": {"graph_name_matches": 0},
    "graph -synonyms": {"graph_synonym_weight": 0.0},
    "graph -relationship edges": {"graph_relationship_weight": 0.0},
    "graph -passage seeds": {"graph_passage_weight": 0.0},
    "graph -rank fusion (PPR only)": {"graph_fusion_weight": 0.0},
    "graph -bm25 (dense seeds)": {"fusion_lexical_weight": 0.0},
    "graph +steiner": {"graph_steiner": True},
    "fusion -bm25 (= naive)": {"fusion_lexical_weight": 0.0},
    "fusion -dense (bm25 only)": {"fusion_dense_weight": 0.0},
}


def corpus(data: Path, name: str, work: Path) -> Path:
    if name == "hotpotqa":
        return data / "hotpotqa-dev" / "corpus.jsonl"
    if name == "novel":
        return data / "novel-dev" / "corpus.jsonl"
    mixed = work / "distractors-corpus" / "corpus.jsonl"
    if not mixed.exists():
        mixed.parent.mkdir(parents=True, exist_ok=True)
        rows = (data / "hotpotqa-dev" / "corpus.jsonl").read_text().splitlines()
        taken = {json.loads(r)["id"] for r in rows}
        rows += [r for r in (data / "wiki-scale" / "corpus.jsonl").read_text().splitlines() if r.strip() and json.loads(r)["id"] not in taken]
        mixed.write_text("\n".join(rows) + "\n")
    return mixed


def questions_of(data: Path, name: str) -> Path:
    return data / ("novel-dev" if name == "novel" else "hotpotqa-dev") / "questions.jsonl"


def ensure_index(data: Path, name: str, work: Path) -> Path:
    index = work / name
    if (index / "tables" / "index_manifest").exists():
        return index
    config = work / "recall-config.yaml"
    config.write_text("execution:\n  executor: local\n")
    started = time.perf_counter()
    print(f"indexing {name} into {index} ...", file=sys.stderr, flush=True)
    subprocess.run([str(Path(sys.executable).parent / "graphwright"), "index", str(corpus(data, name, work)), "--index", str(index),
                    "--config", str(config)], check=True, stdout=subprocess.DEVNULL)
    print(f"indexed {name} in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return index


def answers_in_corpus(corpus_file: Path, questions: Path) -> tuple[int, int]:
    """(questions whose short answer occurs verbatim in some document, questions with a short answer)."""
    from graphwright.query.evaluate import _normal, load_questions, short_answer

    text = "\n".join(_normal(json.loads(line)["text"]) for line in corpus_file.read_text().splitlines() if line.strip())
    short = [q for q in load_questions(questions) if short_answer(q)]
    return sum(1 for q in short if _normal(q["answer"]) in text), len(short)


def run_modes(index: Path, questions: Path, modes: dict[str, tuple[str, dict]], k: int = 10) -> dict[str, list[dict]]:
    """Per variant (label -> (mode, query settings)), per question: gold ids, evidence doc ids and texts."""
    from graphwright.ids import doc_id
    from graphwright.query.evaluate import answer_in_evidence, answer_word_recall, load_questions
    from graphwright.query.searcher import Searcher

    rows = load_questions(questions)
    searcher = Searcher(str(index))
    base = searcher.config
    out = {}
    for label, (mode, settings) in modes.items():
        searcher.config = base.model_copy(update={"query": base.query.model_validate({**base.query.model_dump(), **settings})})
        per = []
        started = time.perf_counter()
        for q in rows:
            evidence = searcher.search(q["question"], mode, k, use_llm=False)["evidence"][:k]
            gold = {doc_id(g) for g in q["gold_doc_ids"]}
            per.append({"gold": sorted(gold), "docs": [e["doc_id"] for e in evidence],
                        "answer5": answer_in_evidence(q, evidence[:5]), "answer10": answer_in_evidence(q, evidence),
                        "words10": answer_word_recall(q, evidence)})
        out[label] = {"per_question": per, "seconds_per_query": (time.perf_counter() - started) / max(len(rows), 1)}
    return out


def scores(per: list[dict]) -> dict[str, np.ndarray]:
    """Per question, each metric (NaN where it does not apply)."""
    def recall(p, k):
        return len(set(p["gold"]) & set(p["docs"][:k])) / len(p["gold"])
    answer = np.array([np.nan if p["answer10"] is None else float(p["answer10"]) for p in per])
    words = np.array([np.nan if p.get("words10") is None else p["words10"] for p in per])
    return {"answer_words@10": words, "recall@5": np.array([recall(p, 5) for p in per]), "recall@10": np.array([recall(p, 10) for p in per]),
            "all_gold@10": np.array([float(recall(p, 10) == 1.0) for p in per]), "answer@10": answer}


def bootstrap(values: np.ndarray, rng: np.random.Generator, samples: int) -> tuple[float, float, float]:
    values = values[~np.isnan(values)]
    if not len(values):
        return (np.nan, np.nan, np.nan)
    means = values[rng.integers(0, len(values), (samples, len(values)))].mean(axis=1)
    return float(values.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def baseline(src: Path, index: Path, questions: Path, modes: list[str]) -> dict:
    """The modes of another checkout's code on the same index, in a subprocess."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, str(HERE / "_recall_baseline.py"), str(index), str(questions), ",".join(modes)],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"the baseline run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    p.add_argument("--indexes", type=Path, default=Path("/tmp/graphwright-recall"))
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--modes", default="naive,fusion,local,graph")
    p.add_argument("--ablation", action="store_true")
    p.add_argument("--baseline-src", type=Path, help="a checkout's src/ whose modes are measured as 'before' rows")
    p.add_argument("--baseline-modes", default="naive,local,graph")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a query setting for every mode, e.g. graph_facts=0")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL=MODE[:KEY=VALUE,...]",
                   help="one more row: a mode with its own query settings, e.g. 'wide=graph:graph_passage_weight=0.5'")
    p.add_argument("--bootstrap", type=int, default=2000)
    p.add_argument("--json", type=Path, help="also write every figure and per-question result here")
    a = p.parse_args()
    sets = a.sets.split(",")
    if not all(questions_of(a.data, s).exists() for s in sets) or ("distractors" in sets and not (a.data / "wiki-scale").exists()):
        print(f"skipped: the development data is not under {a.data} (it lives in ../shared/data)")
        return 0
    import yaml

    common = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in a.set)}
    variants = {m: (m, dict(common)) for m in a.modes.split(",")}
    for item in a.variant:
        label, _, spec = item.partition("=")
        mode, _, settings = spec.partition(":")
        variants[label] = (mode, {**common, **{k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in settings.split(",") if kv)}})
    if a.ablation:
        variants |= {label: ("fusion" if label.startswith("fusion") else "graph", {**common, **s}) for label, s in ABLATION.items()}
    a.indexes.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in sets:
        index = ensure_index(a.data, name, a.indexes)
        results[name] = {}
        if a.baseline_src:
            results[name] |= {f"before: {m}": r for m, r in baseline(a.baseline_src, index, questions_of(a.data, name), a.baseline_modes.split(",")).items()}
        results[name] |= run_modes(index, questions_of(a.data, name), variants)
        quoted, short = answers_in_corpus(corpus(a.data, name, a.indexes), questions_of(a.data, name))
        print(f"{name}: {quoted} of {short} short answers occur verbatim in the corpus (answer@10's ceiling)", file=sys.stderr)
    report(results, a.bootstrap, a.json)
    return 0


def report(results: dict, samples: int, json_path: Path | None) -> None:
    rng = np.random.default_rng(0)
    figures = {}
    for name, by_mode in results.items():
        n = len(next(iter(by_mode.values()))["per_question"])
        print(f"\n## {name} ({n} questions)  mean [95% bootstrap interval]; diff vs naive (paired)")
        print(f"{'mode':<28}" + "".join(f"{m:>24}" for m in METRICS) + f"{'s/query':>9}")
        base = scores(by_mode["naive"]["per_question"]) if "naive" in by_mode else None
        figures[name] = {}
        for mode, r in by_mode.items():
            s = scores(r["per_question"])
            cells, row = [], {}
            for metric in METRICS:
                mean, lo, hi = bootstrap(s[metric], rng, samples)
                row[metric] = {"mean": mean, "low": lo, "high": hi}
                cells.append("-" if np.isnan(mean) else f"{mean:.3f} [{lo:.2f},{hi:.2f}]")
            print(f"{mode:<28}" + "".join(f"{c:>24}" for c in cells) + f"{r['seconds_per_query']:>9.3f}")
            if base is not None and mode != "naive":
                diffs = []
                for metric in METRICS:
                    mean, lo, hi = bootstrap(s[metric] - base[metric], rng, samples)
                    row[f"{metric} vs naive"] = {"mean": mean, "low": lo, "high": hi}
                    diffs.append("-" if np.isnan(mean) else f"{mean:+.3f} [{lo:+.2f},{hi:+.2f}]")
                print(f"{'  vs naive':<28}" + "".join(f"{c:>24}" for c in diffs))
            figures[name][mode] = row | {"seconds_per_query": r["seconds_per_query"]}
    if json_path:
        json_path.write_text(json.dumps({"figures": figures, "results": results}, default=str))


if __name__ == "__main__":
    sys.exit(main())
