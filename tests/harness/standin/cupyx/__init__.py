"""``import cupyx`` (and ``cupyx.profiler``) for the CuPy stand-in: see ``tests/harness/standin/cupy``."""

import sys

import cupy  # noqa: F401 - installs the stand-in's modules, cupyx included

sys.modules[__name__] = sys.modules["cupyx"]
