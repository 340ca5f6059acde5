"""Where an index lives and how it is written: the Delta tables (delta), their contracts
(contracts), published versions (manifest), locations and object stores (location), row diffs
(diff) and the run lock (lock)."""
