"""Clustering accepted pairs into entities without chaining.

Connected components chain: 'scrooge' ~ 'ebenezer scrooge' and 'scrooge' ~ 'fred scrooge' would
put two people in one entity. Instead:

1. Ambiguous short names are not merged: a name contained in two candidate longer names that
   do not link with each other (a bare surname shared by two full names) keeps its own entity.
2. Accepted pairs are merged best-first (score, then keys: deterministic), and two clusters join
   only if every pair across them links (complete linkage): score >= `min_link`, or a pair an
   LLM accepted. Clusters stop at `max_keys` keys.
"""

from __future__ import annotations

from collections.abc import Callable

from graphwright.stages.resolve.scoring import PairEvidence


def coherent_clusters(keys: list[str], accepted: dict[tuple[str, str], PairEvidence],
                      score: Callable[[str, str], PairEvidence], min_link: float, max_keys: int,
                      scored: list[PairEvidence] = ()) -> tuple[dict[str, str], dict]:
    """({key: cluster representative}, stats). Representatives are only cluster labels here.
    `scored`: every candidate pair scored, accepted or not; a short name contained in two longer
    names among them is ambiguous even if only one of the pairs had the context to be accepted."""
    def links(a: str, b: str) -> bool:
        return (min(a, b), max(a, b)) in accepted or score(a, b).score >= min_link

    partners: dict[str, list[str]] = {}  # short name -> the longer names that contain it
    for e in list(accepted.values()) + list(scored):
        a, b = e.a, e.b
        if e.contained:
            short, long = (a, b) if len(a.split()) < len(b.split()) else (b, a)
            if long not in partners.get(short, ()):
                partners.setdefault(short, []).append(long)
    ambiguous = set()
    for k, ps in partners.items():
        ps = sorted(ps)
        if len(ps) > 1 and any(not links(p, q) for i, p in enumerate(ps) for q in ps[i + 1:]):
            ambiguous.add(k)
    edges = sorted((e for e in accepted.values() if e.a not in ambiguous and e.b not in ambiguous),
                   key=lambda e: (-e.score, e.a, e.b))
    label = {k: k for k in keys}
    members = {k: [k] for k in keys}
    refused = 0
    for e in edges:
        ca, cb = label[e.a], label[e.b]
        if ca == cb:
            continue
        if len(members[ca]) + len(members[cb]) > max_keys or not all(links(x, y) for x in members[ca] for y in members[cb]):
            refused += 1
            continue
        keep, gone = min(ca, cb), max(ca, cb)
        for k in members[gone]:
            label[k] = keep
        members[keep].extend(members.pop(gone))
    return label, {"ambiguous_keys": len(ambiguous), "merges_refused": refused}
