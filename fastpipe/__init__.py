"""fastpipe: declarative, self-measuring PyTorch training pipelines composed from Hydra config groups."""

__version__ = "0.1.0"
