"""``python -m leapfrog_gpu.tools.train``: the ``leapfrog-train`` command."""

import sys

from .command import main

sys.exit(main())
