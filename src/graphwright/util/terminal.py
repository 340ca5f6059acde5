"""Text meant for a terminal, made plain for storage: exceptions from Ray and rich carry colour
and cursor escapes, which the runs table would otherwise keep and every reader re-interpret."""

from __future__ import annotations

import re

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks), and two-byte escapes
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def plain(text: str | None) -> str | None:
    """`text` without terminal escape sequences (and without other control characters but
    newline and tab)."""
    if text is None:
        return None
    text = _ESCAPES.sub("", text)
    return "".join(c for c in text if c in "\n\t" or not (c < " " or c == "\x7f"))
