"""Seconds and peak memory to resolve N mentions (default 100k, 1M, 5M), each size in a fresh
process, from a generator of realistic name distributions:

- entities: people ('Alder Brenwick'), organisations ('Brenwick Society') and places
  ('Corvale River'), names built from syllables so that the name space grows with N (N / 10
  entities); popularity is Zipf-distributed (a = 1.3), so a few names are very frequent;
- documents of 20 chunks x 8 mentions draw a cast of 15 entities, so variants of one name
  co-occur the way they do in text;
- surface forms: people are written in full (60%), by surname (25%), with an honorific (8%),
  with an initial (5%) or misspelled (2%); organisations with 'The' (15%) or misspelled (5%);
- one co-occurrence assertion per neighbouring pair of mentions in a chunk.

    PYTHONPATH=src python bench/resolve_scale.py [--sizes 100000,1000000,5000000] [--method linked]

Prints, per size: distinct names, candidate pairs, entities, wall and CPU seconds in resolve()
(CPU time is the figure to compare on a shared machine), peak RSS of the process and its growth
during resolve(). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np
import pyarrow as pa
from _fresh_process import MeasurementFailed, measure

SYL = ["al", "der", "bren", "wick", "cor", "vale", "mar", "tin", "os", "ley", "ha", "ven", "dor", "ric", "el", "wyn",
       "gar", "ton", "bel", "la", "mor", "ris", "quin", "by", "sel", "den", "ash", "ford", "ka", "rin", "tho", "mas"]
FIRST_M = ["Alder", "Bruno", "Cedric", "Dorian", "Emil", "Felix", "Goran", "Hugo", "Ivo", "Jasper", "Kasimir", "Lionel"]
FIRST_F = ["Alma", "Beatrix", "Clara", "Dana", "Edith", "Farah", "Greta", "Hilda", "Ines", "Judith", "Katja", "Lena"]
ORG = ["Society", "Company", "Institute", "Bank", "Guild", "Press"]
PLACE = ["River", "Island", "Valley", "Harbour"]


def _surname(i: int) -> str:
    n = len(SYL)
    return (SYL[i % n] + SYL[(i // n) % n] + SYL[(i // n // n) % n]).capitalize()


def _typo(word: str) -> str:
    k = len(word) // 2
    return word[:k - 1] + word[k] + word[k - 1] + word[k + 1:]


def generate(n_mentions: int, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    n_entities = max(100, n_mentions // 10)
    kind = rng.choice(3, size=n_entities, p=[0.6, 0.25, 0.15])  # person, organisation, place
    per_doc, cast_size = 160, 15
    n_docs = -(-n_mentions // per_doc)
    casts = (rng.zipf(1.3, size=(n_docs, cast_size)) - 1) % n_entities
    ent = casts[np.repeat(np.arange(n_docs), per_doc)[:n_mentions], rng.integers(0, cast_size, n_mentions)]
    variant = rng.random(n_mentions)
    names, types = [], []
    for e, v in zip(ent.tolist(), variant.tolist()):
        k = kind[e]
        if k == 0:
            female = e % 2
            first = (FIRST_F if female else FIRST_M)[(e // 2) % 12]
            sur = _surname(e * 7 + 3)
            name = (f"{first} {sur}" if v < 0.60 else sur if v < 0.85 else f"{'Mrs.' if female else 'Mr.'} {sur}" if v < 0.93
                    else f"{first[0]}. {sur}" if v < 0.98 else f"{first} {_typo(sur)}")
            types.append("PERSON")
        elif k == 1:
            base = f"{_surname(e * 5 + 1)} {ORG[e % len(ORG)]}"
            name = base if v < 0.80 else f"The {base}" if v < 0.95 else f"{_typo(base.split()[0])} {ORG[e % len(ORG)]}"
            types.append("ORGANIZATION")
        else:
            base = f"{_surname(e * 3 + 2)} {PLACE[e % len(PLACE)]}"
            name = base if v < 0.95 else f"{_typo(base.split()[0])} {PLACE[e % len(PLACE)]}"
            types.append("GEO")
        names.append(name)
    idx = np.arange(n_mentions)
    chunk = [f"c{i}" for i in (idx // 8).tolist()]
    doc = [f"d{i}" for i in (idx // per_doc).tolist()]
    mentions = pa.table({"name": names, "type": types, "description": [f"{n} in passage {c}." for n, c in zip(names, chunk)],
                         "count": pa.array(np.ones(n_mentions, np.int32)), "chunk_id": chunk, "doc_id": doc})
    same_chunk = (idx[:-1] // 8) == (idx[1:] // 8)
    src, tgt = idx[:-1][same_chunk], idx[1:][same_chunk]
    assertions = pa.table({"source": pa.array(names).take(src), "target": pa.array(names).take(tgt),
                           "description": pa.array([""] * len(src), pa.string()), "weight": np.ones(len(src)),
                           "chunk_id": pa.array(chunk).take(src), "doc_id": pa.array(doc).take(src)})
    return mentions, assertions


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(n: int, method: str) -> dict:
    from graphwright.config import ResolveConfig
    from graphwright.stages.resolve.core import resolve

    mentions, assertions = generate(n)
    before = rss_mib()
    stats: dict = {}
    t, cpu = time.perf_counter(), time.process_time()
    entities, aliases, rels = resolve(mentions, assertions, ResolveConfig(method=method), stats=stats)
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    return {"mentions": n, "method": method, "seconds": round(seconds, 1), "cpu_s": round(cpu, 1), "peak_rss_mib": round(rss_mib()),
            "rss_growth_mib": round(rss_mib() - before), "names": aliases.num_rows, "entities": entities.num_rows,
            "relationships": rels.num_rows, "pairs_scored": stats.get("pairs_scored", 0), "keys_merged": stats.get("keys_merged", 0)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000,1000000,5000000")
    parser.add_argument("--method", default="linked")
    parser.add_argument("--one", type=int)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.method)))
        return 0
    print(f"{'mentions':>9} {'names':>8} {'pairs':>9} {'merged':>7} {'entities':>8} {'seconds':>8} {'cpu s':>7} {'cpu s/1M':>8} {'peak MiB':>9} {'growth MiB':>10}")
    for n in (int(s) for s in args.sizes.split(",")):
        try:
            r = measure(__file__, "--one", str(n), "--method", args.method)
        except MeasurementFailed as exc:
            print(f"{n:>9} failed: {exc}")
            continue
        print(f"{n:>9} {r['names']:>8} {r['pairs_scored']:>9} {r['keys_merged']:>7} {r['entities']:>8} {r['seconds']:>8.1f} "
              f"{r['cpu_s']:>7.1f} {r['cpu_s'] / n * 1e6:>8.1f} {r['peak_rss_mib']:>9} {r['rss_growth_mib']:>10}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
