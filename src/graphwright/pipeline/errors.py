"""Why a run refused or stopped. Each names what it found and the way out; the CLI and the jobs
turn them into an exit status and one line on stderr."""

from __future__ import annotations


class NothingToIndex(RuntimeError):
    """No source could be read; the index was left as it was."""


class TooManyFailures(RuntimeError):
    """More chunks failed extraction than extract.max_failed_fraction allows; nothing was published.
    What was extracted is kept, and the next run retries the failed chunks."""


class TooManyReportFailures(TooManyFailures):
    """More LLM reports failed than report.max_failed_fraction allows; nothing was published. The
    reports that succeeded are in the LLM cache, so the next run does not pay for them again."""


class RefusedDeletion(RuntimeError):
    """A run would delete more of the index than configured; nothing was changed."""


# exit status of a command or job whose run stopped waiting on LLM batches (not a failure: the
# next run collects them and carries on)
WAITING_EXIT = 3


class WaitingOnBatch(RuntimeError):
    """A stage's LLM requests are in batches the provider has not finished by the run's deadline
    (llm.batch.wait_s). The run stops cleanly: nothing is published and the previous version
    stays current; the next run collects the batches and carries on. `batches`: what it waits
    on ({batch_id, provider_batch_id, provider_status, requests, submitted_by}); `summary`: the
    run's summary, set by the runner."""

    def __init__(self, message: str, stage: str, batches: list[dict], requests: int):
        super().__init__(message)
        self.stage, self.batches, self.requests = stage, batches, requests
        self.summary: dict = {}
