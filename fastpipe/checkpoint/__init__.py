"""Checkpoints: the policy the loop calls, files and their checks, what a checkpoint holds, the background writer, DCP, loading a trained run."""
