"""Text from untrusted sources (LLM replies, documents, HTTP bodies) made safe to store: lone
UTF-16 surrogates, which JSON escapes can carry and no UTF-8 writer accepts, become U+FFFD."""

from __future__ import annotations

import re

_SURROGATES = re.compile(r"[\ud800-\udfff]")


def clean_text(value) -> str:
    """`value` as a string every writer accepts ('' for what is not a string)."""
    return _SURROGATES.sub("\ufffd", value) if isinstance(value, str) else ""
