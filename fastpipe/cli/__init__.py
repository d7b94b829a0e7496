"""The ``python -m fastpipe.<command>`` tools: evaluate, consolidate, pack, doctor."""
