"""The packaged Hydra configs; installed as the package fastpipe.conf."""
