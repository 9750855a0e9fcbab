"""``python -m leapfrog_gpu.tools.bench``: the ``leapfrog-bench`` command."""

import sys

from .command import main

sys.exit(main())
