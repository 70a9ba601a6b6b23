"""``python -m distlab.profile``: see :mod:`distlab.profile.cli`."""

import sys

from distlab.profile.cli import main

if __name__ == "__main__":
    sys.exit(main())
