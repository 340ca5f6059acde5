"""The zero-LLM extractor: capitalized-name spotting with rules, typed by cue words, related by
co-occurrence. Deterministic, no model and no download; the embedded default and the test engine.

What it finds: proper names (multi-word, with 'of'-style connectors, honorifics, acronyms).
What it misses: common-noun concepts, pronoun references, and the kind of a relation (every
relationship is 'co-occurs with', described by the sentence that shows it).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from itertools import combinations

import pyarrow as pa

from graphwright.config import ExtractConfig
from graphwright.stages.extract.rows import EXTRACTION_BATCH_SCHEMA
from graphwright.text.names import (
    HONORIFICS,
    has_honorific,
    normalize_name,
    strip_possessive,
)
from graphwright.text.sentences import split_sentences

RULES_VERSION = 5

_CONNECTORS = r"(?:of|of the|de|da|del|della|di|van|von|der|den|du|la|le|al|bin|ibn)"
# a hyphen joins a word's parts ("Rolls-Royce"); two are a dash in plain-text books ("Cornwall--all
# the coast"), which ends the name
_WORD = r"(?:[A-Z](?:[\w'’]|-(?!-))*[\w]|[A-Z])"
_HONORIFIC = r"(?:Mr|Mrs|Ms|Dr|St|Prof|Rev|Capt|Gen|Col|Sgt|Gov|Sen|Mt|Ft)\.?"
_NAME = re.compile(
    rf"(?<![\w'’])(?:{_HONORIFIC}\s+)?{_WORD}(?:\.(?=\s+[A-Z]))?(?:\s+(?:{_CONNECTORS}\s+)?{_WORD}(?:\.(?=\s+[A-Z]))?)*"
)

# Words that are capitalized only because they start a sentence (or are not names at all).
_NOT_NAMES = set(
    """a an the this that these those he she it they we you i me him her his hers its their theirs our
    ours my mine your yours there here when where what who whom whose which why how if but and or nor
    so yet for as at by in on of to from with without after before then than now not no yes oh ah
    well all some any each every both either neither one two three many much more most such only even
    also still just very while though although because since until upon into over under again once
    perhaps however indeed thus therefore meanwhile besides nothing something everything anything
    nobody somebody everyone someone let said says say do does did done is was were be been being am
    are has have had will would shall should can could may might must chapter stave part book volume
    section page note see also like unlike during among between within about above below against
    through throughout toward towards across behind beyond near off out up down away back far first
    second third last next other another same few several own whatever whoever whenever wherever
    ever never always often sometimes soon later already yet though dear good great little old new
    whether till hence thence whereupon meanwhile otherwise accordingly nevertheless nonetheless
    moreover furthermore instead rather quite almost enough too sir madam
    monday tuesday wednesday thursday friday saturday sunday january february march april may june
    july august september october november december""".split()
)
_ORG_LAST = set(
    """inc corp corporation company co ltd llc plc university college school institute bank association
    society party church council committee club group agency department ministry army navy records
    studios press foundation league team band union court academy hospital museum railway airlines
    federation commission bureau office parliament senate congress orchestra""".split()
)
_GEO_LAST = set(
    """river street road avenue lane city county state island islands mountain mountains lake sea
    ocean valley park square bridge hill hills bay province kingdom republic empire village town
    forest desert coast station district region peninsula strait canal harbour harbor""".split()
)
_GEO_FIRST = {"mount", "mt", "lake", "cape", "fort", "port", "new", "north", "south", "east", "west"}
_EVENT_LAST = set(
    """war battle festival championship championships cup olympics revolution election treaty award
    awards prize games tournament conference summit massacre crisis""".split()
)
_SAY_VERBS = {"said", "says", "replied", "cried", "asked", "answered", "exclaimed", "returned", "observed"}
_GEO_PREPOSITIONS = {"in", "near"}


def _mostly_upper(sentence: str) -> bool:
    letters = [c for c in sentence if c.isalpha()]
    return len(letters) >= 8 and sum(c.isupper() for c in letters) / len(letters) > 0.6


def _entity_type(surface: str, before: str, after: str) -> str:
    words = [w.strip(".").casefold() for w in strip_possessive(surface).split()]
    if has_honorific(surface):
        return "PERSON"
    if words[-1] in _ORG_LAST:
        return "ORGANIZATION"
    if words[-1] in _GEO_LAST or (len(words) > 1 and words[0] in _GEO_FIRST):
        return "GEO"
    if words[-1] in _EVENT_LAST:
        return "EVENT"
    if after in _SAY_VERBS or before in _SAY_VERBS:
        return "PERSON"
    if before in _GEO_PREPOSITIONS:
        return "GEO"
    return "ENTITY"


# "I'll", "THAT'll", "Don't": a stop word with a contraction is no more a name than the word alone
_CONTRACTION = re.compile(r"^(\w+?)(?:n['’]t|['’](?:ll|m|ve|re|d|s))$", re.IGNORECASE)
_CONTRACTED_ONLY = {"ye", "ca", "wo", "sha"}  # ye'll, can't, won't, shan't


def _contracted_stopword(word: str) -> bool:
    m = _CONTRACTION.match(word)
    return bool(m) and (m.group(1).casefold() in _NOT_NAMES or m.group(1).casefold() in _CONTRACTED_ONLY)


def _trim_leading_stopwords(surface: str) -> str:
    words = surface.split()
    while words and words[0].casefold().strip(".") in _NOT_NAMES:
        words = words[1:]
    while words and words[-1].casefold() in {"of", "the", "de", "da", "van", "von", "la", "le"}:
        words = words[:-1]
    return " ".join(words)


def find_names(text: str) -> list[dict]:
    """Every name occurrence in `text`: surface, type, sentence index."""
    sentences = split_sentences(text)
    found = []
    # a single word capitalized mid-sentence anywhere in the text is a name at sentence start too
    mid_sentence_caps = set()
    for s_start, s_end in sentences:
        sentence = text[s_start:s_end]
        for m in _NAME.finditer(sentence):
            words = strip_possessive(m.group(0)).split()
            at_start = not sentence[:m.start()].strip(" \"'“‘([")
            mid_sentence_caps.update(words[1:] if at_start else words)
    lowercase_words = set(re.findall(r"\b[a-z][a-z'’\-]*\b", text))
    for index, (s_start, s_end) in enumerate(sentences):
        sentence = text[s_start:s_end]
        if _mostly_upper(sentence):
            continue  # headings and shouted lines
        for m in _NAME.finditer(sentence):
            raw = m.group(0)
            at_start = not sentence[:m.start()].strip(" \"'“‘([")
            raw = " ".join(raw.split())  # a name wrapped across lines is still one name
            surface = strip_possessive(_trim_leading_stopwords(raw) if at_start else raw)
            words = surface.split()
            if len(words) == 1 and _contracted_stopword(surface):
                continue  # a title may open with one ("I'll Be Here Awhile"), so only a word alone goes
            if (at_start and len(words) > 1 and words[0].casefold() in lowercase_words and words[0] not in mid_sentence_caps
                    and not has_honorific(surface)):
                # 'Tell Dr. Brandt': the text uses 'tell' as a word and never capitalizes it mid-sentence
                # ('Demon Dice ... a demon ... republished as Demon Dice' keeps its name)
                surface = " ".join(words[1:])
            key = normalize_name(surface)
            if not surface or key in _NOT_NAMES or key in HONORIFICS or len(key) < 2:
                continue  # a stop word, or a title alone ('Mr')
            if at_start and surface == strip_possessive(raw) and len(surface.split()) == 1 and surface not in mid_sentence_caps:
                continue  # a lone capitalized word opening a sentence is usually not a name
            if surface.isupper() and len(surface) > 6 and " " not in surface:
                continue  # a shouted word, not an acronym
            before_words = sentence[:m.start()].split()
            after_words = sentence[m.end():].split()
            found.append(
                {
                    "surface": surface,
                    "type": _entity_type(
                        surface,
                        before_words[-1].casefold().strip(",;:\"'“”") if before_words else "",
                        after_words[0].casefold().strip(",;:\"'“”.") if after_words else "",
                    ),
                    "sentence": index,
                }
            )
    return found, [text[a:b].strip() for a, b in sentences]


def _clip(sentence: str, limit: int = 300) -> str:
    sentence = " ".join(sentence.split())
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rstrip() + "…"


def extract_chunk(text: str, config: ExtractConfig) -> tuple[list[dict], list[dict]]:
    """Mentions (one per surface name) and assertions (one per pair of entities) of one chunk."""
    occurrences, sentences = find_names(text)
    by_surface: dict[str, list[dict]] = defaultdict(list)
    for occ in occurrences:
        by_surface[occ["surface"]].append(occ)

    mentions = []
    for surface, occs in sorted(by_surface.items()):
        types = Counter(o["type"] for o in occs)
        typed = [t for t in types.most_common() if t[0] != "ENTITY"]
        sentence_ids = sorted({o["sentence"] for o in occs})[: config.max_description_sentences]
        mentions.append(
            {
                "name": surface,
                "type": typed[0][0] if typed else "ENTITY",
                "description": " ".join(_clip(sentences[i]) for i in sentence_ids),
                "count": len(occs),
            }
        )

    # relate entities (by merge key, so 'Mr. Scrooge' and 'Scrooge' are one node here)
    key_count: Counter = Counter()
    key_surface: dict[str, Counter] = defaultdict(Counter)
    key_sentences: dict[str, set[int]] = defaultdict(set)
    for occ in occurrences:
        key = normalize_name(occ["surface"])
        key_count[key] += 1
        key_surface[key][occ["surface"]] += 1
        key_sentences[key].add(occ["sentence"])
    surface_of = {k: sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] for k, c in key_surface.items()}

    assertions = []
    related = set()
    for a, b in combinations(sorted(key_sentences), 2):
        shared = sorted(key_sentences[a] & key_sentences[b])
        if shared:
            related.add((a, b))
            assertions.append(
                {
                    "source": surface_of[a],
                    "target": surface_of[b],
                    "description": " ".join(_clip(sentences[i]) for i in shared[: config.max_description_sentences]),
                    "weight": float(len(shared)),
                }
            )
    if config.chunk_pair_weight > 0 and config.chunk_pair_top_n > 1:
        top = sorted(key_count, key=lambda k: (-key_count[k], k))[: config.chunk_pair_top_n]
        for a, b in combinations(sorted(top), 2):
            if (a, b) not in related:
                assertions.append(
                    {
                        "source": surface_of[a],
                        "target": surface_of[b],
                        "description": "",  # no sentence states it; only the passage is shared
                        "weight": config.chunk_pair_weight,
                    }
                )
    return mentions, assertions


class NlpExtractor:
    """Batch function over chunks; see graphwright.extract for the output contract."""

    def __init__(self, config: ExtractConfig):
        self.config = config
        self.key = f"nlp@{RULES_VERSION}"

    def __call__(self, chunks: pa.Table) -> pa.Table:
        rows = []
        for cid, did, text in zip(*(chunks.column(c).to_pylist() for c in ("chunk_id", "doc_id", "text"))):
            try:
                mentions, assertions = extract_chunk(text, self.config)
                rows.append(dict(chunk_id=cid, doc_id=did, extractor=self.key, status="ok", error=None,
                                 mentions=mentions, assertions=assertions, calls=[]))
            except Exception as exc:  # recorded per chunk, never silent
                rows.append(dict(chunk_id=cid, doc_id=did, extractor=self.key, status="failed",
                                 error=f"{type(exc).__name__}: {exc}", mentions=[], assertions=[], calls=[]))
        return pa.Table.from_pylist(rows, schema=EXTRACTION_BATCH_SCHEMA)
