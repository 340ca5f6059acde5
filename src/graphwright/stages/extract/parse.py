"""Parse an LLM's extraction answer, tolerating and repairing the usual defects: code fences,
prose around the object, trailing commas, a truncated tail, single quotes, missing fields,
relationships whose endpoints were not listed as entities."""

from __future__ import annotations

import json
import re

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


class ParseError(ValueError):
    pass


def _scan(text: str) -> tuple[list[str], bool, int]:
    """Closers still open at the end, whether a string is open, and the end of the last complete
    item (after a closing bracket, or before a comma)."""
    stack, in_string, escaped, last_complete = [], False, False, 0
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}":
            if stack:
                stack.pop()
            last_complete = i + 1
        elif ch == ",":
            last_complete = i
    return stack, in_string, last_complete


def _close_truncated(text: str) -> str:
    """Close the brackets and string a cut-off answer left open (drop a half-written item)."""
    stack, in_string, last_complete = _scan(text)
    if not stack and not in_string:
        return text
    head = text[:last_complete].rstrip().rstrip(",")
    return head + "".join(reversed(_scan(head)[0]))


def loads_lenient(text: str) -> object:
    if text is None or not text.strip():
        raise ParseError("empty answer")
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text
    start = min((i for i in (body.find("{"), body.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise ParseError(f"no JSON object in answer: {text[:80]!r}")
    body = body[start:]
    attempts = [body, _TRAILING_COMMA.sub(r"\1", body)]
    attempts.append(_close_truncated(attempts[-1]))
    attempts.append(_TRAILING_COMMA.sub(r"\1", attempts[-1]))
    attempts.append(attempts[-1].replace("'", '"'))
    decoder = json.JSONDecoder()
    last = None
    for candidate in attempts:
        try:
            value, _ = decoder.raw_decode(candidate)
            return value
        except json.JSONDecodeError as exc:
            last = exc
    raise ParseError(f"unparseable JSON ({last}): {text[:80]!r}")


def _text(value) -> str:
    return " ".join(str(value).split()) if value is not None else ""


def _grounded(name: str, source: str) -> bool:
    return " ".join(name.split()).casefold() in source


def parse_extraction(text: str, entity_types: list[str], source_text: str | None = None) -> tuple[list[dict], list[dict]]:
    """(entities, relationships) as mention/assertion dicts. An object with empty lists is a valid
    answer (a passage may name nothing); ParseError means the answer is not an extraction.

    With `source_text`, an entity whose name does not occur in it is dropped, and so is every
    relationship touching it: small models copy names from the prompt's example or invent them.
    """
    data = loads_lenient(text)
    if isinstance(data, list):  # some models answer with the entity list alone
        data = {"entities": data, "relationships": []}
    if not isinstance(data, dict):
        raise ParseError("answer is not a JSON object")
    if "entities" not in data and "relationships" not in data:
        raise ParseError(f"answer has no 'entities': {text[:80]!r}")
    allowed = {t.upper() for t in entity_types}
    entities: dict[str, dict] = {}
    for item in data.get("entities") or []:
        if not isinstance(item, dict) or not _text(item.get("name")):
            continue
        name = _text(item["name"])
        etype = _text(item.get("type")).upper().replace(" ", "_") or "ENTITY"
        entry = entities.setdefault(name.casefold(), {"name": name, "type": etype if etype in allowed else "ENTITY", "description": "", "count": 0})
        entry["count"] += 1
        desc = _text(item.get("description"))
        if desc and desc not in entry["description"]:
            entry["description"] = (entry["description"] + " " + desc).strip()
    relationships = []
    for item in data.get("relationships") or []:
        if not isinstance(item, dict):
            continue
        source, target = _text(item.get("source")), _text(item.get("target"))
        if not source or not target or source.casefold() == target.casefold():
            continue
        for name in (source, target):  # an endpoint the model did not list is still an entity
            entities.setdefault(name.casefold(), {"name": name, "type": "ENTITY", "description": "", "count": 1})
        try:
            strength = float(item.get("strength", 1))
        except (TypeError, ValueError):
            strength = 1.0
        relationships.append({
            "source": entities[source.casefold()]["name"], "target": entities[target.casefold()]["name"],
            "description": _text(item.get("description")), "weight": max(0.0, min(strength, 10.0)),
        })
    if source_text is not None:
        source = " ".join(source_text.split()).casefold()
        entities = {k: e for k, e in entities.items() if _grounded(e["name"], source)}
        relationships = [r for r in relationships if r["source"].casefold() in entities and r["target"].casefold() in entities]

    return list(entities.values()), relationships
