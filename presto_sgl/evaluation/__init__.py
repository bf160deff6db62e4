"""Running a task and scoring what came out: the run directory (records, manifest, resume),
the per-response statistics of the paper (App. D.2) and the rescoring forward pass."""
