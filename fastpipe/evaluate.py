"""``python -m fastpipe.evaluate``: a finished run's weights on a held-out split (fastpipe/cli/evaluate.py)."""
import sys

from fastpipe.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
