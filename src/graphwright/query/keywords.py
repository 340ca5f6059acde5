"""Query keywords for the LightRAG modes: low-level keys (specific entities, names, details) and
high-level keys (themes, relations, concepts).

With an LLM: LightRAG's keyword extraction prompt, through the answer cache. Without one: the names
in the question (the extractor's name finder) and the entity names or aliases that occur in it as
word n-grams are the low-level keys; the question's remaining content words are the high-level
key (LightRAG embeds the joined keywords as one query, so a phrase serves)."""

from __future__ import annotations

import re

from graphwright.engines.llm.interface import LLMRequest
from graphwright.query.llm_calls import complete
from graphwright.stages.extract.nlp import _NOT_NAMES, find_names
from graphwright.stages.extract.parse import ParseError, loads_lenient
from graphwright.text.names import normalize_name

PROMPT_VERSION = "keywords-v1"
SYSTEM = """Identify keywords in the user's question, for retrieval from a knowledge graph.
high_level_keywords: overarching concepts, themes or relations the question is about.
low_level_keywords: specific entities, names, places, things or details in the question.
Reply with JSON only: {"high_level_keywords": ["..."], "low_level_keywords": ["..."]}"""
SCHEMA = {
    "type": "object",
    "properties": {"high_level_keywords": {"type": "array", "items": {"type": "string"}},
                   "low_level_keywords": {"type": "array", "items": {"type": "string"}}},
    "required": ["high_level_keywords", "low_level_keywords"],
}
_QUESTION_WORDS = {"name", "named", "known", "which", "what", "who", "whom", "type", "kind", "year"}


def extract_keywords(searcher, question: str, use_llm: bool | None = None) -> dict:
    """{"low": [...], "high": [...], "source": "llm" | "question"}."""
    llm = searcher.llm
    if use_llm or (use_llm is None and llm.model):
        request = LLMRequest(messages=(("system", SYSTEM), ("user", question)), json_schema=SCHEMA,
                             max_tokens=min(llm.max_tokens, 200), temperature=llm.temperature, prompt_version=PROMPT_VERSION)
        ((_, response, hit),) = complete(searcher, [request])
        if response.ok:
            try:
                data = loads_lenient(response.text)
            except ParseError:
                data = None
            if isinstance(data, dict):
                low = [str(k) for k in data.get("low_level_keywords") or [] if str(k).strip()]
                high = [str(k) for k in data.get("high_level_keywords") or [] if str(k).strip()]
                if low or high:
                    return {"low": low, "high": high, "source": "llm", "cache_hit": hit}
    return question_keywords(searcher, question)


def question_keywords(searcher, question: str) -> dict:
    names = [n["surface"] for n in find_names(question)[0]]
    known = _longest_known_ngrams(searcher, question)
    low = list(dict.fromkeys(names + known))
    taken = {w.casefold() for k in low for w in re.findall(r"\w+", k)}
    content = [w for w in re.findall(r"[\w'’\-]+", question)
               if w.casefold() not in _NOT_NAMES and w.casefold() not in _QUESTION_WORDS and w.casefold() not in taken and len(w) > 2]
    return {"low": low, "high": [" ".join(content)] if content else [], "source": "question"}


def _longest_known_ngrams(searcher, question: str) -> list[str]:
    """Word n-grams of the question that are entity names or aliases, longest first, dropping
    those inside a longer one."""
    words = re.findall(r"[\w'’&\-.]+", question)
    spans = []
    for n in range(min(6, len(words)), 0, -1):
        for i in range(len(words) - n + 1):
            phrase = " ".join(words[i:i + n])
            if phrase.casefold() in _NOT_NAMES or (n == 1 and len(phrase) < 4):
                continue
            if normalize_name(phrase) in searcher.alias_index and not any(a <= i and i + n <= b for a, b, _ in spans):
                spans.append((i, i + n, phrase))
    return [p for _, _, p in sorted(spans)]
