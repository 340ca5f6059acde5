"""Query a graphwright export with the reference engines' own query code.

Runs in a separate environment holding graphrag 3.3 and lightrag-hku 1.5 (it imports neither
graphwright nor anything of ours):

    python3.11 -m venv .venv-ref
    .venv-ref/bin/pip install graphrag==3.3.0 lightrag-hku==1.5.7   # or scripts/check-exports builds it
    .venv-ref/bin/python bench/reference_query.py \
        --graphrag INDEX/exports/graphrag/v1 --lightrag INDEX/exports/lightrag/v1 \
        --llm-base-url http://127.0.0.1:8089/v1 --llm-model qwen \
        --embed-base-url http://127.0.0.1:8091/v1 --embed-model all-MiniLM-L6-v2 \
        "Who is Scrooge's nephew?"

The LLM is any OpenAI-compatible server; the embeddings must come from the model that embedded
the export (`python -m graphwright.exports.embed_server --index INDEX` serves it). Prints, per
engine and mode (graphrag: local, global, drift, basic; LightRAG: local, global, hybrid, mix,
naive), the answer and the context the engine built (entities, relationships, reports, text
units; LightRAG's warnings), as one JSON object per line with --json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from functools import partial
from pathlib import Path


def _offline_tokenizers() -> None:
    """tiktoken downloads its encodings on first use; litellm ships cl100k/o200k in its wheel."""
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        import importlib.util

        spec = importlib.util.find_spec("litellm")
        if spec and spec.origin:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(Path(spec.origin).parent / "litellm_core_utils" / "tokenizers")


def _records(frame, columns: list[str], limit: int = 10) -> list[dict]:
    if frame is None or not hasattr(frame, "columns"):
        return []
    present = [c for c in columns if c in frame.columns]
    return frame[present].head(limit).astype(str).to_dict(orient="records")


_CONTEXT_COLUMNS = {"entities": ["id", "entity", "description"], "relationships": ["id", "source", "target", "description"],
                    "reports": ["id", "title"], "sources": ["id", "text"]}


def _graphrag_context(context) -> dict[str, list[dict]]:
    """The tables a graphrag search put in its prompts (for DRIFT, every step's), by name."""
    out: dict[str, list[dict]] = {}

    def visit(value, name: str) -> None:
        if hasattr(value, "columns"):
            out.setdefault(name, []).extend(_records(value, _CONTEXT_COLUMNS.get(name, list(value.columns)), limit=50))
        elif isinstance(value, dict):
            for key, item in value.items():
                visit(item, key)
        elif isinstance(value, list | tuple):
            for item in value:
                visit(item, name)

    visit(context, "context")
    return out


async def graphrag_queries(root: Path, question: str, args) -> list[dict]:
    import pandas as pd
    from graphrag import api
    from graphrag.config.load_config import load_config

    os.environ.update({"GRAPHRAG_API_BASE": args.llm_base_url, "GRAPHRAG_COMPLETION_MODEL": args.llm_model,
                       "GRAPHRAG_EMBEDDING_API_BASE": args.embed_base_url, "GRAPHRAG_API_KEY": args.api_key,
                       "GRAPHRAG_EMBEDDING_API_KEY": args.api_key})
    if args.embed_model:
        os.environ["GRAPHRAG_EMBEDDING_MODEL"] = args.embed_model
    cwd = os.getcwd()
    os.chdir(root)  # settings.yaml names output/ relative to the project root
    try:
        config = load_config(root)
        if args.max_answer_tokens:
            config.completion_models["default_completion_model"].call_args["max_tokens"] = args.max_answer_tokens
        if args.max_context_tokens:  # a small local model's context window
            config.local_search.max_context_tokens = args.max_context_tokens
            config.global_search.max_context_tokens = config.global_search.data_max_tokens = args.max_context_tokens
            config.global_search.map_max_length = config.global_search.reduce_max_length = 300
        tables = {name: pd.read_parquet(root / "output" / f"{name}.parquet")
                  for name in ("entities", "communities", "community_reports", "text_units", "relationships")}
        graph = {"entities": tables["entities"], "communities": tables["communities"], "community_reports": tables["community_reports"]}
        with_text = {**graph, "text_units": tables["text_units"], "relationships": tables["relationships"]}
        searches = {
            "local": lambda: api.local_search(config=config, **with_text, covariates=None, community_level=args.community_level,
                                              response_type="Single Paragraph", query=question),
            "global": lambda: api.global_search(config=config, **graph, community_level=args.community_level,
                                                dynamic_community_selection=False, response_type="Single Paragraph", query=question),
            "drift": lambda: api.drift_search(config=config, **with_text, community_level=args.community_level,
                                              response_type="Single Paragraph", query=question),
            "basic": lambda: api.basic_search(config=config, text_units=tables["text_units"], response_type="Single Paragraph",
                                              query=question),
        }
        out = []
        for method in args.graphrag_methods:
            answer, context = await searches[method]()
            out.append({"engine": "graphrag", "mode": method, "question": question, "answer": answer,
                        "context": _graphrag_context(context)})
        return out
    finally:
        os.chdir(cwd)


class _Warnings:
    """LightRAG's warnings while it answers (a 'data inconsistency' one among them)."""

    def __init__(self):
        self.records: list[str] = []
        self.handler = logging.Handler(logging.WARNING)
        self.handler.emit = lambda record: self.records.append(record.getMessage())
        logging.getLogger("lightrag").addHandler(self.handler)


async def open_lightrag(working_dir: Path, args, **options):
    """A LightRAG on `working_dir` whose LLM and embeddings are the given OpenAI-compatible endpoints."""
    from lightrag import LightRAG
    from lightrag.llm.openai import openai_complete_if_cache, openai_embed
    from lightrag.utils import EmbeddingFunc

    async def llm(prompt, system_prompt=None, history_messages=None, **kwargs):
        kwargs.pop("keyword_extraction", None)
        if args.max_answer_tokens:
            kwargs["max_tokens"] = args.max_answer_tokens
        return await openai_complete_if_cache(args.llm_model, prompt, system_prompt=system_prompt,
                                              history_messages=history_messages or [], base_url=args.llm_base_url,
                                              api_key=args.api_key, **kwargs)

    embedding = EmbeddingFunc(embedding_dim=args.dim, max_token_size=256,
                              func=partial(openai_embed.func, model=args.embed_model, base_url=args.embed_base_url, api_key=args.api_key))
    rag = LightRAG(working_dir=str(working_dir), llm_model_func=llm, llm_model_name=args.llm_model, embedding_func=embedding, **options)
    await rag.initialize_storages()
    return rag


async def lightrag_queries(working_dir: Path, question: str, args, rag=None) -> list[dict]:
    from lightrag import QueryParam

    owned = rag is None
    rag = rag or await open_lightrag(working_dir, args, enable_llm_cache=False)
    warnings = _Warnings()
    out = []
    try:
        for mode in args.lightrag_modes:
            param = QueryParam(mode=mode, top_k=args.top_k, chunk_top_k=5, enable_rerank=False, response_type="Single Paragraph")
            if args.max_context_tokens:
                param.max_total_tokens = args.max_context_tokens
                param.max_entity_tokens = param.max_relation_tokens = args.max_context_tokens // 4
            seen = len(warnings.records)
            result = await rag.aquery_llm(question, param=param)
            data = result.get("data") or {}
            out.append({"engine": "lightrag", "mode": mode, "question": question,
                        "answer": (result.get("llm_response") or {}).get("content"),
                        "keywords": (result.get("metadata") or {}).get("keywords"),
                        "warnings": warnings.records[seen:],
                        "context": {
                            "entities": [{"entity": e.get("entity_name"), "description": (e.get("description") or "")[:200]} for e in data.get("entities", [])],
                            "relationships": [{"source": r.get("src_id"), "target": r.get("tgt_id")} for r in data.get("relationships", [])],
                            "chunks": [{"chunk_id": c.get("chunk_id"), "text": (c.get("content") or "")[:300]} for c in data.get("chunks", [])]}})
    finally:
        logging.getLogger("lightrag").removeHandler(warnings.handler)
        if owned:
            await rag.finalize_storages()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("questions", nargs="+")
    parser.add_argument("--graphrag", type=Path, help="a graphwright graphrag export (holds settings.yaml)")
    parser.add_argument("--lightrag", type=Path, help="a graphwright lightrag export (a LightRAG working directory)")
    parser.add_argument("--llm-base-url", required=True)
    parser.add_argument("--llm-model", default="graphwright-test")
    parser.add_argument("--embed-base-url", required=True)
    parser.add_argument("--embed-model", default="all-MiniLM-L6-v2")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "not-needed"))
    parser.add_argument("--dim", type=int, help="embedding dimension (default: read from the lightrag export)")
    parser.add_argument("--community-level", type=int, default=2)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--max-answer-tokens", type=int, help="cap each LLM answer (a small model may not stop)")
    parser.add_argument("--max-context-tokens", type=int, help="cap the context both engines build (for a small local model)")
    parser.add_argument("--graphrag-methods", type=lambda s: s.split(","), default=["local", "global", "drift", "basic"],
                        help="comma-separated: local,global,drift,basic")
    parser.add_argument("--lightrag-modes", type=lambda s: s.split(","), default=["local", "global", "hybrid", "mix", "naive"],
                        help="comma-separated: local,global,hybrid,mix,naive")
    parser.add_argument("--json", action="store_true", help="one JSON object per answer")
    args = parser.parse_args()
    if not args.graphrag and not args.lightrag:
        parser.error("give --graphrag and/or --lightrag")
    if args.lightrag and args.dim is None:
        args.dim = json.loads((args.lightrag / "vdb_entities.json").read_text())["embedding_dim"]
    _offline_tokenizers()

    async def run() -> list[dict]:
        results = []
        for question in args.questions:
            if args.graphrag:
                results += await graphrag_queries(args.graphrag.resolve(), question, args)
            if args.lightrag:
                results += await lightrag_queries(args.lightrag.resolve(), question, args)
        return results

    for r in asyncio.run(run()):
        if args.json:
            print(json.dumps(r, ensure_ascii=False), flush=True)
        else:
            print(f"=== {r['engine']} {r['mode']}: {r['question']}\n--- answer\n{r['answer']}\n--- context")
            print(json.dumps(r["context"], ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
