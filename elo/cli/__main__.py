"""`python -m elo.cli`: the `elo` command."""

import sys

from . import main


if __name__ == "__main__":
    sys.exit(main())
