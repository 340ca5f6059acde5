"""LightRAG's own write path on a working directory (a graphwright export, or one LightRAG
builds itself): insert a new document, delete one by its file name, then query every mode.

Runs in the reference venv beside bench/reference_query.py (it imports neither graphwright nor
anything of ours; scripts/check-exports drives it):

    .venv-ref/bin/python bench/reference_write.py --lightrag WORKDIR \
        [--build a.txt b.txt] --insert new.txt --delete-file a.txt \
        --llm-base-url URL --embed-base-url URL --embed-model MODEL "question"

Prints one JSON object: the documents before and after, the deletion's result, the warnings
LightRAG logged while deleting (a missing extraction cache, a skipped rebuild) and, per query
mode, the warnings it logged while answering (a data inconsistency) and what its context held.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from reference_query import _offline_tokenizers, _Warnings, lightrag_queries, open_lightrag


async def documents(rag) -> dict[str, str]:
    """file path -> doc id, from LightRAG's document status store."""
    from lightrag.base import DocStatus

    found = await rag.doc_status.get_docs_by_statuses(list(DocStatus))
    return dict(sorted((doc.file_path, doc_id) for doc_id, doc in found.items()))


async def run(args) -> dict:
    rag = await open_lightrag(args.lightrag, args, enable_llm_cache=False)
    report: dict = {}
    try:
        if args.build:  # LightRAG indexes these itself, with its own ids
            await rag.ainsert([Path(f).read_text() for f in args.build], file_paths=[Path(f).name for f in args.build])
        report["documents_before"] = await documents(rag)
        if args.insert:
            await rag.ainsert(Path(args.insert).read_text(), file_paths=Path(args.insert).name)
        warnings = _Warnings()
        doc_id = report["documents_before"].get(args.delete_file)
        if doc_id is None:
            raise SystemExit(f"no document with file path {args.delete_file!r} in {args.lightrag}: {report['documents_before']}")
        status = await rag.doc_status.get_by_id(doc_id) or {}
        result = await rag.adelete_by_doc_id(doc_id)
        report.update(deleted=doc_id, deleted_chunks=status.get("chunks_list", []), delete_status=result.status, delete_status_code=result.status_code,
                      delete_message=result.message, delete_warnings=list(warnings.records))
        report["documents_after"] = await documents(rag)
        report["queries"] = [q for question in args.questions for q in await lightrag_queries(args.lightrag, question, args, rag=rag)]
    finally:
        await rag.finalize_storages()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("questions", nargs="+")
    parser.add_argument("--lightrag", type=Path, required=True, help="a LightRAG working directory (changed in place)")
    parser.add_argument("--build", nargs="*", default=[], help="documents LightRAG inserts first (an index it builds itself)")
    parser.add_argument("--insert", help="a new document to insert")
    parser.add_argument("--delete-file", required=True, help="the file path of the document to delete")
    parser.add_argument("--llm-base-url", required=True)
    parser.add_argument("--llm-model", default="graphwright-test")
    parser.add_argument("--embed-base-url", required=True)
    parser.add_argument("--embed-model", required=True)
    parser.add_argument("--api-key", default="not-needed")
    parser.add_argument("--dim", type=int, required=True)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--lightrag-modes", type=lambda s: s.split(","), default=["local", "global", "hybrid", "mix", "naive"])
    args = parser.parse_args()
    args.max_answer_tokens = args.max_context_tokens = None
    _offline_tokenizers()
    print(json.dumps(asyncio.run(run(args)), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
