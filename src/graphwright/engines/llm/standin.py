"""A CPU stand-in for an LLM that answers graphwright's own prompts at once and deterministically:
extraction with the `nlp` rules' findings, gleaning rounds with nothing more, community reports
citing every row they were given, global search's map and reduce steps, keyword extraction and
answers citing the first evidence. Tokens are counted as characters / 4.

It backs the tests' fake OpenAI-compatible server, and `app(config)` is a Ray Serve application
on the `vllm` engine's code path (`llm.serve_app: graphwright.engines.llm.standin:app`): the same
Serve start-up, route and client as vLLM replicas, on a laptop. Each replica it constructs is
logged to the file named by GRAPHWRIGHT_STANDIN_LOG, so that tests can count engine starts."""

# no `from __future__ import annotations` here: FastAPI must see the handler's Request annotation
# as a class, and it is imported inside app()
import json
import os
import re

ZERO_SCORE = "zero_score_markers"


def _tables(prompt: str) -> dict[str, list[list[str]]]:
    """The data tables of a report prompt: {name: [row fields]}."""
    tables, name = {}, None
    for line in prompt.splitlines():
        if line.startswith("-----") and line.endswith("-----"):
            name = line.strip("-")
            tables[name] = []
        elif name and line[:1].isdigit():
            tables[name].append(line.split("|"))
    return tables


def report(prompt: str) -> dict:
    """A GraphRAG-shaped report naming the prompt's first row, with one finding per row, each
    citing that row."""
    t = _tables(prompt)
    first = (t.get("Entities") or t.get("Reports") or [["0", "nothing"]])[0][1]
    findings = [{"summary": row[1], "explanation": f"{row[-1]} [Data: {name} ({row[0]})]"}
                for name in ("Entities", "Relationships", "Reports", "Sources") for row in t.get(name, [])]
    return {"title": f"Report on {first}",
            "summary": f"{len(t.get('Entities', []))} entities, {len(t.get('Relationships', []))} relationships, "
                       f"{len(t.get('Reports', []))} sub-community reports, {len(t.get('Sources', []))} sources.",
            "rating": 5, "rating_explanation": "fixed by the stand-in", "findings": findings}


def answer(messages: list[dict], zero_score_markers: tuple[str, ...] = ()) -> str:
    """The answer to a chat of graphwright's prompts."""
    from graphwright.config import ExtractConfig
    from graphwright.stages.extract.nlp import extract_chunk

    user = [m["content"] for m in messages if m["role"] == "user"]
    system = messages[0]["content"]
    if "Evidence:" in system:  # an answer request: cite the first evidence
        return f"The evidence says so [1]. (question: {user[-1]})"
    if system.startswith("You write a report about one community"):
        return json.dumps(report(user[0]))
    if "\nReports:\n" in system:  # a global map request: one point per report
        return json.dumps({"points": [
            {"description": f"Report {n} is about {title.strip()}", "reports": [int(n)],
             "score": 0 if any(m in title for m in zero_score_markers) else 50 + int(n)}
            for n, title in re.findall(r"\[Report (\d+)\] # ([^\n]*)", system)]})
    if "\nPoints:\n" in system:  # a global reduce request: cite every report the points cite
        cited = sorted({int(n) for group in re.findall(r"\[([\d, ]+)\]$", system, re.MULTILINE) for n in group.split(",")})
        return f"{len(system.splitlines()) - system.splitlines().index('Points:') - 1} points " + "".join(f"[{n}]" for n in cited)
    if "high_level_keywords" in system:  # keyword extraction: capitalized words are low-level keys
        return json.dumps({"high_level_keywords": ["travel"], "low_level_keywords": re.findall(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*", user[-1])})
    if len(user) > 1:  # a gleaning round: nothing more to add
        return json.dumps({"entities": [], "relationships": []})
    mentions, assertions = extract_chunk(user[0], ExtractConfig())
    return json.dumps({
        "entities": [{"name": m["name"], "type": m["type"] if m["type"] != "ENTITY" else "CONCEPT", "description": m["description"]}
                     for m in mentions],
        "relationships": [{"source": a["source"], "target": a["target"], "description": a["description"] or "co-occur",
                           "strength": min(10, a["weight"] * 2)} for a in assertions],
    })


def completion(body: dict, content: str) -> dict:
    """An OpenAI chat.completion object for `content`."""
    prompt = sum(len(m["content"]) for m in body["messages"] if isinstance(m.get("content"), str)) // 4
    return {
        "id": "standin", "object": "chat.completion", "model": body.get("model", ""),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": len(content) // 4, "total_tokens": prompt + len(content) // 4},
    }


def app(config):
    """A Ray Serve application of `config.replicas` stand-in replicas behind an OpenAI route."""
    from fastapi import FastAPI, Request
    from ray import serve

    api = FastAPI()

    @serve.deployment(num_replicas=config.replicas, ray_actor_options={"num_cpus": 0.1},
                      max_ongoing_requests=max(config.concurrency, config.batch_size) * 4)
    @serve.ingress(api)
    class StandIn:
        def __init__(self, log: str | None):
            if log:  # one line per replica started: what the tests count
                with open(log, "a") as f:
                    f.write(f"{os.getpid()}\n")

        @api.post("/v1/chat/completions")
        async def chat(self, request: Request) -> dict:
            body = await request.json()
            return completion(body, answer(body["messages"]))

    return StandIn.bind(os.environ.get("GRAPHWRIGHT_STANDIN_LOG"))
