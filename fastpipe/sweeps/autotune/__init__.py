"""``hydra/sweeper=autotune``: from a project's configuration to its proven-fastest one, step by step.

bounds.py says what bounds a run (data, host, compute; memory headroom) from its metrics.json;
candidates.py what relieves each bound (each registered choice's ``relieves``, and a table of keys that
are not groups); climb.py tries them, best expected first, keeps a change only where it wins beyond the
noise, probes again, and writes ``autotune.json`` (record.py: where it lives, how the report reads it).
The Hydra plugin (hydra_plugins/fastpipe_sweeps/autotune_sweeper.py) only hands it the project's
overrides and a way to launch jobs.
"""
