"""Entity names and types as each engine writes them itself, so that what it extracts later
(`graphrag update`, LightRAG's insert) and what it re-reads when it rebuilds (LightRAG's delete)
land on our rows instead of beside them.

- GraphRAG 3.3 uppercases every title and type its extractor returns and cleans them (HTML
  entities decoded, control characters dropped); `graphrag update` merges entities by exact
  title.
- LightRAG 1.5 keeps a name's case, but passes every name it parses (its own extraction and the
  cached records its rebuild reads) through a normalisation: HTML entities decoded, control
  characters, curly quotes and HTML paragraph/line-break tags dropped, full-width letters,
  digits and punctuation made ASCII, the quotes around a whole name and the spaces beside CJK
  characters removed, non-breaking spaces made plain; types lowercased without spaces (and a
  name no type fits is 'other', as its extraction prompt asks).

Both engines key entities by name, and two of our entities (different canonical keys) may end
up with one name; `unique_names` then tells them apart by their id.
"""

from __future__ import annotations

import html
import re

_GRAPHRAG_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_LIGHTRAG_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_TAGS = re.compile(r"</p\s*>|<p\s*>|<p/>|</br\s*>|<br\s*>|<br/>", re.IGNORECASE)
_FULL_WIDTH = str.maketrans(
    {**{chr(0xFF21 + i): chr(0x41 + i) for i in range(26)}, **{chr(0xFF41 + i): chr(0x61 + i) for i in range(26)},
     **{chr(0xFF10 + i): chr(0x30 + i) for i in range(10)},
     "－": "-", "＋": "+", "／": "/", "＊": "*", "（": "(", "）": ")", "—": "-", "\u3000": " "})
_CJK = "\u4e00-\u9fa5"
_NEAR_CJK = r"a-zA-Z0-9\(\)\[\]@#$%!&\*\-=+_"
_OUTER_QUOTES = (('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("《", "》"))
LIGHTRAG_NAME_MAX_CHARS, LIGHTRAG_NAME_MAX_BYTES = 256, 512
UNTYPED = "ENTITY"  # the type our extractors give a name they cannot type
LIGHTRAG_UNTYPED = "other"  # what LightRAG's prompt asks for when no type applies


def graphrag_title(name: str) -> str:
    return _GRAPHRAG_CONTROL.sub("", html.unescape(name.upper().strip()))


graphrag_type = graphrag_title


def _lightrag_once(name: str) -> str:
    text = _LIGHTRAG_CONTROL.sub("", html.unescape(name.strip())).strip()
    text = _TAGS.sub("", text).translate(_FULL_WIDTH)
    text = re.sub(rf"(?<=[{_CJK}])\s+(?=[{_CJK}])", "", text)
    text = re.sub(rf"(?<=[{_CJK}])\s+(?=[{_NEAR_CJK}])", "", text)
    text = re.sub(rf"(?<=[{_NEAR_CJK}])\s+(?=[{_CJK}])", "", text)
    for opening, closing in _OUTER_QUOTES:
        inner = text[1:-1]
        if len(text) >= 2 and text.startswith(opening) and text.endswith(closing) and opening not in inner and closing not in inner:
            text = inner
    text = text.replace("“", "").replace("”", "").replace("‘", "").replace("’", "")
    text = re.sub(rf"['\"]+(?=[{_CJK}])", "", text)
    text = re.sub(rf"(?<=[{_CJK}])['\"]+", "", text)
    text = re.sub(r"(?<=[^\d])\u202f", " ", text.replace("\u00a0", " ")).strip()
    if (len(text) < 3 and text.isdigit()) or (len(text) < 6 and "." in text and all(c.isdigit() or c == "." for c in text)):
        return ""  # LightRAG drops names that are short numbers
    while len(text) > LIGHTRAG_NAME_MAX_CHARS or len(text.encode()) > LIGHTRAG_NAME_MAX_BYTES:
        text = text[:-1]
    return text


def lightrag_name(name: str) -> str:
    """A name LightRAG's normalisation leaves as it is ('' if it would drop it)."""
    previous, text = None, name
    while text != previous:  # the rules are not all idempotent in one pass ('"“X”"')
        previous, text = text, _lightrag_once(text)
    return text


def lightrag_type(entity_type: str) -> str:
    """A type LightRAG keeps as it is: no characters it rejects, one token, lowercase, no spaces;
    our untyped names are LightRAG's 'other'."""
    if entity_type.strip().upper() == UNTYPED:
        return LIGHTRAG_UNTYPED
    text = re.sub(r"['()<>|/\\]", "", lightrag_name(entity_type)).split(",")[0].replace(" ", "").lower()
    return text if text and text not in {"__proto__", "constructor", "prototype"} else LIGHTRAG_UNTYPED


def unique_names(entities: list[dict], normalize) -> dict[str, str]:
    """entity_id -> `normalize`d name, unique: a name shared by several entities (or emptied by
    `normalize`) gets the first 8 characters of the entity's id in brackets."""
    named = {e["entity_id"]: normalize(e["name"]) for e in entities}
    seen: dict[str, int] = {}
    for name in named.values():
        seen[name] = seen.get(name, 0) + 1
    out = {}
    for e in entities:
        name = named[e["entity_id"]]
        if seen[name] > 1 or not name:
            name = normalize(f"{name or e['name'].strip() or e['entity_id']} [{e['entity_id'][:8]}]")
        out[e["entity_id"]] = name
    return out
