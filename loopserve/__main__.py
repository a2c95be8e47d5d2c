"""``python -m loopserve`` is the ``loopserve`` command."""

import sys

from loopserve.cli import main

sys.exit(main())
