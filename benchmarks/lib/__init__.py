"""What the benchmark scripts share: the runner that starts every fastpipe run, the hand-written reference
loops, the loader-alone reader and the trace summary (benchmarks/README.md). A package so that a script's
``from lib.runner import ...`` finds this folder before anything else named ``lib``."""
