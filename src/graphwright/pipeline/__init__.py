"""The pipeline: stages declared as data (stage, definition), walked by the runner over a run
context (context), with per-row stages on an executor (executors: in-process or Ray Data)."""
