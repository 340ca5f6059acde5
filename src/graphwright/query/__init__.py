"""Query a published version. Modes (one module each):

- `naive`: vector search over chunks;
- `fusion` (fusion.py): BM25 and vector search over chunks, merged by reciprocal rank;
- `local` (local.py): entities, relationships, text units and reports within a token budget;
- `global` (global_search.py): map-reduce over the community reports of one level;
- `low`, `high`, `hybrid`, `mix` (lightrag.py): LightRAG's keyword-driven entity and relation search;
- `graph` (graph.py): HippoRAG 2-style personalized PageRank over entities and passages, seeded by
  the facts, names and passages the question matches (graph_seeds.py), optionally Steiner-pruned.

`graph` and `local` take `steps`: IRCoT-style iterative retrieval with the LLM (ircot.py).

Every mode returns `evidence` (ranked, each with doc_id and chunk_id provenance) plus its own context.
"""

from __future__ import annotations

from graphwright.query.searcher import MODES, Searcher

__all__ = ["MODES", "Searcher", "query"]


def query(index_dir: str, question: str, mode: str = "local", top_k: int | None = None, version: int | None = None,
          answer: bool | None = None, level: int | None = None, searcher: Searcher | None = None, steps: int = 0) -> dict:
    """Evidence for `question`; with an LLM configured (llm.model, from the index's configuration
    or GRAPHWRIGHT_LLM__* variables) and `answer` not False, also an answer citing it. `level`:
    the community level for `global` (default: query.global_level, or a level chosen from the data).
    `steps`: iterative retrieval (graph, local) with at most that many LLM reasoning steps.
    A caller answering many questions passes a loaded `searcher` (of `index_dir` at `version`)."""
    _check_question(question)
    searcher = searcher or Searcher(index_dir, version)
    llm = searcher.llm
    if answer and not llm.model:
        raise ValueError("no LLM configured for answers: set llm.model (or GRAPHWRIGHT_LLM__MODEL and GRAPHWRIGHT_LLM__BASE_URL)")
    use_llm = bool(llm.model) and answer is not False
    options = {"level": level if level is not None else searcher.config.query.global_level} if mode == "global" else {}
    if steps:
        options["steps"] = steps
    result = searcher.attach_titles(searcher.search(question, mode, top_k, use_llm=use_llm, **options))
    if use_llm and mode != "global":  # global's answer is its reduce step
        from graphwright.query.answer import synthesize

        result = synthesize(question, result, llm, searcher.index.store)
    return result



def _check_question(question: str) -> None:
    """ValueError for a question no tokenizer or LLM can take: empty, or not valid Unicode (a
    lone surrogate, as JSON's "\\ud800" or an undecodable command-line byte gives)."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the question is empty")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"the question is not valid Unicode: a lone surrogate \\u{ord(question[exc.start]):04x} at "
                         f"character {exc.start}; send UTF-8 text") from None
