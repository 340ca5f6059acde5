"""Resolve: link name keys that name one entity. Candidate pairs (candidates), scored on name,
context and type (scoring), borderline pairs optionally decided by an LLM (adjudicate), and
accepted pairs clustered without chaining (clusters)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graphwright.config import ResolveConfig
from graphwright.stages.resolve.candidates import candidate_pairs
from graphwright.stages.resolve.clusters import coherent_clusters
from graphwright.stages.resolve.scoring import KeyProfile, PairEvidence, PairScorer
from graphwright.util.numeric import unique

Adjudicator = Callable[[list[tuple[PairEvidence, KeyProfile, KeyProfile]]], dict[tuple[str, str], bool]]


def link_keys(profiles: dict[str, KeyProfile], config: ResolveConfig,
              embed: Callable[[list[str]], np.ndarray] | None = None,
              adjudicate: Adjudicator | None = None, memo: dict | None = None,
              candidates: dict[str, np.ndarray] | None = None,
              settled: np.ndarray | None = None,
              names: dict[tuple[str, str], tuple[float, bool]] | None = None,
              bounded: dict | None = None) -> tuple[dict[str, str], dict, dict]:
    """({key: cluster label}, {(a, b): (evidence, how)} for accepted pairs, stats). `memo`:
    {(a, b): evidence} of pairs whose profiles did not change since they were scored, filled with
    every pair scored here. `candidates`: the candidate pairs of these keys if known (without
    embeddings they depend on the keys alone), else an empty dict that is filled with them.
    `settled`: sorted codes i * len(keys) + j of candidate pairs known to score below the
    borderline threshold (their profiles did not change), which are not scored again. `names`:
    {(a, b): name_score(a, b)} of pairs scored before (a name score is a function of the keys).
    `bounded`: filled with the evidence of the pairs whose names kept them under the borderline
    threshold, so that their context was not measured (PairScorer.bounded; not in `memo`)."""
    keys = sorted(profiles)
    vectors = embed([profiles[k].text for k in keys]) if embed is not None and keys else None
    if vectors is not None and len(vectors) != len(keys):  # the pairs' codes are i * len(keys) + j
        raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(keys)} name keys")
    scorer = PairScorer(profiles, dict(zip(keys, vectors)) if vectors is not None else None, names)
    if memo is not None:
        memo.update(scorer._memo)
        scorer._memo = memo
    if candidates and vectors is None:
        generated = candidates
    else:
        generated = candidate_pairs(keys, config, vectors)
        if candidates is not None:
            candidates.update(generated)
    pairs = unique(np.concatenate([np.empty(0, np.int64), *generated.values()]))  # in (i, j) order
    to_score = pairs
    if settled is not None and len(settled) and len(pairs):
        to_score = pairs[~np.isin(pairs, settled, assume_unique=True)]
    accepted, borderline, contained_pairs = {}, [], []
    n = len(keys)
    below = config.borderline_threshold  # a pair under it is neither accepted, nor borderline, nor contained
    for i, j in zip((to_score // n).tolist(), (to_score % n).tolist()):
        e = scorer.bounded(keys[i], keys[j], below)
        if e.neighbours is None:
            if bounded is not None:
                bounded[(e.a, e.b)] = e
            continue
        if e.contained and e.score >= config.borderline_threshold:
            contained_pairs.append(e)
        if e.score >= config.accept_threshold:
            accepted[(e.a, e.b)] = (e, "linked")
        elif e.score >= config.borderline_threshold:
            borderline.append(e)
    llm_yes = 0
    if adjudicate is not None and borderline:
        verdicts = adjudicate([(e, profiles[e.a], profiles[e.b]) for e in borderline])
        for e in borderline:
            if verdicts.get((e.a, e.b)):
                accepted[(e.a, e.b)] = (e, "llm")
                llm_yes += 1
    label, cstats = coherent_clusters(keys, {p: e for p, (e, _) in accepted.items()}, scorer,
                                      config.min_link, config.max_cluster_keys, contained_pairs)
    stats = {"keys": len(keys), **{f"candidates_{g}": len(p) for g, p in generated.items()},
             "pairs_scored": len(pairs), "accepted": len(accepted) - llm_yes, "borderline": len(borderline),
             "llm_accepted": llm_yes, **cstats, "keys_merged": sum(1 for k in keys if label[k] != k)}
    return label, accepted, stats


def canonical_key(keys: list[str], mentioned: dict[str, int]) -> str:
    """The cluster's most mentioned key (then the longer, then the first): adding a rare variant
    does not change an entity's id."""
    return min(keys, key=lambda k: (-mentioned[k], -len(k), k))
