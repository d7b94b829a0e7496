"""``python -m fastpipe.consolidate``: a sharded checkpoint as one file (fastpipe/cli/consolidate.py)."""
import sys

from fastpipe.cli.consolidate import main

if __name__ == "__main__":
    sys.exit(main())
