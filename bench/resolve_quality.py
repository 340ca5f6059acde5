"""Precision and recall of entity merges on the labeled set bench/data/resolve_labels.jsonl
(how it was made: bench/make_resolve_labels.py), for exact names (Microsoft GraphRAG / LightRAG
style), normalized names (graphwright before linking) and linking (the default).

    PYTHONPATH=src python bench/resolve_quality.py [--embeddings] [--set key=value ...]

Mentions come from the default nlp extractor over ../shared/data/{hotpotqa-dev,novel-dev} with
the labeled misspellings injected. A labeled pair counts as merged when both surface forms end
up in one entity; `absent` counts labeled pairs whose surface forms the extractor did not
produce (a misspelling of a name that occurs once is never injected). Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from resolve_data import extract_corpus, load_corpus

from graphwright.config import EmbedConfig, ResolveConfig
from graphwright.stages.resolve.core import resolve

DATA = Path(__file__).parent / "data"


def entity_of(method: str, mentions, assertions, config: ResolveConfig, embed=None) -> dict[str, str]:
    if method == "exact":
        return {n: n for n in mentions.column("name").to_pylist()}
    _, aliases, _ = resolve(mentions, assertions, config, embed=embed)
    return dict(zip(aliases.column("alias").to_pylist(), aliases.column("entity_id").to_pylist()))


def score(labels: list[dict], entity: dict[str, str]) -> dict:
    tp = fp = fn = tn = missing = 0
    for r in labels:
        if r["a"] not in entity or r["b"] not in entity:
            missing += 1
            continue
        merged = entity[r["a"]] == entity[r["b"]]
        tp += merged and r["same"]
        fp += merged and not r["same"]
        fn += (not merged) and r["same"]
        tn += (not merged) and not r["same"]
    p = tp / (tp + fp) if tp + fp else float("nan")
    rc = tp / (tp + fn) if tp + fn else float("nan")
    f1 = 2 * p * rc / (p + rc) if tp else 0.0
    return {"tp": tp, "fp": fp, "fn": fn, "tn": tn, "missing": missing, "precision": p, "recall": rc, "f1": f1}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--embeddings", action="store_true", help="also run linking with MiniLM name+description embeddings")
    parser.add_argument("--set", action="append", default=[], help="ResolveConfig override, e.g. accept_threshold=0.75")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    labels = [json.loads(line) for line in (DATA / "resolve_labels.jsonl").open()]
    perturb = json.loads((DATA / "resolve_perturbations.json").read_text())
    overrides = {k: json.loads(v) if v[:1] in "0123456789tf[" else v for k, v in (s.split("=", 1) for s in args.set)}
    methods = {"exact": None, "normalized_name": ResolveConfig(method="normalized_name"),
               "linked": ResolveConfig(**overrides)}
    embed = None
    if args.embeddings:
        from graphwright.engines.embed import make_embedder

        embed = make_embedder(EmbedConfig()).encode
        methods["linked+embeddings"] = ResolveConfig(**{**overrides, "embeddings": True})
    results = []
    for corpus in ("hotpotqa-dev", "novel-dev"):
        docs = load_corpus(corpus)
        if not docs:
            print(f"skipped {corpus}: not found under ../shared/data")
            continue
        mentions, assertions = extract_corpus(docs, perturb.get(corpus))
        subset = [r for r in labels if r["corpus"] == corpus]
        for method, cfg in methods.items():
            t = time.perf_counter()
            entity = entity_of("exact" if cfg is None else method, mentions, assertions, cfg, embed)
            seconds = time.perf_counter() - t
            for source in ("all", "hand", "title", "perturbation"):
                rows = subset if source == "all" else [r for r in subset if r["source"] == source]
                if rows:
                    results.append({"corpus": corpus, "method": method, "labels": source, "pairs": len(rows),
                                    "seconds": round(seconds, 2), **score(rows, entity)})
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"{'corpus':<13} {'method':<18} {'labels':<12} {'pairs':>5} {'tp':>4} {'fp':>4} {'fn':>4} {'precision':>9} {'recall':>7} {'f1':>6} {'absent':>6} {'s':>6}")
    for r in results:
        print(f"{r['corpus']:<13} {r['method']:<18} {r['labels']:<12} {r['pairs']:>5} {r['tp']:>4} {r['fp']:>4} {r['fn']:>4} "
              f"{r['precision']:>9.3f} {r['recall']:>7.3f} {r['f1']:>6.3f} {r['missing']:>6} {r['seconds']:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
