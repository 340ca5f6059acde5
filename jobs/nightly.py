"""Nightly refresh: incremental index of SOURCES into INDEX, publish, cost report.

    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/nightly.py SOURCE... --index DIR_OR_URI [--config FILE]
    python jobs/nightly.py SOURCE... --index DIR [--config FILE]      # local Ray

The sources are the whole corpus: documents missing from them are deleted (refused above
ingest.max_delete_fraction). Prints one JSON object: the status, the run summary and its cost
beside the estimated cost of a full rebuild. A local index also gets reports/cost.png.

With llm.engine openai-batch, a run whose LLM batches are not done by llm.batch.wait_s stops,
waiting on them: nothing is published, the JSON's status is "waiting" (with the batches and
what they will cost) and the exit status is 3 (--waiting-exit-code). The next run collects them
and carries on.
"""

import sys

from _entry import parser, run

from graphwright.ops import jobs

if __name__ == "__main__":
    p = parser(__doc__, waits=True)
    p.add_argument("sources", nargs="+")
    p.add_argument("--config", help="pipeline config (YAML), e.g. pipelines/gpu-cluster.yaml")
    p.add_argument("--plot", help="write the cost plot here (default: INDEX/reports/cost.png for a local index)")
    a = p.parse_args()
    sys.exit(run(lambda: jobs.nightly(a.sources, a.index, jobs.job_config(a.config), a.plot or jobs.default_plot_path(a.index)),
                 a.waiting_exit_code))
