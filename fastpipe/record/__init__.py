"""The run record (metrics.json), the run folder's other artefacts, the folder lock, reading overrides."""
