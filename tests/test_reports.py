import json

import pyarrow as pa

from graphwright import ids
from graphwright.config import ReportConfig
from graphwright.stages.report.extractive import GENERATOR, _sentences
from graphwright.stages.report.extractive import build_reports as _build_reports
from graphwright.storage import contracts


def build_reports(*args, **kwargs) -> pa.Table:
    """The reports table (build_reports may also return build statistics alongside it)."""
    out = _build_reports(*args, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def norm(text):
    return " ".join(text.split())


def sentences_of(texts):
    return {norm(s) for t in texts for s in _sentences(t)}


def segmentable(summary, pieces):
    """Whether `summary` is a sequence of whole `pieces` (sentences) joined by single spaces."""
    words = norm(summary).split(" ")
    reachable = [True] + [False] * len(words)
    for i in range(len(words)):
        if reachable[i]:
            for j in range(i + 1, len(words) + 1):
                if " ".join(words[i:j]) in pieces:
                    reachable[j] = True
    return reachable[-1]


def entity(key, name, etype, description, degree=1, mentions=1, chunks=("c1",)):
    return {"entity_id": ids.entity_id(key), "canonical_key": key, "name": name, "type": etype, "types": [etype],
            "description": description, "mention_count": mentions, "degree": degree,
            "chunk_ids": list(chunks), "doc_ids": ["d1"]}


def relationship(a, b, description, weight=1.0):
    s, t = sorted((ids.entity_id(a), ids.entity_id(b)))
    return {"relationship_id": ids.relationship_id(s, t), "source_id": s, "target_id": t, "source": a.title(),
            "target": b.title(), "description": description, "weight": weight, "chunk_ids": ["c1"], "doc_ids": ["d1"]}


def community(level, keys, rels, children=(), parent=None, chunks=("c1",)):
    members = sorted(ids.entity_id(k) for k in keys)
    return {"community_id": ids.community_id(level, members), "human_id": 0, "level": level, "parent_id": parent,
            "children_ids": list(children), "entity_ids": members, "relationship_ids": sorted(r["relationship_id"] for r in rels),
            "n_chunks": len(set(chunks)), "size": len(members)}


def small_world():
    ents = [
        entity("mara voss", "Mara Voss", "PERSON", "Mara Voss sailed the Kestrel. She carried copper.", degree=2, mentions=5),
        entity("tobias reed", "Tobias Reed", "PERSON", "Tobias Reed counted every crate.", degree=1),
        entity("port elling", "Port Elling", "GEO", "Port Elling is a harbor town.", degree=2),
        entity("agnes thorne", "Agnes Thorne", "PERSON", "Agnes Thorne presided over the council.", degree=1),
        entity("lonely", "Lonely", "ENTITY", "Lonely stood apart."),
    ]
    r1 = relationship("mara voss", "tobias reed", "Mara Voss and Tobias Reed ate supper. They talked late.", 2.0)
    r2 = relationship("port elling", "agnes thorne", "Agnes Thorne governed Port Elling.", 1.0)
    r3 = relationship("mara voss", "port elling", "Mara Voss sailed into Port Elling.", 0.5)
    leaf_a = community(1, ["mara voss", "tobias reed"], [r1], chunks=("c1", "c2"))
    leaf_b = community(1, ["port elling", "agnes thorne"], [r2], chunks=("c3",))
    root = community(0, ["mara voss", "tobias reed", "port elling", "agnes thorne"], [r1, r2, r3],
                     children=[leaf_a["community_id"], leaf_b["community_id"]], chunks=("c1", "c2", "c3"))
    leaf_a["parent_id"] = leaf_b["parent_id"] = root["community_id"]
    single = community(0, ["lonely"], [])
    comms = pa.Table.from_pylist([root, leaf_a, leaf_b, single], schema=contracts.schema("communities").arrow)
    return (comms, pa.Table.from_pylist(ents, schema=contracts.schema("entities").arrow),
            pa.Table.from_pylist([r1, r2, r3], schema=contracts.schema("relationships").arrow))


def test_reports_contract_and_min_size():
    comms, ents, rels = small_world()
    reports = build_reports(comms, ents, rels, ReportConfig())
    contracts.schema("community_reports").validate(reports)
    assert reports.num_rows == 3  # the single-entity community is below min_size
    assert set(reports.column("generator").to_pylist()) == {GENERATOR}
    everyone = build_reports(comms, ents, rels, ReportConfig(min_size=1))
    assert everyone.num_rows == 4


def test_leaf_summaries_are_copied_from_their_own_descriptions():
    comms, ents, rels = small_world()
    reports = {r["community_id"]: r for r in build_reports(comms, ents, rels, ReportConfig()).to_pylist()}
    ent = {e["entity_id"]: e for e in ents.to_pylist()}
    rel = {r["relationship_id"]: r for r in rels.to_pylist()}
    for c in comms.to_pylist():
        if c["community_id"] not in reports or c["children_ids"]:
            continue
        report = reports[c["community_id"]]
        own = sentences_of([ent[e]["description"] for e in c["entity_ids"]] + [rel[r]["description"] for r in c["relationship_ids"]])
        assert segmentable(report["summary"], own), report["summary"]
        assert report["title"] in {"Mara Voss and Tobias Reed", "Port Elling and Agnes Thorne"}
    leaf = next(r for r in reports.values() if r["title"] == "Mara Voss and Tobias Reed")
    # relationship sentences (strongest first), then the first sentence of each member's description
    assert leaf["summary"] == ("Mara Voss and Tobias Reed ate supper. They talked late. "
                               "Mara Voss sailed the Kestrel. Tobias Reed counted every crate.")
    findings = json.loads(leaf["findings"])
    assert findings[0] == {"summary": "Mara Voss (PERSON)", "explanation": "Mara Voss sailed the Kestrel. She carried copper."}


def test_parent_is_built_from_its_children_reports():
    comms, ents, rels = small_world()
    reports = {r["community_id"]: r for r in build_reports(comms, ents, rels, ReportConfig()).to_pylist()}
    root = next(c for c in comms.to_pylist() if c["children_ids"])
    child_sentences = sentences_of([reports[k]["summary"] for k in root["children_ids"]])
    assert segmentable(reports[root["community_id"]]["summary"], child_sentences)
    # rating: 0-10, growing with the number of supporting chunks
    assert all(0 <= r["rating"] <= 10 for r in reports.values())
    assert all(reports[root["community_id"]]["rating"] >= reports[k]["rating"] for k in root["children_ids"])


def test_max_sentences():
    comms, ents, rels = small_world()
    for r in build_reports(comms, ents, rels, ReportConfig(max_sentences=1)).to_pylist():
        assert len(_sentences(r["summary"])) == 1


def test_a_context_of_fewer_entities_than_the_findings_lead_with():
    comms, ents, rels = small_world()
    reports = build_reports(comms, ents, rels, ReportConfig(context_entities=1)).to_pylist()
    root = next(r for r in reports if len(r["entity_ids"]) == 1 and r["sub_community_ids"])
    findings = json.loads(root["findings"])
    assert findings[0]["summary"] == "Mara Voss (PERSON)"  # the most connected member, and only it
    assert not any(f["summary"].startswith(("Port Elling (", "Tobias Reed (", "Agnes Thorne (")) for f in findings)


def test_input_hash_changes_with_inputs_bottom_up():
    comms, ents, rels = small_world()
    before = {r["community_id"]: r["input_hash"] for r in build_reports(comms, ents, rels, ReportConfig()).to_pylist()}
    assert before == {r["community_id"]: r["input_hash"] for r in build_reports(comms, ents, rels, ReportConfig()).to_pylist()}
    rows = ents.to_pylist()
    for row in rows:
        if row["canonical_key"] == "agnes thorne":
            row["description"] = "Agnes Thorne called a vote."
    changed = pa.Table.from_pylist(rows, schema=ents.schema)
    after = {r["community_id"]: r["input_hash"] for r in build_reports(comms, changed, rels, ReportConfig()).to_pylist()}
    by_title = {r["title"]: r["community_id"] for r in build_reports(comms, ents, rels, ReportConfig()).to_pylist()}
    leaf_b, leaf_a = by_title["Port Elling and Agnes Thorne"], by_title["Mara Voss and Tobias Reed"]
    root = next(c["community_id"] for c in comms.to_pylist() if c["children_ids"])
    assert after[leaf_b] != before[leaf_b]
    assert after[root] != before[root]  # the parent's hash covers its children's
    assert after[leaf_a] == before[leaf_a]  # an unrelated community is untouched
    # a relationship's description is an input too
    rrows = rels.to_pylist()
    for row in rrows:
        if {row["source"], row["target"]} == {"Mara Voss", "Tobias Reed"}:
            row["description"] = "Mara Voss and Tobias Reed quarrelled."
    redescribed = build_reports(comms, ents, pa.Table.from_pylist(rrows, schema=rels.schema), ReportConfig()).to_pylist()
    assert {r["community_id"]: r["input_hash"] for r in redescribed}[leaf_a] != before[leaf_a]


def test_reports_on_the_indexed_corpus(indexed):
    store = indexed.store
    comms = store.read("communities").to_pylist()
    ent = {e["entity_id"]: e for e in store.read("entities").to_pylist()}
    rel = {r["relationship_id"]: r for r in store.read("relationships").to_pylist()}
    reports = {r["community_id"]: r for r in store.read("community_reports").to_pylist()}
    by_id = {c["community_id"]: c for c in comms}
    assert set(reports) == {c["community_id"] for c in comms if c["size"] >= 2}
    assert any(c["children_ids"] for c in comms), "the test corpus should give a hierarchy"
    for cid, report in reports.items():
        c = by_id[cid]
        assert report["level"] == c["level"]
        own = sentences_of([ent[e]["description"] for e in c["entity_ids"]] + [rel[r]["description"] for r in c["relationship_ids"]])
        # every sentence of every report is whole sentences of its own community's descriptions
        assert segmentable(report["summary"], own), (c["level"], report["summary"])
        kids = [reports[k] for k in c["children_ids"] if k in reports]
        if kids:  # bottom-up: a parent summarizes its children's reports
            assert segmentable(report["summary"], sentences_of([k["summary"] for k in kids]))


def test_reports_from_fetched_descriptions_equal_reports_from_whole_tables():
    """What the report stage reads at scale: only the descriptions used."""
    import pyarrow.compute as pc

    comms, ents, rels = small_world()
    extra = relationship("tobias reed", "port elling", "", 9.0)  # heaviest, but no description: never shown
    rels = pa.concat_tables([rels, pa.Table.from_pylist([extra], schema=rels.schema)])
    asked: list[list[str]] = []

    def descriptions(wanted):
        asked.append(sorted(wanted))
        return rels.filter(pc.is_in(rels.column("relationship_id"), pa.array(wanted))).select(["relationship_id", "description"])

    flagged = rels.select(["relationship_id", "source", "target", "weight"]).append_column(
        "described", pc.greater(pc.utf8_length(rels.column("description")), 0))
    for config in (ReportConfig(), ReportConfig(context_relationships=1, min_size=1)):
        assert build_reports(comms, ents, flagged, config, descriptions=descriptions).equals(build_reports(comms, ents, rels, config))
    assert asked and extra["relationship_id"] not in asked[0]


def test_each_description_is_split_once_per_build_and_only_up_to_its_lead(monkeypatch):
    """A description sits in one community's context per level; splitting it again at every
    level (and to its end) was half the report stage of a 145k-chunk update."""
    from graphwright.text import sentences

    comms, ents, rels = small_world()
    long_tail = " ".join(f"Sentence number {i} says little." for i in range(200))
    ents = ents.set_column(ents.schema.get_field_index("description"), "description",
                           pa.array([d + " " + long_tail for d in ents.column("description").to_pylist()]))
    expected = build_reports(comms, ents, rels, ReportConfig())
    calls, spans = [], [0]
    real = sentences.iter_sentences

    def counting(text):
        calls.append(text)
        for span in real(text):
            spans[0] += 1
            yield span

    monkeypatch.setattr(sentences, "iter_sentences", counting)
    assert build_reports(comms, ents, rels, ReportConfig()).equals(expected)
    described = [c for c in calls if long_tail in c]
    assert described and len(described) == len(set(described))  # the root and its leaves share members
    assert spans[0] < 200  # the 200 tail sentences of each description are never reached
