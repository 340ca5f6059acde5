"""A deterministic bag-of-words feature-hashing embedder with no model: for tests, and for runs
where embedding quality does not matter (scale benchmarks)."""

from __future__ import annotations

import hashlib
import re

import numpy as np

from graphwright.config import EmbedConfig

_TOKEN = re.compile(r"\w+")


class HashingEmbedder:
    def __init__(self, config: EmbedConfig):
        self.dim = config.dim
        self.name = f"hashing-{config.dim}"

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if (value >> 63) else -1.0

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _TOKEN.findall(text.casefold())
            for feature in words + [a + " " + b for a, b in zip(words, words[1:])]:
                index, sign = self._bucket(feature)
                out[row, index] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)
