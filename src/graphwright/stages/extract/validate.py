"""Bounds on what one LLM reply may put into the graph (extract.max_* settings). A reply is data,
not a trusted code path: whatever its shape or size, it becomes a bounded extraction or a named
failure. VALIDATION_VERSION and the bounds are part of the extractor key, so a change of rules
re-checks every chunk, answered from the cache."""

from __future__ import annotations

import hashlib
import json
import math

VALIDATION_VERSION = 1

BOUNDS = ("max_entities_per_chunk", "max_relationships_per_chunk", "max_name_chars", "max_description_chars",
          "max_reply_chars", "max_dropped_fraction")


def bounds_tag(config) -> str:
    """VALIDATION_VERSION and a short hash of the bounds, for the extractor key."""
    digest = hashlib.sha256(json.dumps({b: getattr(config, b) for b in BOUNDS}, sort_keys=True).encode()).hexdigest()[:6]
    return f"v{VALIDATION_VERSION}.{digest}"


def is_name(name: str, max_chars: int) -> bool:
    """A name has a letter and fits: '0', '000', '--' or a paragraph are not names."""
    return 0 < len(name) <= max_chars and any(ch.isalpha() for ch in name)


def finite(value, default: float = 1.0) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return number if math.isfinite(number) else default

