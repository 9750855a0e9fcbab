"""Backends: where arrays live and how streams run. ``get_backend`` picks one by name.

Everything that knows whether an array is on the host or the device lives here: the host streams
(``host``) and the CUDA streams (``cuda``), the kernel launchers (``ops_cuda``) and their NumPy twins
(``ops_numpy``), launch shapes (``launch``), the kernel sources (``sources``), NVTX ranges
(``annotate``) and timing on a stream, the timeline's per-launch stamps included (``timing``). Modules
here import each other and third-party packages only, never the library above them or the tools.
"""

import dataclasses
import importlib.util
import logging

from .host import NumpyBackend

BACKENDS = ("auto", "numpy", "cupy")
log = logging.getLogger("leapfrog_gpu")
_said = set()  # the fallbacks already logged: each is said once per process


@dataclasses.dataclass(frozen=True)
class CudaStatus:
    """Whether CuPy can run here: ``usable``; else whether it is ``installed`` and ``why`` not, in words
    that carry what CUDA said (the error, the CuPy and driver versions)."""

    usable: bool
    installed: bool
    why: str = ""


def cuda_status():
    """Probe CuPy and the CUDA driver (this imports CuPy: call it only where a GPU may be wanted)."""
    if importlib.util.find_spec("cupy") is None:
        return CudaStatus(False, False, "CuPy is not installed")
    try:
        import cupy
    except Exception as error:  # noqa: BLE001 - a broken install counts as no GPU, and says why
        return CudaStatus(False, True, f"CuPy does not import: {_first_line(error)}")
    if cupy.is_available():
        gap = _compiler_gap(cupy)
        return CudaStatus(not gap, True, gap)
    runtime = cupy.cuda.runtime  # is_available() keeps CUDA's answer to itself: ask again
    try:
        problem = "no CUDA device" if runtime.getDeviceCount() == 0 else "no usable CUDA device"
    except Exception as error:  # noqa: BLE001 - CUDARuntimeError: "cudaErrorInsufficientDriver: ..."
        problem = _first_line(error)
    return CudaStatus(False, True, f"CuPy {cupy.__version__} finds no usable GPU: {problem} ({_versions(runtime)})")


def cuda_available():
    """True when CuPy imports and a CUDA device is usable."""
    return cuda_status().usable


def resolve(name):
    """``"numpy"`` or ``"cupy"``: the backend that ``name`` (one of ``BACKENDS``) stands for here; for
    ``"auto"``, CuPy when a GPU is usable, the choice logged and a fallback's reason warned once."""
    if not isinstance(name, str):
        raise TypeError(f"backend must be a string, one of {', '.join(map(repr, BACKENDS))}; got {name!r}")
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}; got {name!r}")
    if name == "auto":
        status = cuda_status()
        name = "cupy" if status.usable else "numpy"
        log.info("backend 'auto' chose %r%s", name, f": {status.why}" if status.why else "")
        if status.installed and not status.usable and status.why not in _said:
            _said.add(status.why)
            log.warning("backend 'auto' runs on numpy: %s", status.why)
    return name


def get_backend(name="auto", **options):
    """A backend by name: ``"numpy"``, ``"cupy"``, or ``"auto"`` (CuPy when a GPU is usable).

    ``options`` go to ``NumpyBackend`` (``mode``, ``blas_threads``, ...), or to ``CupyBackend``
    (``chain``). The choice is logged on the ``leapfrog_gpu`` logger and shown by the backend's repr;
    when CuPy is installed but cannot run, ``"auto"`` says why once, as a warning (printed on stderr
    unless logging is configured).
    """
    name = resolve(name)
    if name == "numpy":
        return NumpyBackend(**options)
    if set(options) - {"chain"}:
        raise ValueError(f"options {sorted(set(options) - {'chain'})} apply to the numpy backend only")
    status = cuda_status()
    if not status.installed:
        raise RuntimeError(
            "backend 'cupy' needs CuPy: pip install 'leapfrog_gpu[cuda12]' (in a checkout, pip install -e "
            "'.[cuda12]'; [cuda13] for CUDA 13), or use backend='numpy'"
        )
    if not status.usable:
        raise RuntimeError(f"backend 'cupy' cannot run: {status.why}; use backend='numpy'")
    from .cuda import CupyBackend

    return CupyBackend(**options)


def to_host(array):
    """``array`` as a NumPy array: a CuPy array copied to the host (on the current stream), a NumPy one as it is."""
    return array.get() if hasattr(array, "get") else array


def _compiler_gap(cupy):
    """What CuPy 14 lacks here to compile a ``RawModule``, in words that name what brings it, or "".

    CuPy 14 finds NVRTC and the CUDA headers through ``cuda.pathfinder`` (in a CUDA toolkit at
    ``CUDA_PATH``, or in NVIDIA's wheels), and raises only when the first kernel compiles; older CuPy
    has no ``cuda.pathfinder`` and finds them its own way.
    """
    try:
        from cuda import pathfinder
    except ImportError:
        return ""
    missing = []
    try:
        pathfinder.load_nvidia_dynamic_lib("nvrtc")
    except Exception:  # noqa: BLE001 - DynamicLibNotFoundError and its kin: not there
        missing.append("NVRTC (libnvrtc)")
    if pathfinder.find_nvidia_header_directory("cudart") is None:
        missing.append("the CUDA runtime headers (cuda_runtime.h)")
    if not missing:
        return ""
    try:
        major = cupy.cuda.runtime.runtimeGetVersion() // 1000
    except Exception:  # noqa: BLE001 - unreadable: name both
        major = None
    wheels = f"'cupy-cuda{major}x[ctk]'" if major in (12, 13) else "'cupy-cuda12x[ctk]' (or 'cupy-cuda13x[ctk]')"
    return (f"CuPy {cupy.__version__} cannot compile kernels here: {' and '.join(missing)} not found; pip install "
            f"{wheels}, which the leapfrog_gpu[cuda{major or 12}] extra brings, or set CUDA_PATH to a CUDA toolkit")


def _versions(runtime):
    """The driver's CUDA version and that of CuPy's CUDA runtime, as far as they can be read."""
    parts = []
    for what, read in (("NVIDIA driver", "driverGetVersion"), ("CuPy's CUDA runtime", "runtimeGetVersion")):
        try:
            version = getattr(runtime, read)()
        except Exception:  # noqa: BLE001 - unreadable: say so
            parts.append(f"{what}: unreadable")
            continue
        parts.append(f"{what}: {version // 1000}.{version % 1000 // 10}" if version else f"{what}: none found")
    return "; ".join(parts)


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
