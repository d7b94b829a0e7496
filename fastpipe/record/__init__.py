"""The run record (metrics.json), the run folder's other artefacts, the folder lock, reading overrides, the
code's provenance, and the loggers and callbacks that see the run (loggers/)."""
