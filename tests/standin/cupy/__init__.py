"""``import cupy`` resolves here when ``tests/standin`` and ``tests`` are on ``sys.path``: the CuPy
stand-in of ``tests/fake_cupy``, for commands run in a subprocess (``PYTHONPATH=tests/standin:tests``).
``LEAPFROG_STANDIN_ORDER`` (``main-first``, ``workers-first``, ``random``) and
``LEAPFROG_STANDIN_SEED`` choose how its queues interleave.
"""

import os
import sys

import fake_cupy

fake_cupy.reset(os.environ.get("LEAPFROG_STANDIN_ORDER", "main-first"), int(os.environ.get("LEAPFROG_STANDIN_SEED", "0")))
sys.modules.update(fake_cupy.modules())  # ``import cupy`` returns what sys.modules holds once this has run
