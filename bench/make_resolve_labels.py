"""Builds the labeled set bench/data/resolve_labels.jsonl (run once; the output is committed).

Pairs of surface forms, each labeled same / different entity:
- hand: a random sample (seed 7) of candidate pairs that permissive blocking proposes on the
  nlp extractor's mentions of hotpotqa-dev and novel-dev (shared token, or character 3-gram
  cosine >= 0.5), plus pairs of different surfaces with the same normalized name; labeled by
  hand by reading the two names and the sentence each was extracted from
  (bench/data/resolve_labels_hand.jsonl; ambiguous pairs were left out).
- title: hotpotqa-dev paragraphs titled with a two- or three-word person-like name whose last
  word occurs as a mention in that paragraph and in no other: (title, surname) is the same entity
  (each read by hand; four whose short form is not the subject were dropped).
- perturbation: controlled misspellings (two middle letters of the last word swapped) injected
  into every third occurrence of those titles and of hand-picked novel-dev character names
  (bench/data/resolve_perturbations.json); (name, misspelling) is the same entity.

    PYTHONPATH=src python bench/make_resolve_labels.py
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from resolve_data import extract_corpus, load_corpus

HERE = Path(__file__).parent / "data"
NOVEL_NAMES = ["Windibrook", "Masterton", "Starbottle", "Tarbox", "Bilson", "Curgenven", "Jallinger", "Dimwood",
               "Enriquez", "Calton", "Heckshill", "Secamp", "Boompointer", "Parmlee", "Neworth"]
# read by hand: the short form is not the title's subject in these paragraphs
NOT_THE_SUBJECT = {"Zeitgeist Films", "Chori Chori", "Jai Veeru", "Chesapeake Bay Retriever"}
PERSONLIKE = re.compile(r"^[A-Z][a-z]+(?: [A-Z][a-z]+){1,2}$")


def misspell(name: str) -> str:
    words = name.split(" ")
    w = words[-1]
    i = len(w) // 2
    words[-1] = w[:i - 1] + w[i] + w[i - 1] + w[i + 1:]
    return " ".join(words)


def title_pairs(docs: list[dict]) -> list[tuple[str, str]]:
    mentions, _ = extract_corpus(docs)
    docs_of = defaultdict(set)
    by_doc = defaultdict(set)
    for name, doc in zip(mentions["name"].to_pylist(), mentions["doc_id"].to_pylist()):
        docs_of[name].add(doc)
        by_doc[doc].add(name)
    from graphwright import ids

    pairs = []
    for d in docs:
        title, did = d["title"], ids.doc_id(d["id"])
        surname = title.split(" ")[-1]
        if title not in NOT_THE_SUBJECT and PERSONLIKE.match(title) and len(surname) >= 4 and title in by_doc[did] and surname in by_doc[did] \
                and docs_of[surname] == {did}:
            pairs.append((title, surname))
    return pairs


def main() -> int:
    hotpot, novel = load_corpus("hotpotqa-dev"), load_corpus("novel-dev")
    if not hotpot or not novel:
        print("skipped: ../shared/data/hotpotqa-dev or novel-dev not found")
        return 0
    titles = title_pairs(hotpot)
    perturb = {"hotpotqa-dev": {t: misspell(t) for t, _ in titles}, "novel-dev": {n: misspell(n) for n in NOVEL_NAMES}}
    rows = [json.loads(line) for line in (HERE / "resolve_labels_hand.jsonl").open()]
    rows += [{"corpus": "hotpotqa-dev", "a": t, "b": s, "same": True, "source": "title"} for t, s in titles]
    rows += [{"corpus": c, "a": o, "b": v, "same": True, "source": "perturbation"} for c, m in perturb.items() for o, v in m.items()]
    (HERE / "resolve_perturbations.json").write_text(json.dumps(perturb, indent=1, ensure_ascii=False) + "\n")
    with (HERE / "resolve_labels.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = defaultdict(lambda: [0, 0])
    for r in rows:
        counts[(r["corpus"], r["source"])][0 if r["same"] else 1] += 1
    for (c, s), (p, n) in sorted(counts.items()):
        print(f"{c:<13} {s:<13} same {p:>4}  different {n:>4}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
