"""Resolve from the previous run's state: only the rows an update touched are rebuilt.

The coded rows come from the state (stages.resolve.state: only files added since are read). Which
output rows can differ is derived from the rows that changed:
- a key is touched when a mention of one of its names, or an assertion naming it, was added or
  removed; a key *moved* when its entity (canonical key) is not the one it had;
- an entity is rebuilt when it holds a touched or moved key, is new, or its degree changed;
- a relationship is rebuilt when an assertion supporting it (before or now) changed, when an
  endpoint's key moved, or when an endpoint entity is new or renamed.
Every other row is a function of the same rows as before, so it is kept as it is, unread. Linking
still sees every key (a merge is a global decision), but scores again only the pairs with a
changed profile (pair_cache). The rebuilt rows are computed by the same code as a full resolve
(core), restricted to their groups, so they equal a full resolve's; tests/test_resolve_state.py
and tests/test_incremental_equivalence.py hold that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphwright import ids
from graphwright.stages.resolve import core, state
from graphwright.stages.resolve.candidates import searched_candidates
from graphwright.stages.resolve.codes import best_names
from graphwright.stages.resolve.linking import link_keys
from graphwright.stages.resolve.ngram_hits import NgramHits
from graphwright.stages.resolve.pair_cache import (
    candidates_from,
    candidates_table,
    memo_from,
    memo_table,
    name_scores,
    settled_codes,
    split_rows,
)
from graphwright.stages.resolve.rows import (
    build_entities,
    chunk_ranks,
    code_hashes,
    net_change,
    order_kept,
    used_codes,
)
from graphwright.stages.resolve.texts import text_fetcher
from graphwright.storage import contracts, lineage
from graphwright.storage.patch import data_files
from graphwright.util import memory
from graphwright.util.laps import Laps
from graphwright.util.numeric import distinct_codes, sorted_index, to_numpy, unique
from graphwright.util.threads import in_thread

OUTPUTS = ("entities", "entity_aliases", "relationships")
INPUTS = ("mentions", "assertions", "chunks", "documents")


@dataclass
class Update:
    entities: pa.Table  # the entity rows to write: all of them, or (patch) the rebuilt ones
    aliases: pa.Table  # all aliases (one row per surface name: small)
    relationship_parts: Iterator[pa.Table]
    n_entities: int
    n_relationships: int
    patch: bool  # entities and relationship_parts replace the rows of their keys and of the removed ones
    removed_entities: pa.Array
    removed_relationships: pa.Array
    finish: Callable[[object], None]  # saves the state once the outputs are written (given the store)
    stats: dict = field(default_factory=dict)
    laps: Laps = field(default_factory=Laps)  # the seconds of resolve's steps (the stage puts them in its metrics)


def resolve_update(store, config, extractor: str, run_id: str, embed=None, adjudicate=None,
                   overflow: dict | None = None, link_stats: dict | None = None, depends: str = "") -> Update:
    """`depends`: the settings outside `config` that the rows depend on (resolve.settings_outside);
    under others the state's pairs and rows are not reused."""
    files = store.files
    laps = Laps()
    fingerprint = state.fingerprint(extractor, config.method)
    config_id = ids.stable_id("resolve-config", config.model_dump_json(), *([depends] if depends else []))
    outputs_now = {t: store.version(t) for t in OUTPUTS}
    inputs_now = {t: store.version(t) for t in INPUTS}
    meta = state.peek(files, fingerprint)
    if meta and meta.get("outputs") == {**outputs_now, "config": config_id, "inputs": inputs_now}:
        return _unchanged(store, link_stats)  # the tables this state was made from and the ones it made are as they were
    st = state.load(files, fingerprint, config.method)
    made_from = st.outputs.pop("inputs", None) if st is not None else None  # the input versions the state holds
    base = (st is not None and st.outputs == {**outputs_now, "config": config_id}
            and {"keys", "entities", "chunk_rank"} <= set(st.derived))
    st = st or state.ResolveState.empty(fingerprint, config.method)
    sizes = {k: len(d) for k, d in st.dictionaries.items()}
    advances = state.advance_both(store, files, st, extractor, made_from)
    laps.lap("state_s")
    net_m = net_change(advances["mentions"], ("name", "type", "chunk_id", "doc_id", "count", "description", "length"))
    net_a = net_change(advances["assertions"], ("source", "target", "chunk_id", "doc_id", "weight", "description", "length"))
    m, a = dict(advances["mentions"].current.arrays), dict(advances["assertions"].current.arrays)
    names, chunks, docs, types = (st.dictionaries[k] for k in ("names", "chunks", "docs", "types"))
    previous_rank = st.derived.get("chunk_rank")
    chunk_names, chunk_code = chunks.sort(to_numpy(previous_rank.column("position"), np.int64)
                                          if previous_rank is not None and "position" in previous_rank.column_names else None)
    doc_names, doc_code = docs.sort()
    type_names, type_code = types.sort()
    for rows in (m, a):
        rows["chunk_id"], rows["doc_id"] = chunk_code[rows["chunk_id"]], doc_code[rows["doc_id"]]
    m["type"] = type_code[m["type"]]
    # the chunks table read and looked up (Arrow, without the GIL) while the keys are linked
    ranking = in_thread(chunk_ranks, store, chunk_names, name="resolve-ranks")
    chunk_used = used_codes(m["chunk_id"], chunk_code)  # per code: what the state records, and the order check reads
    memory.release()
    laps.lap("codes_s")

    key_of_code = names.keys
    keys = sorted(set(key_of_code[distinct_codes(m["name"], len(key_of_code))].tolist()))
    key_index = {k: i for i, k in enumerate(keys)}
    key_of_name = np.array([key_index.get(k, -1) for k in key_of_code.tolist()], dtype=np.int64)
    m_key, a_src, a_tgt = key_of_name[m["name"]], key_of_name[a["source"]], key_of_name[a["target"]]
    a_keep = (a_src >= 0) & (a_tgt >= 0) & (a_src != a_tgt)

    label, accepted, stats = {k: k for k in keys}, {}, {"pairs_rescored": 0}
    cached = st.outputs.get("config") == config_id
    pairs_table, cand_table, hits_table, chunk_hash = None, None, None, None
    if config.method == "linked" and len(keys) > 1:
        candidates = candidates_from(st.derived.get("candidates") if cached else None, keys)
        known, bounded, hits = bool(candidates), {}, None
        before = NgramHits.from_table(st.derived.get("ngram_hits")) if cached and not known else None
        with ThreadPoolExecutor(1, thread_name_prefix="resolve-candidates") as side:
            # without embeddings the candidates depend on the keys alone: when the key set changed
            # they are searched (faiss, numpy) in a thread while the profiles are made, again only
            # for the keys the change can reach (ngram_hits)
            stored_keys = st.derived.get("keys")
            search = side.submit(searched_candidates, keys, config, None, before,
                                 stored_keys.column("key").to_pylist() if before is not None and stored_keys is not None else None) \
                if not known and not config.embeddings else None
            profiles = core._profiles(keys, m_key, m["count"], m["type"], type_names.to_pylist(), m["chunk_id"], a_src, a_tgt, a_keep)
            texts = None
            if config.embeddings or config.adjudicate:
                best = best_names(m_key, m["name"], m["count"], len(keys), names.values)
                plan = core.DescriptionPlan(m_key, m["description"], m["length"], ranking.result()[m["chunk_id"]], len(keys), 0, False)
                fetch = text_fetcher(store, "mentions", advances["mentions"].files, m, None)
                first = plan.merge(fetch(plan.needed(), plan.needed_at()), cut=False)  # the plan says where, as below
                for i, k in enumerate(keys):
                    profiles[k].text = f"{best[i]}: {first[i].as_py()}"[:300]
                texts = [profiles[k].text for k in keys]
            chunk_hash = code_hashes(st.derived.get("chunk_rank"), chunks)
            by_position = np.empty(len(chunk_hash), np.int64)
            by_position[chunk_code] = chunk_hash  # the profiles' chunk codes are sorted positions
            fp = profiles.fingerprints(by_position, texts)  # of every key, from the profiles' arrays
            cache = st.derived.get("pairs") if cached else None
            # pairs whose names keep them below the borderline whatever the context stay settled too
            kept, rescore = split_rows(cache, fp, hopeless_below=config.borderline_threshold)
            memo = memo_from(kept, config.borderline_threshold)  # the pairs linking will look at again
            if search is not None:
                found, hits = search.result()
                candidates.update(found)
        reused = len(memo)
        label, accepted, link = link_keys(profiles, config, embed if config.embeddings else None,
                                          adjudicate if config.adjudicate else None, memo=memo, candidates=candidates,
                                          settled=settled_codes(kept, keys, config.borderline_threshold),
                                          names=name_scores(rescore), bounded=bounded)
        stats.update(link, pairs_rescored=len(memo) - reused + len(bounded), candidates_reused=known,
                     **({"ngram_keys_searched": hits.searched} if hits is not None else {}))
        # the bounded pairs are cached too: they score under the borderline, so they stay settled
        pairs_table = memo_table({**bounded, **memo}, fp, kept)
        cand_table = st.derived["candidates"] if known else candidates_table(candidates, keys)
        hits_table = st.derived.get("ngram_hits") if known else hits.table() if hits is not None else None
        del profiles
        memory.release()
    laps.lap("link_s")
    rank = ranking.result()
    rank_by_code = rank[chunk_code] if len(chunk_code) else rank
    if base and not order_kept(st.derived["chunk_rank"], rank_by_code, chunk_used):
        base = False  # chunks changed places in the corpus: descriptions may reorder anywhere
    laps.lap("ranks_s")
    canonical, entity_keys, entity_ids, position, entity_of_key, id_rank = core.key_entities(keys, label, m_key, m["count"])
    n_entities = len(entity_keys)
    m_entity = entity_of_key[m_key] if len(m_key) else m_key
    # every chunk list as codes: the rebuilt rows' lists come from it, and cluster, report and
    # embed read it instead of the lists (storage.lineage); the entities' beside the relationships' pairs
    listed = in_thread(lineage.entity_lists, id_rank, m_entity, m["chunk_id"], len(chunk_names), name="resolve-lineage")
    sup_rows, a_pair, pairs = core._supported_pairs(a_src, a_tgt, a_keep, entity_of_key, id_rank)
    width = max(n_entities, 1)
    by_rank = np.argsort(id_rank)
    rel_lo, rel_hi = by_rank[pairs // width], by_rank[pairs % width]
    degree = np.bincount(np.concatenate([rel_lo, rel_hi]), minlength=n_entities).astype(np.int64)
    coded = lineage.build(chunk_names, entity_ids, id_rank, listed.result(), pairs, a_pair, a["chunk_id"][sup_rows])

    laps.lap("lineage_s")
    old_keys = st.derived.get("keys") if base else None
    old_entities = st.derived.get("entities") if base else None
    if base:
        old_canon = dict(zip(old_keys.column("key").to_pylist(), old_keys.column("canonical").to_pylist()))
        moved = np.array([old_canon.get(k) != canonical[k] for k in keys], dtype=bool)
        gone = set(old_canon) - set(keys)
        dirty_key = moved.copy()
        for codes in (net_m["name"], net_a["source"], net_a["target"]):
            hit = key_of_name[codes]
            dirty_key[hit[hit >= 0]] = True
        dirty_entity = np.zeros(n_entities, dtype=bool)
        dirty_entity[entity_of_key[dirty_key]] = True
        for i in np.flatnonzero(moved).tolist():  # the entity a key left has lost its rows
            left = position.get(old_canon.get(keys[i]))
            if left is not None:
                dirty_entity[left] = True
        for k in gone:
            left = position.get(old_canon[k])
            if left is not None:
                dirty_entity[left] = True
        old_at = to_numpy(pc.fill_null(pc.index_in(pa.array(entity_keys, pa.string()), value_set=old_entities.column("canonical_key")), -1), np.int64)
        old_degree = to_numpy(old_entities.column("degree"), np.int64)
        dirty_entity |= (old_at < 0) | (old_degree[np.maximum(old_at, 0)] != degree) if len(old_degree) else np.ones(n_entities, bool)
    else:
        dirty_entity = np.ones(n_entities, dtype=bool)
    chosen = np.flatnonzero(dirty_entity)
    laps.lap("dirty_entities_s")
    entities, chosen_names = build_entities(chosen, m, m_entity, n_entities, names, type_names, doc_names,
                                            rank, degree, entity_ids, entity_keys, config, overflow, coded.entity_chunk_ids(id_rank[chosen]),
                                            text_fetcher(store, "mentions", advances["mentions"].files, m, None),  # the plans say where
                                            core.UPDATE_PLAN_BYTES if base else 0)
    laps.lap("entities_s")
    if base:
        previous_names = old_entities.column("name").to_pylist()
        entity_names = np.array([previous_names[j] if j >= 0 else "" for j in old_at.tolist()], dtype=object)
    else:
        entity_names = np.full(n_entities, "", dtype=object)
    renamed = np.zeros(n_entities, dtype=bool)
    if len(chosen):
        renamed[chosen] = entity_names[chosen] != np.array(chosen_names, dtype=object)
        entity_names[chosen] = chosen_names
    if base:
        renamed |= old_at < 0
    aliases = core._alias_table(names, m["name"], m["count"], keys, canonical, accepted, entity_ids, entity_of_key)

    if base:
        dirty_pair, removed_rel = _dirty_relationships(
            pairs, id_rank, width, entity_of_key, key_of_name, key_of_code, net_a, a, sup_rows, a_pair, moved, gone,
            old_canon, position, rel_lo, rel_hi, renamed)
        removed_ent = pc.filter(old_entities.column("entity_id"), pc.invert(pc.is_in(old_entities.column("entity_id"), value_set=pa.array(entity_ids, pa.string()))))
    else:
        dirty_pair, removed_rel, removed_ent = np.ones(len(pairs), dtype=bool), pa.array([], pa.string()), pa.array([], pa.string())
    chosen_pairs = np.flatnonzero(dirty_pair)
    laps.lap("aliases_dirty_relationships_s")
    local = np.full(len(pairs), -1, dtype=np.int64)
    local[chosen_pairs] = np.arange(len(chosen_pairs))
    keep = dirty_pair[a_pair] if len(a_pair) else np.zeros(0, bool)
    rel_parts = core._Parts(local[a_pair[keep]], len(chosen_pairs), sup_rows[keep], a, rank, config.description_max_chars,
                            overflow is not None, core.UPDATE_PLAN_BYTES if base else 0)
    endpoints = core._Endpoints(pa.array(entity_ids, pa.string()), pa.array(entity_names.tolist(), pa.string()),
                                rel_lo[chosen_pairs], rel_hi[chosen_pairs])
    fetch = text_fetcher(store, "assertions", advances["assertions"].files, a, None)  # the plans say where
    parts = core._relationship_parts(fetch, {c: a[c] for c in ("weight", "chunk_id", "doc_id")}, rel_parts, endpoints,
                                     chunk_names, doc_names, overflow,
                                     lambda first, k: coded.relationship_chunk_ids(chosen_pairs[first:first + k]))
    laps.lap("relationship_plans_s")
    stats.update(entities_rebuilt=len(chosen), relationships_rebuilt=len(chosen_pairs), incremental=bool(base),
                 mentions_changed=len(net_m["name"]), assertions_changed=len(net_a["source"]),
                 mentions_total=len(m["name"]))
    if link_stats is not None:
        link_stats.update(stats)
    derived = {
        "keys": pa.table({"key": pa.array(keys, pa.string()), "canonical": pa.array([canonical[k] for k in keys], pa.string())}),
        "entities": pa.table({"canonical_key": pa.array(entity_keys, pa.string()), "entity_id": pa.array(entity_ids, pa.string()),
                              "name": pa.array(entity_names.tolist(), pa.string()), "degree": pa.array(degree, pa.int64())}),
        "chunk_rank": pa.table({"rank": pa.array(rank_by_code, pa.int64()), "used": pa.array(chunk_used, pa.bool_()),
                                "position": pa.array(chunk_code, pa.int32()),
                                **({"hash": pa.array(chunk_hash, pa.int64())} if chunk_hash is not None else {})}),
        **({"pairs": pairs_table, "candidates": cand_table} if pairs_table is not None else {}),
        **({"ngram_hits": hits_table} if hits_table is not None else {}),
    }

    used = len(distinct_codes(np.concatenate([m["chunk_id"], a["chunk_id"]]), len(chunk_code)))
    stale = len(chunks.values) > 2 * max(used, 1)  # most coded chunks are gone: start the codes afresh

    def finish(store_) -> None:
        lineage.write(files, coded, {t: store_.version(t) for t in lineage.TABLES})
        if stale:
            state.forget(files)
            return
        outputs = {t: store_.version(t) for t in OUTPUTS} | {"config": config_id, "inputs": inputs_now}
        state.save(files, st, run_id, advances, sizes, derived, outputs)

    return Update(core._conform(entities, "entities"), core._conform(aliases, "entity_aliases"), parts, n_entities,
                  len(pairs), bool(base), removed_ent, removed_rel, finish, stats, laps)


def _unchanged(store, link_stats: dict | None) -> Update:
    def rows(name: str) -> int:
        return sum(n for _, n in data_files(store, name))

    nothing = pa.array([], pa.string())
    stats = {"incremental": True, "unchanged": True, "entities_rebuilt": 0, "relationships_rebuilt": 0, "pairs_rescored": 0,
             "mentions_changed": 0, "assertions_changed": 0, "mentions_total": rows("mentions")}
    if link_stats is not None:
        link_stats.update(stats)
    return Update(contracts.empty("entities"), contracts.empty("entity_aliases"), iter(()), rows("entities"),
                  rows("relationships"), True, nothing, nothing, lambda store_: None, stats)


def _dirty_relationships(pairs, id_rank, width, entity_of_key, key_of_name, key_of_code, net_a, a, sup_rows, a_pair, moved,
                         gone, old_canon, position, rel_lo, rel_hi, renamed) -> tuple[np.ndarray, pa.Array]:
    """(which relationships to rebuild, the ids of the previous run's relationships to remove)."""
    dirty = np.zeros(len(pairs), dtype=bool)

    def mark(src_key: np.ndarray, tgt_key: np.ndarray) -> None:
        ok = (src_key >= 0) & (tgt_key >= 0)
        ea, eb = entity_of_key[src_key[ok]], entity_of_key[tgt_key[ok]]
        differ = ea != eb
        ra, rb = id_rank[ea[differ]], id_rank[eb[differ]]
        codes = np.minimum(ra, rb) * width + np.maximum(ra, rb)
        at = sorted_index(pairs, codes)
        dirty[at[at >= 0]] = True

    mark(key_of_name[net_a["source"]], key_of_name[net_a["target"]])
    # assertions whose endpoint key moved (or lost its last mention): their entity pair changed
    moved_name = np.zeros(len(key_of_name), dtype=bool)
    has_key = key_of_name >= 0
    moved_name[has_key] = moved[key_of_name[has_key]]
    if gone:
        moved_name |= np.isin(key_of_code, np.array(sorted(gone), dtype=object))
    affected = moved_name[a["source"]] | moved_name[a["target"]] if len(a["source"]) else np.zeros(0, bool)
    if len(sup_rows):
        dirty[a_pair[affected[sup_rows]]] = True
    dirty |= renamed[rel_lo] | renamed[rel_hi]
    # the previous relationships of the changed and moved assertions, by the previous entities
    names_s = np.concatenate([net_a["source"], a["source"][affected]])
    names_t = np.concatenate([net_a["target"], a["target"][affected]])
    both = unique(names_s.astype(np.int64) * len(key_of_code) + names_t) if len(names_s) else names_s
    removed, again_s, again_t = set(), [], []
    for s_code, t_code in zip((both // max(len(key_of_code), 1)).tolist(), (both % max(len(key_of_code), 1)).tolist()):
        cs, ct = old_canon.get(key_of_code[s_code]), old_canon.get(key_of_code[t_code])
        if cs is None or ct is None or cs == ct:
            continue
        removed.add(ids.relationship_id(ids.entity_id(cs), ids.entity_id(ct)))
        if cs in position and ct in position:  # the previous pair may live on, with other support
            again_s.append(position[cs])
            again_t.append(position[ct])
    if again_s:
        ra, rb = id_rank[np.array(again_s)], id_rank[np.array(again_t)]
        codes = np.minimum(ra, rb) * width + np.maximum(ra, rb)
        at = sorted_index(pairs, codes)
        dirty[at[at >= 0]] = True
    return dirty, pa.array(sorted(removed), pa.string())

