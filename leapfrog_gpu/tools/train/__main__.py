"""``python -m leapfrog_gpu.tools.train``: the ``leapfrog-train`` command."""

import sys

from .. import leapfrog_train

sys.exit(leapfrog_train())
