"""Name normalization shared by extraction (dedup within a chunk) and resolution (merge keys)."""

from __future__ import annotations

import re
import unicodedata

HONORIFICS = {
    "mr", "mrs", "ms", "miss", "mister", "madam", "madame", "dr", "doctor", "sir", "dame", "lady",
    "lord", "prof", "professor", "rev", "reverend", "capt", "captain", "gen", "general", "col",
    "colonel", "sgt", "sergeant", "president", "senator", "sen", "gov", "governor", "king", "queen",
    "prince", "princess", "master", "mistress", "uncle", "aunt", "father", "mother", "brother",
    "sister", "saint", "st", "mayor", "judge", "chief", "officer", "inspector", "detective",
}
_CONNECTORS = {"of", "de", "da", "del", "della", "di", "van", "von", "der", "den", "du", "la", "le", "al", "bin", "ibn"}
_POSSESSIVE = re.compile(r"['’]s$|['’]$", re.IGNORECASE)
_PUNCT = re.compile(r"[^\w\s&+\-]")
_SPACE = re.compile(r"\s+")


def strip_possessive(name: str) -> str:
    return _POSSESSIVE.sub("", name.strip())


def normalize_name(name: str) -> str:
    """Merge key for a surface form: 'Mr. Scrooge's' and 'SCROOGE' both give 'scrooge'.

    Honorifics are dropped only when a name remains ('Mr. Scrooge' -> 'scrooge', 'Queen' stays).
    A leading 'the' is dropped ('The Bank of England' -> 'bank of england').
    """
    text = unicodedata.normalize("NFKC", strip_possessive(name)).casefold()
    text = _SPACE.sub(" ", _PUNCT.sub(" ", text)).strip()
    words = text.split(" ")
    if words and words[0] == "the" and len(words) > 1:
        words = words[1:]
    while len(words) > 1 and words[0] in HONORIFICS and words[1] not in _CONNECTORS:
        words = words[1:]  # but 'King of France' keeps its title: it is the name
    return " ".join(words)


def has_honorific(name: str) -> bool:
    first = _PUNCT.sub(" ", name.casefold()).split()
    return bool(first) and first[0] in HONORIFICS and len(first) > 1


FEMALE_HONORIFICS = {"mrs", "miss", "ms", "madam", "madame", "mme", "mlle", "lady", "dame", "mistress"}


def resolution_key(name: str) -> str:
    """The merge key entity resolution starts from: normalize_name, except that a female
    honorific stays ('Mrs. Bilson' -> 'mrs bilson'): in fiction 'Mrs. Cratchit' is rarely the
    'Cratchit' of the same book, and linking never merges across it (stages.resolve.scoring)."""
    key = normalize_name(name)
    first = _PUNCT.sub(" ", unicodedata.normalize("NFKC", name).casefold()).split()
    if first and first[0] == "the":
        first = first[1:]
    if len(first) > 1 and first[0] in FEMALE_HONORIFICS and not key.startswith(first[0] + " "):
        return f"{first[0]} {key}"
    return key
