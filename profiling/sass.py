"""What a kernel's sm_90 code holds: registers and static shared memory, and its SASS instructions counted.

``compiled(filename, defines)`` builds ``kernels/<filename>`` as the launchers build it (NVRTC, ``-arch=sm_90``,
CuPy's own options) and reads the cubin with ``cuobjdump``: ``-res-usage`` for the registers and shared memory,
``-sass`` for the instructions. Each instruction is counted by its opcode (``LDG.E.128``, ``FFMA``, ...), once
over the whole function (``"sass"``) and once over its hot loop (``"hot"``): the loop (the instructions between
a backward branch and its target) that holds the most multiply-adds, the narrowest such if several do, which is
where a kernel that has one spends its time; a reduction or a store that runs once a thread is left out.
Counts are static: each instruction once, whichever path of a branch a launch takes. What a build gives
(``build``: NVRTC's log with ptxas's report, the PTX and the cubin) and what ``cuobjdump`` reads of the cubin are
kept on disk (``CACHE``), by the source, the options and the versions of NVRTC and ``cuobjdump``: the compile
test, the kernel model and its tests build the same modules in several processes.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from cuda.bindings import nvrtc

from leapfrog_gpu.backends import launch
from leapfrog_gpu.backends.sources import kernel_source

FMA = r"[FD]FMA(\..*)?"
"""A multiply-add's opcode, float32 or float64."""
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
"""An instruction: its address, its predicate, its opcode and its operands."""
CACHE = Path(os.environ.get("LEAPFROG_SASS_CACHE", Path(tempfile.gettempdir()) / f"leapfrog-sass-{os.getuid()}"))
"""Where ``inspect`` keeps what it read, one JSON file a module (``$LEAPFROG_SASS_CACHE``, by default
``leapfrog-sass-<uid>`` in the temporary directory)."""


@lru_cache(maxsize=None)
def compiled(filename, defines):
    """``inspect`` of ``kernels/<filename>`` built as the launchers build it with ``defines``."""
    return inspect(kernel_source(filename), filename, (*launch.compile_options(defines), *launch.CUPY_OPTIONS))


def inspect(source, filename, options):
    """``{function: {"registers", "shared", "sass": {opcode: count}, "hot": {opcode: count}}}`` of ``source``
    built for sm_90 (``build``), as ``cuobjdump`` reads its cubin; kept in ``CACHE`` too."""
    built = build(source, filename, (*options, "-arch=sm_90"))
    tool = Path(cuobjdump()).stat()
    kept = _kept([built["key"], tool.st_size, tool.st_mtime_ns], ".json")
    if kept.is_file():
        return json.loads(kept.read_text())
    functions = _read(built["cubin"])
    _keep(kept, json.dumps(functions).encode())
    return functions


def build(source, filename, options):
    """``{"log", "ptx", "cubin", "key"}`` of ``source`` compiled by NVRTC with ``options`` (an ``-arch=sm_XX``
    among them) and ``-Xptxas=-v``: NVRTC's log with ptxas's report of every kernel, the PTX and the path of the
    cubin, from ``CACHE`` where it was built before (the compile test and the kernel model build the same
    modules), under ``key``. A source NVRTC rejects raises a ``RuntimeError`` holding its log."""
    options = [*options, "-Xptxas=-v"]
    key = hashlib.sha256(json.dumps([source, filename, options, nvrtc_version()]).encode()).hexdigest()
    kept, cubin = _kept(key, ".json"), _kept(key, ".cubin")
    if not (kept.is_file() and cubin.is_file()):
        log, ptx, code = _compile(source, filename, options)
        _keep(cubin, code)
        _keep(kept, json.dumps({"log": log, "ptx": ptx}).encode())  # last: a kept log has its cubin beside it
    return {**json.loads(kept.read_text()), "cubin": cubin, "key": key}


def _kept(key, suffix):
    """The file of ``CACHE`` that keeps what ``key`` (a string, or a list of JSON values) names."""
    name = key if isinstance(key, str) else hashlib.sha256(json.dumps(key).encode()).hexdigest()
    return CACHE / f"{name}{suffix}"


def _keep(path, data):
    """Write ``data`` (bytes) to ``path`` whole or not at all, whichever process writes it first."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=CACHE, suffix=".tmp", delete=False) as out:
        out.write(data)
    os.replace(out.name, path)


def _compile(source, filename, options):
    """NVRTC's log, the PTX and the cubin of ``source``, compiled now."""
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    try:
        (status,) = nvrtc.nvrtcCompileProgram(program, len(options), [option.encode() for option in options])
        log = _got(program, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog).rstrip(b"\0").decode()
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC could not compile {filename} ({' '.join(options)}):\n{log}")
        ptx = _got(program, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX).rstrip(b"\0").decode()
        return log, ptx, _got(program, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _read(cubin):
    """``inspect``'s functions of the cubin at ``cubin``, read by ``cuobjdump`` now."""
    usage, sass = _cuobjdump("-res-usage", cubin), _cuobjdump("-sass", cubin)
    functions = {}
    for name, registers, shared in re.findall(r"Function (\w+):\s*REG:(\d+) STACK:\d+ SHARED:(\d+)", usage):
        functions[name] = {"registers": int(registers), "shared": int(shared), "sass": {}, "hot": {}}
    for name, body in re.findall(r"Function : (\w+)\n(.*?)(?=\n\s*Function : |\Z)", sass, re.S):
        instructions = [(int(address, 16), opcode, operands) for address, predicate, opcode, operands
                        in _INSTRUCTION.findall(body) if predicate.strip() != "@!PT"]  # @!PT: never runs
        for _, opcode, _ in instructions:
            _add(functions[name]["sass"], opcode)
        loops = [(int(target, 16), address) for address, opcode, operands in instructions if opcode == "BRA"
                 for target in re.findall(r"0x([0-9a-f]+)", operands) if int(target, 16) <= address]
        fmas = {loop: sum(1 for address, opcode, _ in instructions if loop[0] <= address <= loop[1]
                          and re.fullmatch(FMA, opcode)) for loop in loops}
        if fmas and max(fmas.values()) > 0:
            start, end = min(fmas, key=lambda loop: (-fmas[loop], loop[1] - loop[0]))
            for address, opcode, _ in instructions:
                if start <= address <= end:
                    _add(functions[name]["hot"], opcode)
    return functions


def _got(program, get_size, get):
    """The bytes of one of NVRTC's outputs of ``program`` (its log, PTX or cubin), as its size call counts them."""
    _, size = get_size(program)
    out = b" " * size
    get(program, out)
    return out


def _add(counts, opcode):
    counts[opcode] = counts.get(opcode, 0) + 1


def _cuobjdump(flag, path):
    tool = cuobjdump()
    done = subprocess.run([tool, flag, str(path)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{tool} {flag} failed: {done.stderr.strip()}")
    return done.stdout


def cuobjdump():
    """The ``cuobjdump`` of the test extras' ``nvidia-cuda-cuobjdump`` wheel, else the one on PATH."""
    try:
        import nvidia
        for root in map(Path, nvidia.__path__):
            for candidate in sorted(root.glob("cu*/bin/cuobjdump")):
                return str(candidate)
    except ImportError:
        pass
    found = shutil.which("cuobjdump")
    if found is None:
        raise FileNotFoundError("cuobjdump not found: pip install 'leapfrog_gpu[test]' (nvidia-cuda-cuobjdump)")
    return found


def count(counts, pattern):
    """The instructions of ``counts`` whose opcode matches ``pattern`` in full."""
    return sum(n for opcode, n in counts.items() if re.fullmatch(pattern, opcode))


WIDTHS = {"": 1, ".64": 2, ".128": 4}
"""Cycles of the L1/shared-memory data path a warp's access of each width takes: 128 bytes a cycle."""
_ACCESS = re.compile(r"(LDS|STS|LDG|LDGSTS)(?:\.E)?(?:\.BYPASS)?(?:\.U)?(\.64|\.128)?(?:\.ZFILL|\.CONSTANT)*")


def data_path_cycles(counts):
    """Cycles the L1/shared-memory data path spends on the accesses of ``counts``: shared loads and stores,
    global loads (through L1) and copies into shared memory, by their width, 32 lanes each, and the warp
    shuffles, one a cycle. Where one kind of access comes in several widths, only the widest are counted:
    a kernel's 16-byte path, which aligned rows take, beside the element-by-element one of the others."""
    widest = {}
    for opcode, n in counts.items():
        access = _ACCESS.fullmatch(opcode)
        if access:
            kind, width = access.group(1), WIDTHS[access.group(2) or ""]
            if width > widest.get(kind, (0, 0))[0]:
                widest[kind] = (width, 0)
            if width == widest[kind][0]:
                widest[kind] = (width, widest[kind][1] + n)
    return count(counts, r"SHFL\..*") + sum(width * n for width, n in widest.values())


def nvrtc_version():
    """``"major.minor"`` of the NVRTC that compiles the kernels: the model's numbers depend on it."""
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"
