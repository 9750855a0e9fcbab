"""Finds the CUDA sources in ``kernels/``, from a checkout and from an installed wheel."""

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


def kernel_source(name):
    """The text of ``kernels/<name>``."""
    path = kernel_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"kernel source {name!r} not found in {kernel_dir()}")
    return path.read_text()
