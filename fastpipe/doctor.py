"""``python -m fastpipe.doctor``: is this machine ready to train (fastpipe/cli/doctor.py)."""
import sys

from fastpipe.cli.doctor import main

if __name__ == "__main__":
    sys.exit(main())
