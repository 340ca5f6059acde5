"""The endpoints an export's engine needs, written into the export (`.env`) so that one command
queries it: the LLM and embedding endpoints of the index's own configuration where it has
OpenAI-compatible ones, and otherwise our embedding server (graphwright.exports.embed_server) on
its default port. Both engines read `.env` without overriding the environment, so a variable
set when the command runs wins (embed_server's `-- COMMAND` form sets the embedding ones).

No secret is written: an API key is a reference to the variable the index's configuration names
(`${OPENAI_API_KEY:-not-needed}`), expanded by the engines' dotenv when they read the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphwright.config import PipelineConfig

EMBED_SERVER_PORT = 8091
NO_KEY = "not-needed"


@dataclass(frozen=True)
class Endpoints:
    llm_base_url: str
    llm_model: str  # '' when the index's configuration has no OpenAI-compatible LLM
    llm_api_key: str
    embed_base_url: str
    embed_model: str
    embed_api_key: str
    dim: int


def _key(env_name: str | None) -> str:
    return f"${{{env_name}:-{NO_KEY}}}" if env_name else NO_KEY


def endpoints(config: PipelineConfig, embedding_model: str, dim: int) -> Endpoints:
    llm = config.llm
    has_llm = llm.engine == "openai" and bool(llm.model)
    embed = config.embed
    if embed.engine == "openai":  # questions can go to the endpoint that embedded the index
        embed_base, embed_key = embed.base_url, _key(embed.api_key_env)
    else:
        embed_base, embed_key = f"http://127.0.0.1:{EMBED_SERVER_PORT}/v1", NO_KEY
    return Endpoints(llm.base_url if has_llm else "http://127.0.0.1:8000/v1", llm.model if has_llm else "",
                     _key(llm.api_key_env) if has_llm else NO_KEY, embed_base, embedding_model, embed_key, dim)


def _header(e: Endpoints, engine: str) -> list[str]:
    lines = [f"# {engine} settings for this export, written by graphwright. Variables set in the environment win."]
    if not e.llm_model:
        lines.append("# The index's configuration names no OpenAI-compatible LLM: set the model and base URL below.")
    if e.embed_base_url.startswith(f"http://127.0.0.1:{EMBED_SERVER_PORT}/"):
        lines.append(f"# Questions are embedded by the index's model ({e.embed_model}): serve it with")
        lines.append(f"#   python -m graphwright.exports.embed_server --index INDEX --port {EMBED_SERVER_PORT}")
        lines.append("# or run the query under it: python -m graphwright.exports.embed_server --index INDEX -- COMMAND")
    lines.append("# Offline: TIKTOKEN_CACHE_DIR=<venv>/lib/python3.11/site-packages/litellm/litellm_core_utils/tokenizers")
    return lines


def graphrag_env(e: Endpoints) -> str:
    """The `.env` graphrag reads from the project root (settings.yaml names these variables)."""
    return "\n".join(_header(e, "graphrag") + [
        f"GRAPHRAG_COMPLETION_MODEL={e.llm_model}", f"GRAPHRAG_API_BASE={e.llm_base_url}", f"GRAPHRAG_API_KEY={e.llm_api_key}",
        f"GRAPHRAG_EMBEDDING_MODEL={e.embed_model}", f"GRAPHRAG_EMBEDDING_API_BASE={e.embed_base_url}",
        f"GRAPHRAG_EMBEDDING_API_KEY={e.embed_api_key}",
        "LITELLM_LOCAL_MODEL_COST_MAP=True",  # litellm otherwise fetches its price list from GitHub
    ]) + "\n"


def lightrag_env(e: Endpoints) -> str:
    """The `.env` lightrag-server reads from the directory it starts in (the export)."""
    return "\n".join(_header(e, "lightrag-server") + [
        "WORKING_DIR=.", "INPUT_DIR=./inputs",
        "LLM_BINDING=openai", f"LLM_MODEL={e.llm_model}", f"LLM_BINDING_HOST={e.llm_base_url}", f"LLM_BINDING_API_KEY={e.llm_api_key}",
        "EMBEDDING_BINDING=openai", f"EMBEDDING_MODEL={e.embed_model}", f"EMBEDDING_DIM={e.dim}",
        f"EMBEDDING_BINDING_HOST={e.embed_base_url}", f"EMBEDDING_BINDING_API_KEY={e.embed_api_key}",
    ]) + "\n"


# what embed_server's `-- COMMAND` form sets for the command, per engine
EMBEDDING_URL_VARIABLES = ("GRAPHRAG_EMBEDDING_API_BASE", "EMBEDDING_BINDING_HOST")
