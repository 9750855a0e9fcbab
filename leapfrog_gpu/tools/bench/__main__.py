"""``python -m leapfrog_gpu.tools.bench``: the ``leapfrog-bench`` command."""

import sys

from .. import leapfrog_bench

sys.exit(leapfrog_bench())
