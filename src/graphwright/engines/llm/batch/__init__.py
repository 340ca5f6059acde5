"""`llm.engine: openai-batch`: an index run's LLM requests sent as batch request files, at about
half the price of synchronous calls, collected by the same run or a later one.

- files: request lines (custom_id = the request's llm_cache key) and result lines, in the
  OpenAI Batch API's format, which `vllm run-batch` reads and writes too;
- providers: where batches go (the Batch API at llm.base_url, or files for vllm run-batch);
- ledger: the `llm_batches` and `llm_batch_requests` tables;
- collect: a finished batch's answers into llm_cache, once;
- engine: BatchEngine.complete (send, poll until the run's deadline, collect, send again what
  failed or expired), and Waves, the stream LLM reports go through.

Query-time calls (answers, lazy reports) cannot wait for a batch: with this engine they go to the
same endpoint's chat completions (engines.llm.make_llm).
"""
