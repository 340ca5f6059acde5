"""Leave on an index (built by older code) what a run of this code leaves for the next, as a
nightly run would have left it the night before: ingest's record of the source files
(stages/ingest/quick_check.py; the ingest stage runs alone against the corpus the index holds,
which must be unchanged: nothing else is written) and the extract calls the full-rebuild
estimate counted (stages/extract/rebuild_tokens.py).

    python bench/record_run_state.py --index DIR/index-1000000 --corpus DIR/corpus-1000000
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True)
    a = p.parse_args()
    from graphwright.config import load_config
    from graphwright.stages import ingest
    from graphwright.stages.extract.rebuild_tokens import full_rebuild_tokens
    from graphwright.storage.delta import IndexStore

    store = IndexStore(a.index)
    before = store.version("documents")
    run = SimpleNamespace(request=SimpleNamespace(sources=[str(a.corpus)], mirror=True, force=False), store=store,
                          config=load_config(None), run_id="record-sources", log=print)
    started, m = time.perf_counter(), {}
    out = ingest.execute(run, m)
    if store.version("documents") != before:
        raise SystemExit(f"the corpus was not the one {a.index} holds: ingest wrote documents ({out['diff']})")
    print(f"{m['files_recorded']} files recorded ({m['files_unread']} taken from an earlier record) in "
          f"{time.perf_counter() - started:.1f} s; documents unchanged ({out['diff']['unchanged']})")
    started = time.perf_counter()
    tokens = full_rebuild_tokens(store, store.read("chunks", columns=["chunk_id"]).column("chunk_id"))
    print(f"full-rebuild estimate {tokens:,} tokens, its calls recorded in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
