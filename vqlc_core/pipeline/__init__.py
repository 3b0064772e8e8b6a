"""Building a run: the configuration, the stages, the pipeline, the run directory, and the command line."""
