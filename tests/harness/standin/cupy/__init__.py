"""``import cupy`` resolves here when ``tests/harness/standin`` and ``tests/harness`` are on ``sys.path``: the CuPy
stand-in of ``tests/harness/fake_cupy``, for commands run in a subprocess (``PYTHONPATH=tests/harness/standin:tests/harness``).
``LEAPFROG_STANDIN_ORDER`` (``main-first``, ``workers-first``, ``random``) and
``LEAPFROG_STANDIN_SEED`` choose how its queues interleave; ``LEAPFROG_STANDIN_DEVICES`` (default 1) is
the number of devices, and ``LEAPFROG_STANDIN_NCCL=processes`` makes each rank of an ``mpiexec`` its own
NCCL rank (``fake_cupy.nccl``).
"""

import os
import sys

import fake_cupy

fake_cupy.reset(os.environ.get("LEAPFROG_STANDIN_ORDER", "main-first"), int(os.environ.get("LEAPFROG_STANDIN_SEED", "0")),
                devices=int(os.environ.get("LEAPFROG_STANDIN_DEVICES", "1")))
fake_cupy.nccl.use_processes(os.environ.get("LEAPFROG_STANDIN_NCCL") == "processes")
sys.modules.update(fake_cupy.modules())  # ``import cupy`` returns what sys.modules holds once this has run
