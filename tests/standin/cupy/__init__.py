"""``import cupy`` resolves here when ``tests/standin`` and ``tests`` are on ``sys.path``: the CuPy
stand-in of ``tests/fake_cupy.py``, for commands run in a subprocess (``PYTHONPATH=tests/standin:tests``).
"""

import sys

import fake_cupy

sys.modules[__name__] = fake_cupy  # ``import cupy`` returns what sys.modules holds once this has run
sys.modules["cupy.cuda.nccl"] = fake_cupy.nccl
