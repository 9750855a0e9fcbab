"""Finds the CUDA sources in ``kernels/``, from a checkout and from an installed wheel.

``cupy.RawModule(code=...)`` compiles one text with no include path, so ``kernel_source`` replaces each
``#include "name.h"`` of a header in ``kernels/`` by that header's text, between ``#line`` markers that
keep compiler messages pointing at the right file and line.
"""

import re
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # leapfrog_gpu/


def kernel_dir():
    """The folder holding ``*.cu``: ``leapfrog_gpu/kernels`` in a wheel, ``kernels/`` in a checkout."""
    for candidate in (_PACKAGE / "kernels", _PACKAGE.parent / "kernels"):
        if any(candidate.glob("*.cu")):
            return candidate
    raise FileNotFoundError(
        f"no CUDA sources found in {_PACKAGE / 'kernels'} or {_PACKAGE.parent / 'kernels'}; "
        "reinstall leapfrog_gpu, or run from a checkout that has the kernels/ folder"
    )


def kernel_files():
    """Every kernel source file, sorted by name."""
    return sorted(kernel_dir().glob("*.cu"))


_INCLUDE = re.compile(r'^#include "(\w+\.h)"$', re.M)


def kernel_source(name):
    """The text of ``kernels/<name>``, its headers from ``kernels/`` inlined (see the module docstring)."""
    text = _read(name)

    def inline(match):
        line = text.count("\n", 0, match.start()) + 2  # the line after the #include
        return f'#line 1 "{match.group(1)}"\n{_read(match.group(1))}#line {line} "{name}"'

    return _INCLUDE.sub(inline, text)


def _read(name):
    path = kernel_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"kernel source {name!r} not found in {kernel_dir()}")
    return path.read_text()
