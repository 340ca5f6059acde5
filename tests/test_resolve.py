import random

import numpy as np
import pyarrow as pa
import pytest
from _helpers import assertions_table, mentions_table

from graphwright import ids
from graphwright.config import ResolveConfig
from graphwright.stages.resolve.core import resolve
from graphwright.stages.resolve.descriptions import (
    merge_descriptions,
    ordered_descriptions,
)
from graphwright.storage import contracts

CFG = ResolveConfig()


MENTIONS = [
    ("Mr. Scrooge", "PERSON", "Mr. Scrooge counted coins.", 1, "c1", "d1"),
    ("Scrooge", "ENTITY", "Scrooge was cold.", 2, "c2", "d1"),
    ("Scrooge's", "ENTITY", "Scrooge's office was dark.", 1, "c3", "d2"),
    ("Marley", "ENTITY", "Marley was dead.", 1, "c1", "d1"),
    ("Marley", "ENTITY", "Marley was dead.", 1, "c3", "d2"),
    ("London", "GEO", "London was foggy.", 1, "c2", "d1"),
]
ASSERTIONS = [
    ("Mr. Scrooge", "Marley", "Scrooge and Marley were partners.", 1.0, "c1", "d1"),
    ("Marley", "Scrooge's", "Marley haunted Scrooge's office.", 2.0, "c3", "d2"),
    ("Scrooge", "London", "", 0.25, "c2", "d1"),
    ("Mr. Scrooge", "Scrooge", "Mr. Scrooge is Scrooge.", 1.0, "c2", "d1"),  # two names of one entity
    ("Ghost", "Marley", "No mention supports the ghost.", 1.0, "c3", "d2"),  # unsupported endpoint
]


@pytest.fixture(scope="module")
def resolved():
    return resolve(mentions_table(MENTIONS), assertions_table(ASSERTIONS), CFG)


def test_outputs_satisfy_contracts(resolved):
    for name, table in zip(("entities", "entity_aliases", "relationships"), resolved):
        contracts.schema(name).validate(table)


def test_merges_surface_forms_by_normalized_name(resolved):
    entities = {e["canonical_key"]: e for e in resolved[0].to_pylist()}
    assert set(entities) == {"scrooge", "marley", "london"}
    scrooge = entities["scrooge"]
    assert scrooge["entity_id"] == ids.entity_id("scrooge")
    assert scrooge["name"] == "Scrooge"  # the most frequent surface form
    assert scrooge["mention_count"] == 4
    assert scrooge["type"] == "ENTITY"  # the most frequent type ...
    assert scrooge["types"] == ["ENTITY", "PERSON"]  # ... and the others are kept
    assert entities["london"]["type"] == "GEO"


def test_entity_lineage(resolved):
    entities = {e["canonical_key"]: e for e in resolved[0].to_pylist()}
    assert entities["scrooge"]["chunk_ids"] == ["c1", "c2", "c3"]
    assert entities["scrooge"]["doc_ids"] == ["d1", "d2"]
    assert entities["london"]["chunk_ids"] == ["c2"] and entities["london"]["doc_ids"] == ["d1"]
    # identical descriptions are merged once
    assert entities["marley"]["description"] == "Marley was dead."


def test_aliases_table(resolved):
    aliases = {a["alias"]: a for a in resolved[1].to_pylist()}
    assert set(aliases) == {"Mr. Scrooge", "Scrooge", "Scrooge's", "Marley", "London"}
    assert {aliases[a]["entity_id"] for a in ("Mr. Scrooge", "Scrooge", "Scrooge's")} == {ids.entity_id("scrooge")}
    assert aliases["Scrooge"]["mention_count"] == 2 and aliases["Marley"]["mention_count"] == 2
    assert aliases["Mr. Scrooge"]["method"] == "normalized_name"
    assert "scrooge" in aliases["Mr. Scrooge"]["evidence"]


def test_relationships(resolved):
    rels = resolved[2].to_pylist()
    sid, mid, lid = ids.entity_id("scrooge"), ids.entity_id("marley"), ids.entity_id("london")
    by_pair = {frozenset((r["source_id"], r["target_id"])): r for r in rels}
    assert set(by_pair) == {frozenset((sid, mid)), frozenset((sid, lid))}  # no self-loop, no ghost
    for r in rels:
        assert r["source_id"] < r["target_id"]
        assert r["source_id"] != r["target_id"]
        assert r["relationship_id"] == ids.relationship_id(r["source_id"], r["target_id"])
    sm = by_pair[frozenset((sid, mid))]
    assert sm["weight"] == 3.0  # summed over chunks
    assert sm["chunk_ids"] == ["c1", "c3"] and sm["doc_ids"] == ["d1", "d2"]
    assert {sm["source"], sm["target"]} == {"Scrooge", "Marley"}
    assert "Scrooge and Marley were partners." in sm["description"]
    assert "Marley haunted Scrooge's office." in sm["description"]
    assert by_pair[frozenset((sid, lid))]["description"] == ""


def test_degree(resolved):
    degree = {e["canonical_key"]: e["degree"] for e in resolved[0].to_pylist()}
    assert degree == {"scrooge": 2, "marley": 1, "london": 1}


def test_resolve_ignores_input_order(resolved):
    rng = random.Random(3)
    m, a = list(MENTIONS), list(ASSERTIONS)
    rng.shuffle(m)
    rng.shuffle(a)
    again = resolve(mentions_table(m), assertions_table(a), CFG)
    for x, y in zip(resolved, again):
        assert x.equals(y)


def test_resolve_empty():
    entities, aliases, rels = resolve(contracts.empty("mentions"), contracts.empty("assertions"), CFG)
    assert entities.num_rows == aliases.num_rows == rels.num_rows == 0


def test_merge_descriptions_orders_by_frequency_then_corpus_position_within_budget():
    descs = [(3, "b."), (4, "a."), (5, "b."), (1, ""), (2, "c.")]
    assert merge_descriptions(descs, 100) == "b. c. a."  # b twice; then c (position 2) before a (4)
    assert merge_descriptions(descs, 6) == "b. c."
    assert merge_descriptions(descs, 3) == "b."
    assert merge_descriptions([(0, "x" * 50)], 10) == "x" * 10  # one long description is cut
    # a description from a later document sorts last, so it does not displace earlier ones
    assert merge_descriptions(descs + [(9, "d.")], 6) == "b. c."
    assert merge_descriptions([], 10) == ""


def test_description_plan_matches_merge_descriptions_row_by_row():
    import pyarrow as pa

    from graphwright.stages.resolve.codes import as_scan, description_hashes
    from graphwright.stages.resolve.descriptions import DescriptionPlan, fetch_texts

    rng = random.Random(3)
    words = ["alpha", "beta", "gamma délta", "", None, "epsilon zeta eta", "theta", "iota kappa", "b", "a"]
    # (group, text, rank): few ranks, so that many descriptions tie on (mentions, earliest) and the text decides
    rows = [(rng.randrange(6), rng.choice(words), rng.randrange(12)) for _ in range(400)]
    texts = pa.array([d for _, d, _ in rows], pa.string())
    hashes, lengths = description_hashes(texts)
    scan = as_scan(pa.table({"description": texts}))
    for max_chars in (5, 30, 80):
        plan = DescriptionPlan(np.array([g for g, _, _ in rows]), hashes, lengths, np.array([r for *_, r in rows]),
                                7, max_chars, True)
        fetched = fetch_texts(scan, plan.needed())
        merged, over = plan.merge(fetched), plan.overflow(fetched)
        for g in range(7):
            mine = [(r, d) for gg, d, r in rows if gg == g]
            assert merged[g].as_py() == merge_descriptions(mine, max_chars)
            ordered = ordered_descriptions(mine)
            assert over.get(g) == (ordered if sum(len(d) + 1 for d in ordered) - 1 > max_chars else None)


def test_description_plan_orders_its_rows_by_counting_passes(monkeypatch):
    """The plan's (group, description) order comes from pair_order's two counting passes, not a
    sort (7.7M rows of hubs in a 0.1% update at 1.2M chunks: np.argsort took 1.29 s)."""
    import pyarrow as pa

    from graphwright.stages.resolve import descriptions
    from graphwright.stages.resolve.codes import as_scan, description_hashes

    sizes = []
    order = descriptions.pair_order
    monkeypatch.setattr(descriptions, "pair_order", lambda a, b, n_a, n_b: sizes.append(len(a)) or order(a, b, n_a, n_b))
    rows = [(g, f"text {g} {i % 3}", i) for g in range(4) for i in range(9)] + [(-1, "no group", 0), (2, "", 1)]
    texts = pa.array([d for _, d, _ in rows], pa.string())
    hashes, lengths = description_hashes(texts)
    plan = descriptions.DescriptionPlan(np.array([g for g, _, _ in rows]), hashes, lengths, np.array([r for *_, r in rows]),
                                        4, 40, False)
    assert sizes == [36]  # the rows of a group with a description
    merged = plan.merge(descriptions.fetch_texts(as_scan(pa.table({"description": texts})), plan.needed()))
    assert [merged[g].as_py() for g in range(4)] == [merge_descriptions([(r, d) for gg, d, r in rows if gg == g], 40) for g in range(4)]


def test_group_sums_equal_a_sort_of_every_pair_without_numpys_unique(monkeypatch):
    """Per distinct (group, code) pair, sorted, its summed weight: counted into bins when the
    pairs are few and through a sort when they are many, never through np.unique's inverse
    (2.5-3.5 s a call on the 9.6M mentions of 1.2M chunks)."""
    from graphwright.stages.resolve import codes

    rng = np.random.default_rng(3)
    cases = []
    for n, groups, width in ((0, 1, 1), (1, 1, 1), (5_000, 300, 7), (5_000, 4_000, 9_000), (20_000, 50, 1 << 20)):
        cases.append((rng.integers(0, groups, n), rng.integers(0, width, n), rng.random(n), width))
    cases.append((np.array([-1, 0, -1, 2]), np.array([1, 1, 1, 0]), np.ones(4), 3))  # a row of no group
    expected = []
    for group, code, weights, width in cases:
        pairs, inverse = np.unique(group.astype(np.int64) * width + code, return_inverse=True)
        expected.append((pairs // width, pairs % width, np.bincount(inverse.reshape(-1), weights=weights, minlength=len(pairs))))

    def refused(*args, **kwargs):
        raise AssertionError("np.unique")

    monkeypatch.setattr(np, "unique", refused)
    monkeypatch.setattr(np, "searchsorted", refused)  # rows are looked up in a hash table of the pairs
    monkeypatch.setattr(codes, "DENSE_BINS", 1 << 16)  # both paths on small cases
    for (group, code, weights, width), want in zip(cases, expected):
        got = codes.group_sums(group, code, weights, width)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_a_dictionary_sorts_as_python_sorts_its_strings(monkeypatch):
    """Dictionary.sort orders its values as Python's `sorted` does (code points, non-ASCII and
    NUL included: Arrow sorts UTF-8 bytes) and recodes each code to its sorted position, without
    numpy's sort of Python objects (2.3 s on 1.2M chunk ids)."""
    from graphwright.stages.resolve.codes import Dictionary

    rng = random.Random(5)
    alphabet = ["a", "b", "Z", "é", "ä", "\u00e9a", "\U0001F600", "\x00", " ", "ß", "日"]
    values = list({"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(400)})
    d = Dictionary()
    codes = d.codes(pa.array(values, pa.string()))
    real_argsort = np.argsort

    def argsort(a, *args, **kwargs):
        if getattr(a, "dtype", None) == object:
            raise AssertionError("numpy sort of Python strings")
        return real_argsort(a, *args, **kwargs)

    monkeypatch.setattr(np, "argsort", argsort)
    names, position = d.sort()
    assert names.to_pylist() == sorted(values)
    assert [names[int(p)].as_py() for p in position[codes]] == values
    assert Dictionary().sort()[0].to_pylist() == []


def test_the_text_fetcher_reads_each_wanted_hash_from_its_first_row_without_a_search_per_row(monkeypatch):
    """Per wanted description hash, the first (lowest) row of the pool holding it is read, in
    whatever order the pool comes; the pool's rows probe a hash table (at 1.2M chunks a binary
    search per row of the hubs' mentions and a sort of the hits took 1.6 s)."""
    import pyarrow as pa

    from graphwright.stages.resolve import texts as resolve_texts
    from graphwright.stages.resolve.codes import text_hashes

    files = {"f0": ["a", "b", "c"], "f1": ["b", "d", "a"]}
    every = files["f0"] + files["f1"]
    table = {"description": text_hashes(every), "file": np.array([0, 0, 0, 1, 1, 1]), "row": np.array([0, 1, 2, 0, 1, 2])}
    reads = []
    monkeypatch.setattr(resolve_texts, "read_data_file",
                        lambda store, name, path, columns: reads.append(path) or pa.table({"description": files[path]}))
    fetch = resolve_texts.text_fetcher(None, "mentions", ["f0", "f1"], table, np.array([5, 4, 3, 1]))

    def refused(*args, **kwargs):
        raise AssertionError("searchsorted")

    wanted = text_hashes(["a", "b", "d", "never"])
    with monkeypatch.context() as m:
        m.setattr(np, "searchsorted", refused)
        got = fetch(wanted)
    assert got.take(np.sort(wanted[:3])).to_pylist() == [["a", "b", "d"][i] for i in np.argsort(wanted[:3])]
    assert sorted(reads) == ["f0", "f1"]  # 'b' from row 1 (f0), not row 3 (f1), though the pool lists 3 first


def test_the_alias_table_takes_each_names_key_from_the_dictionary_and_equals_a_row_by_row_build():
    """One row per mentioned name, in code point order, with the key the dictionary computed when
    it met the name (computing it again for every alias took most of the table's time)."""
    from graphwright.stages.resolve import core
    from graphwright.stages.resolve.codes import Dictionary
    from graphwright.stages.resolve.scoring import PairEvidence
    from graphwright.storage import contracts
    from graphwright.text.names import resolution_key

    rng = random.Random(11)
    words = ["Scrooge", "Marley", "Ébenezer", "Cratchit", "日本", "Bob", "Tiny Tim", "Fezziwig", "Belle"]
    surface = sorted({" ".join(rng.sample(words, rng.randint(1, 2))) + rng.choice(["", "'s", " ", "."]) for _ in range(200)})
    names = Dictionary(resolution_key)
    m_name = names.codes(pa.array([rng.choice(surface) for _ in range(2_000)], pa.string()))
    m_count = np.array([rng.randint(1, 3) for _ in range(len(m_name))], np.int64)
    keys = sorted({names._keys[c] for c in m_name.tolist()})
    canonical = {k: keys[(i // 3) * 3] for i, k in enumerate(keys)}  # every third key heads a cluster
    accepted = {(min(k, c), max(k, c)): (PairEvidence(min(k, c), max(k, c), 0.9, 0.8, False, 0.5, 0.5, None, "compatible"), "linked")
                for k, c in canonical.items() if k != c}
    heads = sorted(set(canonical.values()))
    entity_ids = [f"e{i}" for i in range(len(heads))]
    entity_of_key = np.array([heads.index(canonical[k]) for k in keys])

    def reference():  # the table built a row at a time, as before
        best = {}
        for (a, b), (e, how) in accepted.items():
            for k in (a, b):
                if k not in best or (-e.score, e.a, e.b) < (-best[k][0].score, best[k][0].a, best[k][0].b):
                    best[k] = (e, how)
        counts = np.bincount(m_name, weights=m_count, minlength=len(names.values))
        rows = []
        for code in sorted(set(m_name.tolist()), key=lambda c: names.values[c]):
            key = resolution_key(names.values[code])
            if key == canonical[key]:
                how, why = "normalized_name", f"normalizes to {key!r}"
            else:
                e, how = best[key]
                other = e.b if e.a == key else e.a
                why = f"normalizes to {key!r}; merged into {canonical[key]!r} via {other!r} ({e.describe()})"
            rows.append({"alias": names.values[code], "entity_id": entity_ids[entity_of_key[keys.index(key)]], "method": how,
                         "evidence": why, "mention_count": int(counts[code])})
        return pa.Table.from_pylist(rows, schema=contracts.schema("entity_aliases").arrow)

    expected = reference()

    def refused(value):
        raise AssertionError("the key computed again")

    names.key = refused
    got = core._alias_table(names, m_name, m_count, keys, canonical, accepted, entity_ids, entity_of_key)
    assert got.equals(expected) and got.num_rows == len(set(m_name.tolist())) > 50


@pytest.mark.parametrize("collide", [False, True])
def test_net_change_cancels_rewritten_rows_without_sorting_them_all(monkeypatch, collide):
    """A DELETE's rewritten file comes back as removed and added with most of its rows: those
    cancel, by all columns, counting duplicates. Only the changed rows are sorted; should two
    distinct rows share a hash, every row is sorted (the answer is the same)."""
    from collections import Counter
    from types import SimpleNamespace

    import numpy as np

    from graphwright.stages.resolve import rows as rows_module

    rng = np.random.default_rng(3)
    cols = ("name", "count", "weight")

    def table(n):
        return {"name": rng.integers(0, 30, n), "count": rng.integers(0, 3, n), "weight": rng.choice([0.5, 1.0, 0.25, 0.0], n)}

    removed = table(2000)
    keep = rng.random(2000) > 0.01
    extra = table(40)
    added = {c: np.concatenate([removed[c][keep], extra[c]]) for c in cols}

    class Rows:
        def __init__(self, arrays):
            self.arrays = arrays

        def __len__(self):
            return len(self.arrays["name"])

    def bag(arrays):
        return Counter(zip(*(arrays[c].tolist() for c in cols)))

    want = bag(added)
    want.subtract(bag(removed))
    expected = sorted({row for row, n in want.items() if n})
    real_lexsort = np.lexsort
    if collide:
        monkeypatch.setattr(rows_module, "mix", lambda *keys: np.zeros(len(keys[0]), np.int64))
    else:  # nothing sorts the 4,000 rows
        monkeypatch.setattr(rows_module.np, "lexsort", lambda keys: real_lexsort(keys) if len(keys[0]) < 1000 else 1 / 0)
    got = rows_module.net_change(SimpleNamespace(removed=Rows(removed), added=Rows(added)), cols)
    monkeypatch.undo()
    rows = list(zip(*(got[c].tolist() for c in cols)))
    assert sorted(set(rows)) == expected and len(rows) == len(expected)
    order = real_lexsort([got[c].view(np.int64) if got[c].dtype == np.float64 else got[c] for c in cols][::-1])
    assert np.array_equal(order, np.arange(len(rows)))  # in the order of the columns' values, as before


def _best_names_reference(group, name_code, count, n_groups, names):
    totals = {}
    for g, c, n in zip(group.tolist(), name_code.tolist(), count.tolist()):
        if g >= 0:
            totals[(g, c)] = totals.get((g, c), 0) + n
    best = [""] * n_groups
    for g in range(n_groups):
        mine = [(-t, -len(names[c]), names[c]) for (gg, c), t in totals.items() if gg == g]
        best[g] = min(mine)[2] if mine else ""
    return best


def test_best_names_sum_each_name_in_bins_without_sorting_the_rows(monkeypatch):
    """Each name lies in one group (a name has one key, a key one entity): its counts are summed in
    one bin per name, and no row's (group, name) pair is sorted (the hubs' 7.7M mentions at 1.2M
    chunks). A name in two groups falls back to the sorted pairs, with the same answers."""
    from graphwright.stages.resolve import codes

    rng = np.random.default_rng(5)
    width = 1 << 20  # groups x names past the dense bins: the pairs would be sorted
    names = [f"name{i}" + "x" * (i % 3) for i in range(width)]
    n_groups = 40
    name_code = rng.integers(0, 2000, 20_000) * 500
    group = (name_code // 500) % n_groups  # each name in one group
    group[:50] = -1  # rows no group takes
    count = rng.integers(1, 4, len(group))
    expected = _best_names_reference(group, name_code, count, n_groups, names)
    monkeypatch.setattr(codes, "unique", lambda *a: pytest.fail("sorted the rows' pairs"))
    assert codes.best_names(group, name_code, count, n_groups, names) == expected
    monkeypatch.undo()
    group[60] = (group[60] + 1) % n_groups  # one name now in two groups
    assert codes.best_names(group, name_code, count, n_groups, names) == _best_names_reference(group, name_code, count, n_groups, names)


def test_plans_say_a_row_holding_each_needed_text_and_the_fetcher_reads_it_without_searching(monkeypatch):
    """Each description plan knows a row holding each distinct description it groups, so the
    texts it needs are read from there: at 1.2M chunks looking for them among the hubs' millions
    of rows took 1.5-2 s of an update."""
    import pyarrow as pa

    from graphwright.stages.resolve import core, texts
    from graphwright.stages.resolve.codes import text_hashes

    words = ["red", "blue", "red", "green", "blue", "red", "violet"]
    files = {"f0": words[:4], "f1": words[4:]}
    rows = {"description": text_hashes(words), "length": np.array([len(w) for w in words], np.int32),
            "chunk_id": np.arange(len(words)), "file": np.array([0, 0, 0, 0, 1, 1, 1]), "row": np.array([0, 1, 2, 3, 0, 1, 2])}
    group = np.array([0, 0, 1, 1, 0, 1, 1])
    parts = core._Parts(group, 2, np.arange(len(words)), rows, np.arange(len(words)), 12, False)
    wanted, at = parts.needed_at()
    assert len(wanted) and (rows["description"][at] == wanted).all()
    assert np.array_equal(wanted, parts.needed())
    monkeypatch.setattr(texts, "read_data_file", lambda store, name, path, columns: pa.table({"description": files[path]}))
    fetch = texts.text_fetcher(None, "mentions", ["f0", "f1"], rows, None)
    by_search = fetch(wanted)
    with monkeypatch.context() as m:
        m.setattr(texts, "first_index", lambda *a: (_ for _ in ()).throw(AssertionError("searched")))
        given = fetch(wanted, at)
    assert np.array_equal(given.hashes, by_search.hashes) and given.texts.equals(by_search.texts)
    assert core.merged_descriptions(parts, given, ["e0", "e1"], ["E0", "E1"], None) == \
        core.merged_descriptions(parts, by_search, ["e0", "e1"], ["E0", "E1"], None)


def test_supported_pairs_are_coded_by_counting_passes_not_hashed(monkeypatch):
    """The relationships' endpoint pairs and each assertion's pair come from pair_inverse's two
    counting passes over the ranks (8.4M assertions at 1.2M chunks: 1.1 s against 2.4 s for a
    hash of every code); the answer is that of unique_inverse."""
    import pyarrow.compute as pc

    from graphwright.stages.resolve import core
    from graphwright.util.numeric import unique_inverse

    rng = np.random.default_rng(3)
    n_keys, n_entities = 40, 25
    src, tgt = rng.integers(0, n_keys, 2_000), rng.integers(0, n_keys, 2_000)
    keep = (rng.random(2_000) < 0.8) & (src != tgt)
    src = np.where(~keep & (rng.random(2_000) < 0.5), -1, src)  # a row not kept may name no key
    entity_of_key = rng.integers(0, n_entities, n_keys)  # some keys share an entity: their assertions support nothing
    id_rank = rng.permutation(n_entities)
    r = np.flatnonzero(keep)
    ea, eb = entity_of_key[src[r]], entity_of_key[tgt[r]]
    rows = r[ea != eb]
    ra, rb = id_rank[entity_of_key[src[rows]]], id_rank[entity_of_key[tgt[rows]]]
    pairs, a_pair = unique_inverse(np.minimum(ra, rb) * n_entities + np.maximum(ra, rb))

    def refused(*args, **kwargs):
        raise AssertionError("hashed")

    monkeypatch.setattr(pc, "dictionary_encode", refused)
    got_rows, got_pair, got_pairs = core._supported_pairs(src, tgt, keep, entity_of_key, id_rank)
    assert got_rows.tolist() == rows.tolist() and got_pair.tolist() == a_pair.tolist() and got_pairs.tolist() == pairs.tolist()
