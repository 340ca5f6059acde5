import hashlib
import re

import pyarrow as pa
import pytest

from graphwright import ids


def test_stable_id_recipe_is_pinned():
    # the id must not change between releases: a changed recipe would orphan every stored row
    expected = hashlib.sha256(b"doc" + b"\x1f" + b"a.txt").hexdigest()[:24]
    assert ids.stable_id("doc", "a.txt") == expected
    assert ids.doc_id("a.txt") == expected


def test_stable_id_is_deterministic_hex_of_requested_length():
    a = ids.stable_id("kind", "x", 1, 2.5)
    assert a == ids.stable_id("kind", "x", 1, 2.5)
    assert re.fullmatch(r"[0-9a-f]{24}", a)
    assert len(ids.stable_id("kind", "x", length=32)) == 32
    assert ids.stable_id("kind", "x", length=32).startswith(ids.stable_id("kind", "x"))


@pytest.mark.parametrize(
    "left, right",
    [
        (("a", "x"), ("b", "x")),  # kind matters
        (("a", "x"), ("a", "y")),  # parts matter
        (("a", "x", "y"), ("a", "y", "x")),  # order matters
        (("a", "ab", "c"), ("a", "a", "bc")),  # parts are separated, not concatenated
        (("a", "x"), ("a", "x", "")),  # an extra empty part matters
    ],
)
def test_stable_id_distinguishes_inputs(left, right):
    assert ids.stable_id(*left) != ids.stable_id(*right)


def test_content_hash_is_sha256_of_utf8():
    assert ids.content_hash("Zoë") == hashlib.sha256("Zoë".encode()).hexdigest()


def test_doc_ids_differ_by_source_key():
    assert ids.doc_id("a.txt") != ids.doc_id("b.txt")
    assert ids.doc_id("notes/a.txt") != ids.doc_id("a.txt")


def test_chunk_id_depends_on_doc_text_and_occurrence():
    base = ids.chunk_id("d1", "some text")
    assert base == ids.chunk_id("d1", "some text", 0)
    assert base != ids.chunk_id("d1", "some text", 1)  # the same text repeated in one document
    assert base != ids.chunk_id("d2", "some text")  # the same text in another document
    assert base != ids.chunk_id("d1", "other text")
    assert len({ids.chunk_id("d1", "t", k) for k in range(50)}) == 50


def test_relationship_id_is_symmetric():
    assert ids.relationship_id("e1", "e2") == ids.relationship_id("e2", "e1")
    assert ids.relationship_id("e1", "e2") != ids.relationship_id("e1", "e3")
    assert ids.relationship_id("e1", "e2") != ids.entity_id("e1")


def test_community_id_ignores_member_order_but_not_level():
    members = ["e3", "e1", "e2"]
    assert ids.community_id(0, members) == ids.community_id(0, sorted(members))
    assert ids.community_id(0, iter(members)) == ids.community_id(0, members)
    assert ids.community_id(0, members) != ids.community_id(1, members)
    assert ids.community_id(0, members) != ids.community_id(0, members[:2])


def test_entity_id_derives_from_canonical_key_only():
    assert ids.entity_id("scrooge") == ids.entity_id("scrooge")
    assert ids.entity_id("scrooge") != ids.entity_id("marley")


def test_stable_id_of_strings_equals_stable_id_of_the_same_values():
    # the vector and lexical file names of existing indexes must not change with the faster digest

    values = ["", "a", "é漢", "x\x1fy", "Port Elling", "0" * 300] * 50
    column = pa.chunked_array([pa.array(values[:7]), pa.array([], pa.string()), pa.array(values[7:])])
    assert ids.stable_id_of_strings("lexical", (3, "chunk"), column, 16) == ids.stable_id_of("lexical", (3, "chunk", *values), 16)
    assert ids.stable_id_of_strings("k", (), pa.array(values).slice(5, 40)) == ids.stable_id_of("k", values[5:45])
    assert ids.stable_id_of_strings("k", (), pa.array([], pa.string())) == ids.stable_id("k")
    with pytest.raises(ValueError, match="nulls"):
        ids.stable_id_of_strings("k", (), pa.array(["a", None]))


def test_stable_id_of_columns_depends_on_the_values_alone_and_cuts_them_unambiguously():

    values = ["", "a", "é漢", "x\x1fy", "Port Elling", "0" * 300] * 50
    whole = ids.stable_id_of_columns("k", (1,), [pa.array(values), pa.array(values[::-1])])
    chunked = pa.chunked_array([pa.array(values[:7]), pa.array([], pa.string()), pa.array(values[7:])])
    sliced = pa.array(["pad"] + values + ["pad"]).slice(1, len(values))
    assert ids.stable_id_of_columns("k", (1,), [chunked, pa.array(values[::-1], pa.large_string())]) == whole
    assert ids.stable_id_of_columns("k", (1,), [sliced, pa.array(values[::-1])]) == whole
    # the same bytes cut into other values, or moved to the other column, are other items
    assert ids.stable_id_of_columns("k", (), [pa.array(["ab", "c"])]) != ids.stable_id_of_columns("k", (), [pa.array(["a", "bc"])])
    assert ids.stable_id_of_columns("k", (), [pa.array(["a"]), pa.array(["b"])]) != \
        ids.stable_id_of_columns("k", (), [pa.array(["a", "b"]), pa.array([], pa.string())])
    assert ids.stable_id_of_columns("k", (2,), [pa.array(values)]) != ids.stable_id_of_columns("k", (1,), [pa.array(values)])
    with pytest.raises(ValueError, match="nulls"):
        ids.stable_id_of_columns("k", (), [pa.array(["a", None])])


def test_ids_are_coded_alike_whichever_way_their_array_is_coded():
    """The kept calls name chunks and prompts by 64-bit codes: an id's code is its own, whether its
    array takes the strided path (one width, all hex) or each id's, and distinct ids differ."""
    hexes = ["4b9f661a5207e8a758b89374", "c755b6c52f9b8a9468d255c0", "00000000000000010000abcd", "ffffffffffffffff00000000"]
    strided = ids.id_codes(pa.array(hexes)).to_pylist()
    one_by_one = ids.id_codes(pa.array([*hexes, "chunk-a", "4b9f661a5207e8a7"])).to_pylist()
    assert one_by_one[:4] == strided and one_by_one[5] == strided[0]  # the first 16 digits are the code
    assert strided[2] == 1 and strided[3] == -1
    assert len(set(one_by_one[:5])) == 5
    assert ids.id_codes(pa.chunked_array([pa.array(["chunk-a"]), pa.array(["chunk-b"])])).to_pylist() == \
        ids.id_codes(pa.array(["chunk-a", "chunk-b"], pa.large_string())).to_pylist()
    assert ids.id_codes(pa.array(hexes).slice(1)).to_pylist() == strided[1:]  # an offset into the buffers
    assert ids.id_codes(pa.array([h.upper() for h in hexes], pa.large_string())).to_pylist() == strided
    spaced = ids.id_codes(pa.array(["4b9f 661a5207e8a758b8937", hexes[1]])).to_pylist()
    assert spaced[1] == strided[1] and spaced[0] not in strided  # a space is no hex digit, on either path
    assert ids.id_codes(pa.array([hexes[0], None])).to_pylist() == [strided[0], None]
