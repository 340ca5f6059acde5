"""Question embeddings for sentence-transformers BERT models (the bundled all-MiniLM-L6-v2) in
numpy, for query processes: the same vectors as sentence-transformers (to within float32
rounding; tests/test_embed_vectors.py compares them), without importing torch and transformers,
which made a cold `graphwright query` wait about 10 s before its first vector.

It reads the model directory sentence-transformers reads: tokenizer.json (the `tokenizers`
library), model.safetensors, config.json and modules.json. Only what all-MiniLM-L6-v2-style
models use is implemented (a BERT encoder with absolute positions and GELU, mean pooling, L2
normalisation); `supports` says whether a directory is such a model, and anything else is
embedded by sentence-transformers.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

POOLING = {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False, "pooling_mode_max_tokens": False,
           "pooling_mode_mean_sqrt_len_tokens": False}


def supports(folder: Path) -> bool:
    """Whether `folder` holds a model this engine embeds exactly as sentence-transformers does."""
    try:
        modules = json.loads((folder / "modules.json").read_text())
        config = json.loads((folder / "config.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        pooling = json.loads((folder / next(m["path"] for m in modules if m["type"].endswith("Pooling")) / "config.json").read_text())
    except (OSError, ValueError, StopIteration, KeyError):
        return False
    return (kinds in (["Transformer", "Pooling", "Normalize"], ["Transformer", "Pooling"])
            and config.get("model_type") == "bert" and config.get("hidden_act") == "gelu"
            and config.get("position_embedding_type", "absolute") == "absolute"
            and all(pooling.get(k, False) == v for k, v in POOLING.items())
            and (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists())


class NumpyBertEmbedder:
    def __init__(self, folder: Path, name: str):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((folder / "modules.json").read_text())]
        self.normalize = "Normalize" in kinds
        settings = folder / "sentence_bert_config.json"
        max_length = json.loads(settings.read_text()).get("max_seq_length", 512) if settings.exists() else 512
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=min(max_length, config["max_position_embeddings"]))
        self.tokenizer.enable_padding(pad_id=config.get("pad_token_id", 0))
        w = {k.removeprefix("bert."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
        # dense weights transposed once into contiguous float32: x @ W runs as one BLAS call
        self.w = {k: np.ascontiguousarray(v.T if k.endswith(".weight") and v.ndim == 2 and "embeddings" not in k else v, dtype=np.float32)
                  for k, v in w.items() if k != "embeddings.position_ids"}
        self.heads = config["num_attention_heads"]
        self.layers = config["num_hidden_layers"]
        self.eps = config.get("layer_norm_eps", 1e-12)
        self.dim = config["hidden_size"]
        self.name = name

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # the matrices of a question are small: one BLAS thread is fastest, and several spin
        # against each other on a busy machine (812 ms against 31 ms for a question, 2 cores)
        with _blas().limit(limits=1, user_api="blas"):
            return self._encode(texts)

    def _encode(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        w, n, length = self.w, len(texts), ids.shape[1]
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length][None] \
            + w["embeddings.token_type_embeddings.weight"][types]
        x = self._norm(x, "embeddings.LayerNorm")
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        head = self.dim // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def split(name):
                return self._dense(x, p + name).reshape(n, length, self.heads, head).transpose(0, 2, 1, 3)
            q, k, v = split("attention.self.query"), split("attention.self.key"), split("attention.self.value")
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head) + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            context = (scores / scores.sum(axis=-1, keepdims=True)) @ v
            context = context.transpose(0, 2, 1, 3).reshape(n, length, self.dim)
            x = self._norm(x + self._dense(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            hidden = _gelu(self._dense(x, p + "intermediate.dense"))
            x = self._norm(x + self._dense(hidden, p + "output.dense"), p + "output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        if self.normalize:
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled.astype(np.float32)

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        weight = self.w[name + ".weight"]
        return (x.reshape(-1, x.shape[-1]) @ weight).reshape(*x.shape[:-1], weight.shape[1]) + self.w[name + ".bias"]

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]


@functools.cache
def _blas():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))
