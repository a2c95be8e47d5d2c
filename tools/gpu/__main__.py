"""``python -m tools.gpu`` is ``make gpu-check``."""

import sys

from tools.gpu.check import main

sys.exit(main())
