"""graphwright: a batch indexing pipeline that builds, updates and publishes GraphRAG-style indexes.

Importing the package loads nothing heavy: engines (Ray, torch, faiss, GPU libraries) are imported
by the code that uses them.
"""

__version__ = "0.1.0"
