"""One module (or package) per pipeline stage. Each declares `STAGE` (graphwright.pipeline.stage):
the tables it reads and writes and its `execute(run, metrics)`, which does the stage's table I/O
and calls its plain computations."""
