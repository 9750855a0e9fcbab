"""Backends: where arrays live and how streams run. ``get_backend`` picks one by name.

Everything that knows whether an array is on the host or the device lives here: the host streams
(``host``) and the CUDA streams (``cuda``), the kernel launchers (``ops_cuda``) and their NumPy twins
(``ops_numpy``), launch shapes (``launch``), the kernel sources (``sources``), NVTX ranges
(``annotate``) and timing on a stream (``timing``). Modules here import each other and third-party
packages only, never the library above them or the tools.
"""

import logging

from .host import NumpyBackend

BACKENDS = ("auto", "numpy", "cupy")
log = logging.getLogger("leapfrog_gpu")


def cuda_available():
    """True when CuPy imports and a CUDA device is usable."""
    try:
        import cupy
    except ImportError:
        return False
    try:
        return bool(cupy.is_available())
    except Exception:  # noqa: BLE001 - a broken driver counts as no GPU
        return False


def get_backend(name="auto", **options):
    """A backend by name: ``"numpy"``, ``"cupy"``, or ``"auto"`` (CuPy when a GPU is usable).

    ``options`` go to ``NumpyBackend`` (``mode``, ``blas_threads``, ...), or to ``CupyBackend``
    (``chain``). The choice is logged on the ``leapfrog_gpu`` logger and shown by the backend's repr.
    """
    if not isinstance(name, str):
        raise TypeError(f"backend must be a string, one of {', '.join(map(repr, BACKENDS))}; got {name!r}")
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}; got {name!r}")
    if name == "auto":
        name = "cupy" if cuda_available() else "numpy"
        log.info("backend 'auto' chose %r", name)
    if name == "numpy":
        return NumpyBackend(**options)
    if set(options) - {"chain"}:
        raise ValueError(f"options {sorted(set(options) - {'chain'})} apply to the numpy backend only")
    try:
        import cupy  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "backend 'cupy' needs CuPy: pip install 'leapfrog_gpu[cuda12]' (or [cuda13]), or use backend='numpy'"
        ) from None
    from .cuda import CupyBackend

    return CupyBackend(**options)
