"""Deterministic answers to the prompts of the reference engines (graphrag 3.3, lightrag-hku 1.5),
for tests/fake_openai.py: so that they can index, update, insert, delete and query offline.

- Extraction (graphrag's tuple records, LightRAG's "<|#|>" records) answers with what our `nlp`
  extractor finds in the passage, so an index either engine builds itself holds the same names
  as ours (graphrag uppercases them itself); gleaning rounds add nothing.
- Summaries join the descriptions they were given; graphrag's community reports name the first
  entity of their context.
- Query prompts (GraphRAG's local, global map and reduce, DRIFT primer, steps and reduce, basic;
  LightRAG's keywords and answers) answer by quoting the start of the context the engine put in
  the prompt, so a test can see which rows reached the LLM.
"""

from __future__ import annotations

import csv
import io
import json
import re

from graphwright.config import ExtractConfig
from graphwright.exports.relations import description as relation_description
from graphwright.exports.relations import keywords as relation_keywords
from graphwright.stages.extract.nlp import extract_chunk

# where the reference engines put their retrieved context in a prompt
CONTEXT_MARKERS = ("---Data tables---", "---Analyst Reports---", "---Data Reports---", "---Context---")
GRAPHRAG_TEXT = re.compile(r"-Real Data-.*?\nText: (.*?)\n#{6,}\nOutput:", re.S)
LIGHTRAG_TEXT = re.compile(r"---Input Text---\n```\n(.*?)\n```", re.S)


def _extraction(text: str):
    mentions, assertions = extract_chunk(text, ExtractConfig())
    types = {m["name"]: m["type"] for m in mentions}
    for a in assertions:
        names = (a["source"], a["target"])
        a["keywords"] = relation_keywords([a["description"]], names, (types.get(a["source"], ""), types.get(a["target"], "")))
        a["description"] = relation_description(a["description"], names, 1)
    return mentions, assertions


def graphrag_extraction(text: str) -> str:
    mentions, assertions = _extraction(text)
    rows = [f'("entity"<|>{m["name"]}<|>{m["type"]}<|>{m["description"]})' for m in mentions]
    rows += [f'("relationship"<|>{a["source"]}<|>{a["target"]}<|>{a["description"]}<|>{a["weight"]:g})' for a in assertions]
    return "\n##\n".join(rows + ["<|COMPLETE|>"])


def lightrag_extraction(text: str) -> str:
    mentions, assertions = _extraction(text)
    # LightRAG's prompt asks for 'Other' where no type applies (our ENTITY)
    rows = [f"entity<|#|>{m['name']}<|#|>{'Other' if m['type'] == 'ENTITY' else m['type'].title()}<|#|>{m['description']}"
            for m in mentions]
    rows += [f"relation<|#|>{a['source']}<|#|>{a['target']}<|#|>{a['keywords']}<|#|>{a['description']}" for a in assertions]
    return "\n".join(rows + ["<|COMPLETE|>"])


def _graphrag_report(text: str) -> str:
    context = text.rsplit("Text:\n", 1)[-1]
    first = "the community"
    if "-----Entities-----" in context:
        rows = list(csv.reader(io.StringIO(context.split("-----Entities-----", 1)[1].strip())))
        if len(rows) > 1 and len(rows[1]) > 1:
            first = rows[1][1]
    return json.dumps({"title": f"Report on {first}", "summary": f"A community around {first}.", "rating": 5.0,
                       "rating_explanation": "fixed by the fake server",
                       "findings": [{"summary": first, "explanation": " ".join(context.split())[:300]}]})


def _summary(text: str) -> str:
    if "Description List:\n" in text and "```" in text:  # LightRAG: one JSON object per line
        block = text.split("Description List:", 1)[1].split("```")[1]
        parts = []
        for line in block.splitlines():
            try:
                parts.append(json.loads(line).get("description", ""))
            except (ValueError, AttributeError):
                parts.append(line.strip())
        return " ".join(p for p in parts if p)
    listed = text.split("Description List:", 1)[1].split("#######")[0].strip()  # graphrag: a JSON list
    try:
        return " ".join(json.loads(listed))
    except ValueError:
        return listed


def reference_answer(messages: list[dict]) -> str | None:
    text = "\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))
    last = messages[-1]["content"] if messages and isinstance(messages[-1].get("content"), str) else ""
    if "MANY entities and relationships were missed" in last or "Based on the last extraction task" in last:
        return "<|COMPLETE|>"  # a gleaning round (graphrag, LightRAG)
    if "Answer Y if there are still entities" in last:
        return "N"
    if (found := GRAPHRAG_TEXT.search(text)) and "-Goal-" in text:
        return graphrag_extraction(found.group(1))
    if (found := LIGHTRAG_TEXT.search(last)) and "Knowledge Graph Specialist" in text:
        return lightrag_extraction(found.group(1))
    if "Description List:" in text and ("comprehensive summary" in text or "synthesize a list of descriptions" in text):
        return _summary(text)
    if "Write a comprehensive report of a community" in text:
        return _graphrag_report(text)
    if "high_level_keywords" in text and "User Query:" in text:  # LightRAG keyword extraction
        query = text.rsplit("User Query:", 1)[1].strip().splitlines()[0]
        words = re.findall(r"[A-Za-z][\w-]*", query.replace("\u2019s", "").replace("'s", ""))
        low = [w for w in words if w[0].isupper() and w.lower() not in {"who", "what", "where", "when", "why", "how", "which"}]
        high = [w.lower() for w in words if len(w) > 3 and w not in low]
        return json.dumps({"high_level_keywords": high or [query], "low_level_keywords": low or [query]})
    if "The top-ranked community summaries:" in text:  # DRIFT's primer
        reports = " ".join(text.split("The top-ranked community summaries:", 1)[1].split())[:400]
        query = text.split("For the query:", 1)[1].split("The top-ranked", 1)[0].strip()
        return json.dumps({"intermediate_answer": f"According to the reports: {reports}", "score": 80, "follow_up_queries": [query]})
    marker = next((m for m in CONTEXT_MARKERS if m in text), None)
    if marker is None:
        return None
    quote = " ".join(text.split(marker, 1)[1].split())[:400]
    if '"points"' in text:  # GraphRAG global search, map step: JSON points with scores
        return json.dumps({"points": [{"description": f"The reports say: {quote} [Data: Reports (0)]", "score": 80}]})
    if "'follow_up_queries'" in text:  # a DRIFT step
        return json.dumps({"response": f"According to the context: {quote}", "score": 80, "follow_up_queries": []})
    return f"According to the context: {quote}"
