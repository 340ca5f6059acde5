"""Engines, one interface per family, chosen by configuration and imported only when chosen:
llm (openai, vllm, llamacpp, and the cache in front of them), graph (igraph, leidenalg, cugraph),
vectors (faiss, cuvs), embed (sentence-transformers, hashing, openai, vllm). A GPU engine sits
beside its CPU twin."""
