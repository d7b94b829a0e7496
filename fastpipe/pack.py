"""``python -m fastpipe.pack``: build or verify a pack for data=mmap (fastpipe/cli/pack.py)."""
import sys

from fastpipe.cli.pack import main

if __name__ == "__main__":
    sys.exit(main())
