import pytest

from graphwright.text.names import has_honorific, normalize_name, strip_possessive


@pytest.mark.parametrize(
    "name, key",
    [
        ("Scrooge", "scrooge"),
        ("SCROOGE", "scrooge"),
        ("Mr. Scrooge", "scrooge"),
        ("Mr Scrooge", "scrooge"),
        ("Mr. Scrooge's", "scrooge"),
        ("Scrooge’s", "scrooge"),
        ("Jones'", "jones"),
        ("Dr. Ilse Brandt", "ilse brandt"),
        ("Sir Dr. Watson", "watson"),  # several honorifics
        ("The Bank of England", "bank of england"),
        ("the  Bank   of England", "bank of england"),  # whitespace collapses
        ("Queen", "queen"),  # an honorific alone stays: nothing would remain
        ("Mr.", "mr"),
        ("The", "the"),
        ("ＡＣＭＥ", "acme"),  # NFKC folds full-width letters
        ("AT&T", "at&t"),
    ],
)
def test_normalize_name(name, key):
    assert normalize_name(name) == key


def test_normalize_name_is_idempotent():
    for name in ["Mr. Scrooge's", "The Bank of England", "Dr. Ilse Brandt", "Port Elling"]:
        key = normalize_name(name)
        assert normalize_name(key) == key


def test_strip_possessive():
    assert strip_possessive("Scrooge's") == "Scrooge"
    assert strip_possessive("Jones’ ") == "Jones"
    assert strip_possessive("Scrooges") == "Scrooges"


def test_has_honorific():
    assert has_honorific("Mr. Scrooge")
    assert has_honorific("Dr Brandt")
    assert not has_honorific("Mr.")  # nothing after it
    assert not has_honorific("Scrooge")
    assert not has_honorific("")


def test_titles_with_of_are_not_merged():
    assert normalize_name("King of France") != normalize_name("Queen of France")
    assert not normalize_name("Prince of Wales").startswith("of ")
