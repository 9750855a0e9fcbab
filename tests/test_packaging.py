"""The kernels/ folder and the digits' split are found from a checkout and from an installed wheel, an installed
copy gives install hints for an installed package, and the package imports its modules as they are asked for."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from leapfrog_gpu.backends.sources import kernel_files

ROOT = Path(__file__).resolve().parent.parent


def test_checkout_finds_every_kernel():
    assert {path.name for path in kernel_files()} == {path.name for path in (ROOT / "kernels").glob("*.cu")}


def test_the_package_imports_nothing_of_its_own_until_asked_and_then_its_modules_by_name():
    """``import leapfrog_gpu`` imports none of its modules (a command starts at once) and shows no public name
    but ``__all__`` and its modules; ``leapfrog_gpu.datasets``, as an attribute, imports that module, as
    ``leapfrog_gpu.MLP`` imports its package; a name it lacks is an AttributeError."""
    script = ("import sys, leapfrog_gpu as lg\n"
              "print([name for name in sys.modules if name.startswith('leapfrog_gpu.')])\n"
              "print(' '.join(name for name in dir(lg) if name[0] != '_' and name not in lg.__all__))\n"
              "print(lg.datasets.__name__, lg.reference.__name__, lg.MLP.__name__)\n"
              "try:\n    lg.nothing\nexcept AttributeError as error:\n    print(error)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.stdout.splitlines() == ["[]", "backends core dag datasets mlp parallel reference rnn",
                                       "leapfrog_gpu.datasets leapfrog_gpu.reference MLP",
                                       "module 'leapfrog_gpu' has no attribute 'nothing'"], run.stderr


def source_copy(destination):
    """The checkout without what builds and runs leave in it (build/, *.egg-info, caches, virtual
    environments, dot-folders), copied to ``destination``: a build writes build/ and the egg-info there,
    not into the checkout, where tests running beside this one read them."""
    def ignored(folder, names):
        return {name for name in names if name.startswith(".") or name in ("build", "dist", "__pycache__")
                or name.endswith(".egg-info") or (Path(folder) / name / "pyvenv.cfg").exists()}

    return shutil.copytree(ROOT, destination, ignore=ignored)


def test_wheel_ships_the_kernels_and_finds_them_installed(tmp_path):
    source = source_copy(tmp_path / "source")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path, source],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("leapfrog_gpu-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for source in (ROOT / "kernels").glob("*.cu"):
        assert f"leapfrog_gpu/kernels/{source.name}" in names
    assert "leapfrog_gpu/digits_split.npz" in names
    for module in (ROOT / "leapfrog_gpu").rglob("*.py"):  # every package of the tree, each module of each
        assert module.relative_to(ROOT).as_posix() in names, f"the wheel lacks {module.relative_to(ROOT)}"

    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site, wheel],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stderr
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r}); import leapfrog_gpu, leapfrog_gpu.backends.sources as s;"
        "print(leapfrog_gpu.__file__); print(s.kernel_dir()); print(len(s.kernel_files()));"
        "from leapfrog_gpu.tools import cli; from leapfrog_gpu import datasets; print(datasets.digits().x_test.shape[1]); print(cli.pip_install('x'))"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    package, kernels, count, digits, hint = run.stdout.splitlines()
    assert package.startswith(str(site)), "the installed copy, not the checkout, must be imported"
    assert kernels == str(site / "leapfrog_gpu" / "kernels")
    assert int(count) == len(list((ROOT / "kernels").glob("*.cu")))
    assert (int(digits), hint) == (360, "pip install 'leapfrog_gpu[x]'")
