"""``python -m parasim``: the ``parasim`` command line."""
import sys

from parasim.cli import main

sys.exit(main())
