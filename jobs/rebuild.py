"""Full rebuild: recompute everything derived from the documents of SOURCES, then publish.

    ray job submit --working-dir . -- python jobs/rebuild.py SOURCE... --index DIR_OR_URI [--config FILE] [--drop-llm-cache]

Published versions stay readable and can be rolled back to. The LLM cache is kept unless
--drop-llm-cache is given (then every chunk is sent to the model again). A run that ends
waiting on LLM batches exits 3 (--waiting-exit-code), as jobs/nightly.py does.
"""

import sys

from _entry import parser, run

from graphwright.ops import jobs

if __name__ == "__main__":
    p = parser(__doc__, waits=True)
    p.add_argument("sources", nargs="+")
    p.add_argument("--config")
    p.add_argument("--drop-llm-cache", action="store_true")
    p.add_argument("--plot")
    a = p.parse_args()
    sys.exit(run(lambda: jobs.rebuild(a.sources, a.index, jobs.job_config(a.config), drop_llm_cache=a.drop_llm_cache,
                                      plot=a.plot or jobs.default_plot_path(a.index)), a.waiting_exit_code))
