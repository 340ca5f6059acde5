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
