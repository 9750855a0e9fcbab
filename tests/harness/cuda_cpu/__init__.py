"""Runs the real ``kernels/*.cu`` on the CPU: a stand-in for ``cupy.RawModule`` built on cuda_cpu.h.

``RawModule(code=..., options=...)`` compiles the source with g++ into a shared library (cached on disk,
keyed by a hash of the header, the source and the options) and ``get_function(name)`` returns a kernel
called as CuPy's: ``kernel(grid, block, args)``, with NumPy arrays for device pointers. So
``CudaOps(cuda_cpu)`` from ``leapfrog_gpu.backends.ops_cuda`` runs unchanged, with the launch shapes and ``-D``
options of ``leapfrog_gpu.backends.launch``.

Global memory is bounds-checked: ``build`` compiles every ``T*`` of the source (``T``, ``float`` or
``double``, const or not) as ``cuda_cpu::global<T>``, a pointer that checks each access against the buffer
of the argument it comes from, so that an access outside an argument stops the launch (``KernelError``)
with the index and the buffer's size; a 16-byte access through ``reinterpret_cast<const float4*>`` (or
``double2``) checks the whole vector and its alignment. ``guarded(array)`` copies an array into memory with an
inaccessible page right after its last byte, for accesses the check cannot see (through a pointer that comes from no
argument): one past the end stops the launch too.

Libraries are cached in ``$CUDA_CPU_CACHE``, by default ``cuda_cpu-<uid>`` in the temporary directory.
"""

import ctypes
import hashlib
import json
import mmap
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

HEADER = Path(__file__).with_name("cuda_cpu.h")
CXX = os.environ.get("CXX", "g++")
# Hidden visibility and no GNU-unique symbols: each library keeps its own statics (the __shared__ arrays
# of two builds of one source with other -D options must not be merged when both are loaded). No contraction
# into fused multiply-adds: each * + - rounded on its own, as CUDA's __fmul_rn, __fadd_rn, ... are.
CXXFLAGS = ("-std=c++20", "-O1", "-ffp-contract=off", "-fPIC", "-shared", "-fvisibility=hidden", "-fno-gnu-unique",
            "-Wall", "-Wno-unknown-pragmas")
CACHE = Path(os.environ.get("CUDA_CPU_CACHE", Path(tempfile.gettempdir()) / f"cuda_cpu-{os.getuid()}"))

_CTYPES = {
    np.dtype(np.int32): ("i", ctypes.c_int32),
    np.dtype(np.int64): ("l", ctypes.c_int64),
    np.dtype(np.float32): ("f", ctypes.c_float),
    np.dtype(np.float64): ("d", ctypes.c_double),
}
_POINTER_CODES = {np.dtype(np.float32): "F", np.dtype(np.float64): "D"}


class KernelError(RuntimeError):
    """A launch the harness stopped: a divergent barrier, an out-of-range or invalid memory access, a bad
    launch."""


class BuildError(RuntimeError):
    """g++ rejected the kernel source; the message holds its log."""


def available():
    """Whether g++ is on the PATH (the harness needs nothing else)."""
    return shutil.which(CXX) is not None


def _defines(options):
    """The ``-D`` options for g++; ``-std=`` is the device dialect and stays with NVRTC."""
    defines = []
    for option in options:
        if option.startswith("-D"):
            defines.append(option)
        elif not option.startswith("-std="):
            raise ValueError(f"the CPU harness does not support the NVRTC option {option!r}")
    return defines


_POINTER = re.compile(r"(?<![\w:])((?:const\s+)?(?:T|float|double))\s*\*\s*")
"""A pointer type in a kernel source: ``T*``, ``const T*``, ``float*``, ``const double*`` and the like."""
_VECTOR_CAST = re.compile(r"reinterpret_cast<\s*((?:const\s+)?(?:float2|float4|double2))\s*\*\s*>\s*\(")
"""A cast of a pointer to a vector type: ``reinterpret_cast<const float4*>(``; group 1 is the type."""
_SHARED = re.compile(r"__shared__\s+(?:__align__\(\d+\)\s+)?\w+\s+(\w+)\s*\[")
"""A ``__shared__`` array's declaration; group 1 is its name."""


def checked(code):
    """``code`` with every pointer type ``X*`` of ``_POINTER`` spelled ``cuda_cpu::global<X>``, and the
    address of an element of a ``__shared__`` array, ``&tile[i][0]``, wrapped in ``cuda_cpu::global(...)``
    (unchecked), so that a device function template taking a ``global<T>`` deduces its ``T`` from it; a
    cast of a pointer to a vector type, ``reinterpret_cast<const float4*>(p)``, becomes
    ``cuda_cpu::vector_cast<const float4>(p)``, whose accesses check the bounds and the alignment."""
    code = _POINTER.sub(r"cuda_cpu::global<\1> ", code)
    code = _VECTOR_CAST.sub(r"cuda_cpu::vector_cast<\1>(", code)
    for name in set(_SHARED.findall(code)):
        code = re.sub(rf"&{name}((?:\[[^\[\]]*\])+)", rf"cuda_cpu::global(&{name}\1)", code)
    return code


def build(code, options=()):
    """Compile ``code`` (a .cu source), its pointers ``checked``, with g++ into a cached shared library.

    Returns its path and a description: the kernel names, and the offsets and sizes of the ``__shared__``
    statics next to the offset of ``cuda_cpu_error`` (to locate them once loaded).
    """
    code = checked(code)
    defines = _defines(options)
    key = hashlib.sha256(
        "\0".join([HEADER.read_text(), code, *defines, *CXXFLAGS, CXX]).encode()
    ).hexdigest()[:24]
    library = CACHE / f"{key}.so"
    description = CACHE / f"{key}.json"
    if library.exists() and description.exists():
        return library, json.loads(description.read_text())
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        work = Path(work)
        (work / "kernel.cu").write_text(code)
        # Kernel names come from the preprocessed source, so that macro-generated kernels are found.
        names = _kernel_names(_run([CXX, "-std=c++20", "-E", "-P", *defines, "-include", str(HEADER),
                                    "-x", "c++", str(work / "kernel.cu")]))
        exports = "".join(f"CUDA_CPU_EXPORT({name})\n" for name in names)
        (work / "launch.cpp").write_text(f'#include "{_precompiled()}"\n#include "kernel.cu"\n{exports}')
        _run([CXX, *CXXFLAGS, *defines, "-o", str(work / "kernel.so"), str(work / "launch.cpp")])
        symbols = _symbols(_run(["nm", "-S", "--defined-only", str(work / "kernel.so")]))
        info = {"names": names, "anchor": symbols["cuda_cpu_error"][0], "shared": _shared(symbols)}
        (work / "kernel.json").write_text(json.dumps(info))
        os.replace(work / "kernel.json", description)
        os.replace(work / "kernel.so", library)  # last: its presence means the entry is complete
    return library, info


def _precompiled():
    """The header, copied into ``CACHE`` beside its precompiled form (``.gch``, which g++ reads in its place: the
    standard headers it includes are most of a kernel's compile time), made once per header and flags."""
    key = hashlib.sha256("\0".join([HEADER.read_text(), *CXXFLAGS, CXX]).encode()).hexdigest()[:24]
    header = CACHE / f"cuda_cpu-{key}.h"
    if not Path(f"{header}.gch").exists():
        with tempfile.TemporaryDirectory(dir=CACHE) as work:
            copy = Path(work) / header.name
            copy.write_text(HEADER.read_text())
            flags = [flag for flag in CXXFLAGS if flag != "-shared"]
            _run([CXX, *flags, "-Wno-pragma-once-outside-header", "-x", "c++-header", "-o", f"{copy}.gch", str(copy)])
            os.replace(copy, header)
            os.replace(f"{copy}.gch", f"{header}.gch")  # last: its presence means both are there
    return header


def _run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"{' '.join(command)} failed:\n{result.stderr}")
    return result.stdout


def _kernel_names(preprocessed):
    return sorted(set(re.findall(r'extern\s+"C"\s+void\s+(\w+)\s*\(', preprocessed)))


def _symbols(nm_output):
    """``{name: (offset, size, type)}`` from ``nm -S``."""
    symbols = {}
    for line in nm_output.splitlines():
        fields = line.split()
        if len(fields) == 4:
            symbols[fields[3]] = (int(fields[0], 16), int(fields[1], 16), fields[2])
    return symbols


def _shared(symbols):
    """The ``__shared__`` arrays: function-local statics (``_ZZ``) in data, outside namespace cuda_cpu.

    Device code has no other function-local statics, so these are exactly the kernels' shared memory.
    """
    return [
        [offset, size]
        for name, (offset, size, kind) in symbols.items()
        if name.startswith("_ZZ") and not name.startswith("_ZZN8cuda_cpu") and kind in "bBdD"
    ]


class RawModule:
    """``cupy.RawModule`` on the CPU: ``RawModule(code=source, options=(...)).get_function(name)``."""

    def __init__(self, code, options=()):
        path, info = build(code, tuple(options))
        self.names = info["names"]
        self._library = ctypes.CDLL(str(path))
        self._library.cuda_cpu_error.restype = ctypes.c_char_p
        base = ctypes.cast(self._library.cuda_cpu_error, ctypes.c_void_p).value - info["anchor"]
        count = len(info["shared"])
        self._library.cuda_cpu_set_shared(
            (ctypes.c_void_p * count)(*(base + offset for offset, _ in info["shared"])),
            (ctypes.c_size_t * count)(*(size for _, size in info["shared"])),
            ctypes.c_int(count),
        )

    def get_function(self, name):
        if name not in self.names:
            raise KeyError(f"kernel {name!r} not in the module (it has {', '.join(self.names)})")
        return Kernel(self._library, name)


class Kernel:
    """One ``extern "C" __global__`` function, launched as ``kernel(grid, block, args)``."""

    def __init__(self, library, name):
        self.name = name
        self._launch = getattr(library, f"cuda_cpu_{name}")
        self._launch.argtypes = (ctypes.POINTER(ctypes.c_uint),) * 2 + (ctypes.POINTER(ctypes.c_void_p),)
        signature = getattr(library, f"cuda_cpu_signature_{name}")
        signature.restype = ctypes.c_char_p
        self.signature = signature().decode()
        self._error = library.cuda_cpu_error

    def __call__(self, grid, block, args):
        codes, values = zip(*map(_pack, args)) if args else ((), ())
        if "".join(codes) != self.signature:
            raise TypeError(
                f"{self.name} takes arguments of types {self.signature!r}, got {''.join(codes)!r} "
                "(F/D float*/double*, f/d float/double, i/l int32/int64)"
            )
        pointers = (ctypes.c_void_p * len(values))(*(ctypes.addressof(value) for value in values))
        dims = [(ctypes.c_uint * 3)(*(tuple(d) + (1,) * (3 - len(d)))) for d in (grid, block)]
        if self._launch(dims[0], dims[1], pointers) != 0:
            raise KernelError(f"{self.name}: {self._error().decode()}")


class _Buffer(ctypes.Structure):
    """``cuda_cpu::Buffer``: what a pointer parameter receives, the array's address and its elements."""

    _fields_ = (("data", ctypes.c_void_p), ("size", ctypes.c_longlong))


def _pack(arg):
    if isinstance(arg, np.ndarray):
        if not arg.flags.c_contiguous or arg.dtype not in _POINTER_CODES:
            raise TypeError(f"array arguments must be C-contiguous float32/float64, got {arg.dtype}")
        return _POINTER_CODES[arg.dtype], _Buffer(arg.ctypes.data, arg.size)
    if isinstance(arg, np.generic) and arg.dtype in _CTYPES:
        code, ctype = _CTYPES[arg.dtype]
        return code, ctype(arg.item())
    raise TypeError(f"kernel arguments must be NumPy arrays or NumPy scalars, got {type(arg).__name__}")


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_FILL = 0xFF  # every byte 0xFF: a NaN in float32 and in float64
_PROT_NONE = 0  # PROT_NONE on Linux and macOS


def guarded(array):
    """A copy of ``array`` whose last byte ends right before an inaccessible page.

    A page that cannot be touched sits before the array too; the bytes between it and the array's first
    element are NaN, and ``untouched_before(copy)`` says whether they still are (a write before the start).
    """
    array = np.ascontiguousarray(array)
    page = mmap.PAGESIZE
    pages = -(-max(array.nbytes, 1) // page)
    memory = mmap.mmap(-1, (pages + 2) * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    for start in (base, base + (pages + 1) * page):
        if _libc.mprotect(start, page, _PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")
    memory[page:(pages + 1) * page] = bytes([_FILL]) * (pages * page)
    offset = (pages + 1) * page - array.nbytes
    copy = np.frombuffer(memory, array.dtype, array.size, offset).reshape(array.shape)
    copy[...] = array
    return copy


def untouched_before(copy):
    """Whether the slack between the front guard page and ``copy`` still holds its fill bytes."""
    start = copy.ctypes.data
    first = start - start % mmap.PAGESIZE
    return ctypes.string_at(first, start - first) == bytes([_FILL]) * (start - first)
