"""``import nvmath`` (and ``nvmath.bindings.cublas``) for the CuPy stand-in: its cuBLAS bindings
(``tests/harness/fake_cupy/nvmath.py``), for commands run in a subprocess (``PYTHONPATH=tests/harness/standin:tests/harness``)."""

import sys

import cupy  # noqa: F401 - the stand-in's device first
import fake_cupy.nvmath

sys.modules.update(fake_cupy.nvmath.modules())  # ``import nvmath`` returns what sys.modules holds once this has run
