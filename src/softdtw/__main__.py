"""``python -m softdtw``: the same command line as the ``softdtw`` script."""
import sys

from .cli import main

sys.exit(main())
