"""Reporting: the only code that writes files (run folder artefacts, sweep reports)."""
