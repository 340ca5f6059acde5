"""Operating an index: scheduled jobs (jobs), what runs cost and its plot (costs, cost_plot),
version rollback and retention (versions), and a local Ray cluster for tests (local_cluster)."""
