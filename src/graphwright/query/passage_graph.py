"""A published version's passage graph (stages.embed.passage_graph), mapped from disk once per
searcher: node lookups by id (binary search over the sorted ids), an entity's chunks and a
chunk's entities (CSR rows), relationship pairs among entities, and PageRank from seed nodes."""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from graphwright.query.ppr import personalized_pagerank
from graphwright.util.numeric import sorted_index, spans
from graphwright.stages.embed.passage_graph import ARRAYS, MENTION, RELATIONSHIP, SYNONYM
from graphwright.storage.location import is_uri


class PassageGraph:
    def __init__(self, files, relative: str):
        self.meta = json.loads(files.read_bytes(relative))
        folder = relative.rsplit("/", 1)[0]
        self._tmp = None
        if is_uri(files.location):
            self._tmp = tempfile.TemporaryDirectory(prefix="graphwright-graph-")
            base = Path(self._tmp.name)
            for name in ARRAYS:
                with files.local(f"{folder}/{name}.npy") as downloaded:
                    shutil.move(downloaded, base / f"{name}.npy")
        else:
            base = Path(files.location) / folder
        # mapped, not read: a query touches the rows near its seeds (plain ndarray views: numpy's
        # memmap subclass costs microseconds on every slice)
        arrays = {name: np.load(base / f"{name}.npy", mmap_mode="r").view(np.ndarray) for name in ARRAYS}
        self.entity_ids, self.chunk_ids = arrays["entity_ids"], arrays["chunk_ids"]
        self.indptr, self.indices = arrays["indptr"], arrays["indices"]
        self.weights, self.kinds, self.chunk_counts = arrays["weights"], arrays["kinds"], arrays["chunk_counts"]
        self.n_entities, self.n_chunks = len(self.entity_ids), len(self.chunk_ids)
        self.degree = np.diff(self.indptr)

    # -- ids and nodes --------------------------------------------------------------------------

    def entity_nodes(self, entity_ids) -> np.ndarray:
        """Node of each entity id (-1 where the graph has none)."""
        return _find(self.entity_ids, entity_ids)

    def chunk_nodes(self, chunk_ids) -> np.ndarray:
        nodes = _find(self.chunk_ids, chunk_ids)
        return np.where(nodes >= 0, nodes + self.n_entities, -1)

    def ids(self, nodes) -> list[str]:
        out = []
        for node in np.asarray(nodes, dtype=np.int64).tolist():
            array = self.entity_ids if node < self.n_entities else self.chunk_ids
            out.append(array[node if node < self.n_entities else node - self.n_entities].decode())
        return out

    def is_chunk(self, nodes) -> np.ndarray:
        return np.asarray(nodes) >= self.n_entities

    # -- neighbourhoods -------------------------------------------------------------------------

    def row(self, node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(neighbours, weights, kinds) of one node."""
        a, b = int(self.indptr[node]), int(self.indptr[node + 1])
        return self.indices[a:b], self.weights[a:b], self.kinds[a:b]

    def chunk_count(self, entity_nodes) -> np.ndarray:
        """Chunks each entity is mentioned in (its node specificity's denominator); 0 for -1."""
        nodes = np.asarray(entity_nodes, dtype=np.int64)
        return np.where(nodes >= 0, self.chunk_counts[np.maximum(nodes, 0)], 0) if len(nodes) else np.zeros(0, np.int64)

    def chunks_of(self, entity_node: int) -> np.ndarray:
        neighbours, _, kinds = self.row(entity_node)
        return np.asarray(neighbours[kinds == MENTION], dtype=np.int64)

    def entities_of(self, chunk_node: int) -> np.ndarray:
        return np.asarray(self.row(chunk_node)[0], dtype=np.int64)

    def relationship_pairs(self, entity_nodes, touching: bool = False) -> list[tuple[int, int, float]]:
        """(a, b, weight) of the relationship edges among `entity_nodes` (or, `touching`, with at
        least one end among them), each pair once, a < b. Only each entity's edges to entities
        are read: gathering its mentions too (at 1.2M chunks 183 an entity on average, 461k for
        the most mentioned) was 40 ms of an 86 ms graph query."""
        chosen = np.unique(np.asarray([e for e in entity_nodes if e >= 0], dtype=np.int64))
        if not len(chosen):
            return []
        starts = self.indptr[chosen]
        lengths = self.indptr[chosen + 1] - starts
        if self.meta.get("format", 2) >= 3:  # an entity's mentions come last in its row: not read
            lengths = lengths - self.chunk_counts[chosen]
        offsets = spans(starts, lengths)
        owner = np.repeat(chosen, lengths)
        other = np.asarray(self.indices[offsets], dtype=np.int64)
        keep = np.asarray(self.kinds[offsets]) == RELATIONSHIP
        if not touching:
            keep &= np.isin(other, chosen)
        a, b, w = owner[keep], other[keep], np.asarray(self.weights[offsets])[keep]
        low, high = np.minimum(a, b), np.maximum(a, b)
        _, first = np.unique(low * (self.n_entities + self.n_chunks) + high, return_index=True)
        return list(zip(low[first].tolist(), high[first].tolist(), w[first].tolist()))

    # -- PageRank -------------------------------------------------------------------------------

    @functools.lru_cache(maxsize=4)
    def weighting(self, relationship: float = 1.0, synonym: float = 1.0, mention: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Edge weights scaled by kind (0 drops a kind), and each node's total: built once per setting."""
        factors = np.zeros(3, np.float32)
        factors[[MENTION, RELATIONSHIP, SYNONYM]] = (mention, relationship, synonym)
        weights = np.asarray(self.weights, dtype=np.float32) * factors[np.asarray(self.kinds)]
        cumulative = np.concatenate([[0.0], np.cumsum(weights, dtype=np.float64)])
        return weights, cumulative[self.indptr[1:]] - cumulative[self.indptr[:-1]]

    def pagerank(self, seeds: np.ndarray, reset: np.ndarray, damping: float, epsilon: float,
                 relationship: float = 1.0, synonym: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        weights, total = self.weighting(relationship, synonym)  # a dropped kind's edges stay, with weight 0
        return personalized_pagerank(self.indptr, self.indices, weights, total, seeds, reset, damping, epsilon)

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def _find(sorted_ids: np.ndarray, wanted) -> np.ndarray:
    wanted = list(wanted)
    if not wanted or not len(sorted_ids):
        return np.full(len(wanted), -1, np.int64)
    keys = np.array([w.encode() for w in wanted], dtype=sorted_ids.dtype if all(len(w) <= sorted_ids.dtype.itemsize for w in wanted) else object)
    if keys.dtype == object:  # an id longer than any in the graph is not in it
        return np.array([_find(sorted_ids, [w])[0] if len(w) <= sorted_ids.dtype.itemsize else -1 for w in wanted], np.int64)
    return sorted_index(sorted_ids, keys)
