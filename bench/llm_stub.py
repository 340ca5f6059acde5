"""An OpenAI-compatible server that answers graphwright's own prompts at once, cheaply enough not
to be what a benchmark measures: an extraction prompt gets the capitalized names of its chunk
(at most 8, typed by a cue word) and a relationship between each name and the next; a gleaning
round gets nothing more; a community report prompt gets a report citing its first rows. aiohttp
on one event loop; the request count is printed on exit.

    python bench/llm_stub.py PORT
"""

from __future__ import annotations

import json
import re
import sys

from aiohttp import web

NAME = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*")
ORG_WORDS = ("Holdings", "Institute", "Foundation", "Labs", "Partners", "Council", "Works", "Trust", "Society", "Company")
STOP = {"The", "In", "Later", "A", "An", "It", "He", "She", "They", "This", "That"}


def extraction(chunk: str) -> dict:
    names = []
    for m in NAME.finditer(chunk):
        name = m.group(0)
        if name.split()[0] in STOP:
            name = " ".join(name.split()[1:])
        if name and name not in names:
            names.append(name)
        if len(names) == 8:
            break
    kind = lambda n: "ORGANIZATION" if n.split()[-1] in ORG_WORDS else ("PERSON" if " " in n else "GEO")  # noqa: E731
    return {
        "entities": [{"name": n, "type": kind(n), "description": f"{n} is named in the passage."} for n in names],
        "relationships": [{"source": a, "target": b, "description": f"{a} and {b} appear together.", "strength": 5}
                          for a, b in zip(names, names[1:])],
    }


def report(prompt: str) -> dict:
    rows = [line.split("|") for line in prompt.splitlines() if line[:1].isdigit()][:6]
    first = rows[0][1] if rows and len(rows[0]) > 1 else "nothing"
    return {"title": f"Report on {first}", "summary": f"{len(rows)} rows shown.", "rating": 5.0,
            "rating_explanation": "stub", "findings": [{"summary": r[1] if len(r) > 1 else r[0],
                                                         "explanation": f"[Data: Entities ({r[0]})]"} for r in rows]}


COUNT = {"requests": 0}


async def chat(request: web.Request) -> web.Response:
    body = await request.json()
    COUNT["requests"] += 1
    messages = body["messages"]
    system, users = messages[0]["content"], [m["content"] for m in messages if m["role"] == "user"]
    if system.startswith("You write a report about one community"):
        content = json.dumps(report(users[0]))
    elif len(users) > 1:
        content = '{"entities": [], "relationships": []}'
    else:
        content = json.dumps(extraction(users[-1]))
    prompt = sum(len(m["content"]) for m in messages) // 4
    return web.json_response({"id": "stub", "object": "chat.completion", "model": body.get("model", ""),
                              "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": prompt, "completion_tokens": len(content) // 4}})


def main() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    app = web.Application(client_max_size=16 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    try:
        web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
    finally:
        print(json.dumps(COUNT), flush=True)


if __name__ == "__main__":
    main()
