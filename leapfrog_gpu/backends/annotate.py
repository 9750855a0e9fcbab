"""NVTX ranges for Nsight Systems, in one line each: ``with annotate.range("backward"): ...``.

Uses the ``nvtx`` package when importable, else ``cupy.cuda.nvtx`` when CuPy was built with NVTX, else
nothing. Ranges are only emitted when a profiler has injected itself (``NVTX_INJECTION64_PATH`` is set,
as ``nsys`` does) or when ``LEAPFROG_NVTX=1``; otherwise ``range`` returns a shared null context and
costs one function call. ``LEAPFROG_NVTX=0`` turns them off under a profiler too.
"""

import contextlib
import os

_NULL = contextlib.nullcontext()


def _provider():
    try:
        import nvtx

        return "nvtx", nvtx.push_range, nvtx.pop_range
    except ImportError:
        pass
    try:
        from cupy.cuda import nvtx as cupy_nvtx

        # CuPy built without NVTX imports, with a placeholder here that has no functions at all.
        return "cupy.cuda.nvtx", cupy_nvtx.RangePush, cupy_nvtx.RangePop
    except (ImportError, AttributeError):
        return None, None, None


def _wanted():
    forced = os.environ.get("LEAPFROG_NVTX")
    if forced is not None:
        return forced not in ("", "0")
    return bool(os.environ.get("NVTX_INJECTION64_PATH"))


PROVIDER, _push, _pop = _provider() if _wanted() else (None, None, None)
"""Which library emits the ranges (``None``: ranges are off)."""


@contextlib.contextmanager
def _range(name):
    _push(name)
    try:
        yield
    finally:
        _pop()


def range(name):  # noqa: A001 - reads as annotate.range(...)
    """A context manager that brackets its body with an NVTX range called ``name``."""
    return _NULL if _push is None else _range(name)


def push(name):
    """Open a range on the calling thread (for host streams, which open and close on their own thread)."""
    if _push is not None:
        _push(name)


def pop():
    """Close the innermost range of the calling thread."""
    if _pop is not None:
        _pop()


enabled = _push is not None
