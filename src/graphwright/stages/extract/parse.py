"""Parse an LLM's extraction answer, tolerating and repairing the usual defects: code fences,
prose around the object, trailing commas, a truncated tail, single quotes, missing fields,
relationships whose endpoints were not listed as entities."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from graphwright.stages.extract.validate import finite, is_name
from graphwright.text.safe import clean_text

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


def loads_lenient(text, notes: dict | None = None) -> object:
    """The JSON value in an answer, repairing the usual defects; ParseError for anything else
    (not text, no JSON, nested past the decoder's depth). An answer cut off mid-value (what was
    cut is lost) is counted into `notes` as `truncated`."""
    if not isinstance(text, str):
        raise ParseError(f"answer is {type(text).__name__}, not text")
    if not text.strip():
        raise ParseError("empty answer")
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text
    start = min((i for i in (body.find("{"), body.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise ParseError(f"no JSON object in answer: {text[:80]!r}")
    body = body[start:]
    decoder = json.JSONDecoder()
    last = None
    for candidate, closed in _repairs(body):
        try:
            value, _ = decoder.raw_decode(candidate)
            if closed and notes is not None:
                notes["truncated"] = notes.get("truncated", 0) + 1
            return value
        except json.JSONDecodeError as exc:
            last = exc
        except RecursionError:
            raise ParseError("JSON nested too deeply") from None
    raise ParseError(f"unparseable JSON ({last}): {text[:80]!r}")


def _repairs(body: str) -> Iterator[tuple[str, bool]]:
    """(`body`, then each repair on top of the one before: trailing commas dropped, a cut-off tail
    closed, single quotes made double; whether a cut-off tail was closed). Made one at a time, as
    the decoder refuses the one before: a well-formed answer (nearly every one) is decoded once,
    not first scanned character by character for open brackets (1.1 s of py-spy samples in a 1%
    update at 145k chunks)."""
    yield body, False
    uncut = _TRAILING_COMMA.sub(r"\1", body)
    yield uncut, False
    candidate = _close_truncated(uncut)
    closed = candidate != uncut
    yield candidate, closed
    candidate = _TRAILING_COMMA.sub(r"\1", candidate)
    yield candidate, closed
    yield candidate.replace("'", '"'), closed


def _text(value) -> str:
    """A reply field as one line of text; a field that is not text or a number is no text."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return ""
    return " ".join(clean_text(str(value)).split())


def _grounded(name: str, source: str) -> bool:
    return " ".join(name.split()).casefold() in source


def parse_extraction(text, entity_types: list[str], source_text: str | None = None, bounds=None,
                     notes: dict | None = None) -> tuple[list[dict], list[dict]]:
    """(entities, relationships) as mention/assertion dicts. An object with empty lists is a valid
    answer (a passage may name nothing); ParseError means the answer is not an extraction, or
    breaks a bound of `bounds` (an ExtractConfig's max_* settings).

    With `source_text`, an entity whose name does not occur in it is dropped, and so is every
    relationship touching it: small models copy names from the prompt's example or invent them.
    What was dropped or cut is counted into `notes`.
    """
    notes = {} if notes is None else notes
    if bounds is not None and isinstance(text, str) and len(text) > bounds.max_reply_chars:
        raise ParseError(f"answer of {len(text)} characters, above extract.max_reply_chars={bounds.max_reply_chars}")
    data = loads_lenient(text, notes)
    if isinstance(data, list):  # some models answer with the entity list alone
        data = {"entities": data, "relationships": []}
    if not isinstance(data, dict):
        raise ParseError("answer is not a JSON object")
    if "entities" not in data and "relationships" not in data:
        raise ParseError(f"answer has no 'entities': {text[:80]!r}")
    raw_entities, raw_relationships = data.get("entities") or [], data.get("relationships") or []
    if not isinstance(raw_entities, list) or not isinstance(raw_relationships, list):
        raise ParseError("'entities' and 'relationships' must be lists")
    if bounds is not None:
        for what, items, limit in (("entities", raw_entities, bounds.max_entities_per_chunk),
                                   ("relationships", raw_relationships, bounds.max_relationships_per_chunk)):
            if len(items) > limit:
                raise ParseError(f"answer lists {len(items)} {what}, above extract.max_{what}_per_chunk={limit}")
    max_name = bounds.max_name_chars if bounds is not None else 10**9
    max_desc = bounds.max_description_chars if bounds is not None else 10**9
    allowed = {t.upper() for t in entity_types}

    def note(reason: str) -> None:
        notes[reason] = notes.get(reason, 0) + 1

    def field(item: dict, key: str) -> str:
        value = item.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int, float))):
            note("not_text")
        elif isinstance(value, str) and clean_text(value) != value:
            note("replaced_characters")
        return _text(value)

    entities: dict[str, dict] = {}
    for item in raw_entities:
        if not isinstance(item, dict) or not field(item, "name"):
            note("not_an_entity")
            continue
        name = field(item, "name")
        if not is_name(name, max_name):
            note("not_a_name")
            continue
        etype = field(item, "type").upper().replace(" ", "_") or "ENTITY"
        if name.casefold() in entities:
            note("duplicate")
        entry = entities.setdefault(name.casefold(), {"name": name, "type": etype if etype in allowed else "ENTITY", "description": "", "count": 0})
        entry["count"] += 1
        desc = field(item, "description")
        if len(desc) > max_desc:
            raise ParseError(f"a description of {len(desc)} characters, above extract.max_description_chars={max_desc}")
        if desc and desc not in entry["description"]:
            entry["description"] = (entry["description"] + " " + desc).strip()[:max_desc]
    relationships = []
    for item in raw_relationships:
        if not isinstance(item, dict):
            note("not_a_relationship")
            continue
        source, target = field(item, "source"), field(item, "target")
        if not source or not target or source.casefold() == target.casefold():
            note("self_loop" if source and source.casefold() == target.casefold() else "not_a_relationship")
            continue
        if not is_name(source, max_name) or not is_name(target, max_name):
            note("not_a_name")
            continue
        for name in (source, target):  # an endpoint the model did not list is still an entity
            entities.setdefault(name.casefold(), {"name": name, "type": "ENTITY", "description": "", "count": 1})
        desc = field(item, "description")
        if len(desc) > max_desc:
            raise ParseError(f"a description of {len(desc)} characters, above extract.max_description_chars={max_desc}")
        strength = finite(item.get("strength", 1), default=float("nan"))
        if strength != strength or not 0 <= strength <= 10:  # NaN, infinite, not a number, or out of the scale
            note("strength_out_of_range")
        relationships.append({
            "source": entities[source.casefold()]["name"], "target": entities[target.casefold()]["name"],
            "description": desc, "weight": max(0.0, min(strength if strength == strength else 1.0, 10.0)),
        })
    if source_text is not None:
        source = " ".join(clean_text(source_text).split()).casefold()
        kept = {k: e for k, e in entities.items() if _grounded(e["name"], source)}
        if len(kept) < len(entities):
            notes["not_in_chunk"] = notes.get("not_in_chunk", 0) + len(entities) - len(kept)
        entities = kept
        relationships = [r for r in relationships if r["source"].casefold() in entities and r["target"].casefold() in entities]
    dropped = notes.get("not_a_name", 0) + notes.get("not_in_chunk", 0)
    if bounds is not None and dropped >= 3 and dropped > bounds.max_dropped_fraction * (dropped + len(entities)):
        raise ParseError(f"{dropped} of the names in the answer are not names or do not occur in the chunk, "
                         f"above extract.max_dropped_fraction={bounds.max_dropped_fraction:g}")
    return list(entities.values()), relationships
