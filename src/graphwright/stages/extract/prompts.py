"""The extraction prompt. The fixed part (instructions, schema, example) comes first and the
chunk last, so a serving engine's prefix cache serves everything but the chunk."""

from __future__ import annotations

import json

PROMPT_VERSION = "extract-v1"

EXTRACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "minItems": 1,  # without it small models tend to answer with empty arrays
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "type": {"type": "string"}, "description": {"type": "string"}},
                "required": ["name", "type", "description"],
            },
        },
        "relationships": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "source": {"type": "string"},
                    "target": {"type": "string"},
                    "description": {"type": "string"},
                    "strength": {"type": "number"},
                },
                "required": ["source", "target", "description", "strength"],
            },
        },
    },
    "required": ["entities", "relationships"],
}

_EXAMPLE_TEXT = "Ada Lovelace worked with Charles Babbage in London on the Analytical Engine."
_EXAMPLE_OUTPUT = {
    "entities": [
        {"name": "Ada Lovelace", "type": "PERSON", "description": "Mathematician who worked on the Analytical Engine."},
        {"name": "Charles Babbage", "type": "PERSON", "description": "Designer of the Analytical Engine."},
        {"name": "London", "type": "GEO", "description": "City where Lovelace and Babbage worked."},
        {"name": "Analytical Engine", "type": "CONCEPT", "description": "Mechanical computer designed by Babbage."},
    ],
    "relationships": [
        {"source": "Ada Lovelace", "target": "Charles Babbage", "description": "Lovelace worked with Babbage.", "strength": 9},
        {"source": "Charles Babbage", "target": "Analytical Engine", "description": "Babbage designed the engine.", "strength": 10},
    ],
}


def system_prompt(entity_types: list[str]) -> str:
    return (
        "You extract a knowledge graph from a text passage.\n"
        f"Entity types: {', '.join(entity_types)}.\n"
        "1. List every named entity of those types: name as written, type, and a one-sentence description "
        "based only on the passage.\n"
        "2. List relationships between those entities that the passage states: source and target (entity "
        "names exactly as listed), a one-sentence description, and a strength from 1 (weak) to 10 (strong).\n"
        "Answer with one JSON object only, matching this schema:\n"
        f"{json.dumps(EXTRACTION_SCHEMA)}\n"
        f"Example passage: {_EXAMPLE_TEXT}\n"
        f"Example answer: {json.dumps(_EXAMPLE_OUTPUT)}"
    )


GLEANING_PROMPT = (
    "Some entities or relationships in the passage may have been missed. Answer with a JSON object "
    "of the same shape listing only the ones not listed yet (empty lists if none)."
)
