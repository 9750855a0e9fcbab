"""One PyTorch install line everywhere: every ``pip install`` of torch that the documents, the library's messages,
the profiling scripts, the tests and CI give is ``leapfrog_gpu.core.torch_io.INSTALL``, the CPU build (messages
and tests use the constant), and no ``[torch]`` extra is left to name: a pip extra cannot choose PyTorch's CPU
index, so on Linux it would bring the CUDA build of several GB."""

import re
from pathlib import Path

from leapfrog_gpu.core.torch_io import INSTALL

ROOT = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"pip3? install\b[^`)\"\n#]*")
"""A ``pip install`` command, up to what ends it in prose, a message or a script: a backtick, a parenthesis, a
double quote, a comment or the line's end."""
QUIET = re.compile(r"\s+(--quiet|-q)\b")
SPEAKING = ["docs/testing.md", "docs/performance.md", "docs/training.md", "docs/parameters.md"]
"""The files that tell how to install torch."""
CI = ROOT / ".ci" / "run"
"""CI's script, which installs the same version from the package index of its machines (no network there)."""


def files():
    """Every document, source file, profiling script and test of the repository."""
    found = {ROOT / "README.md", *ROOT.glob("kernels/*.md"), *ROOT.glob("docs/**/*.md"),
             *ROOT.glob("profiling/**/*.md"), *ROOT.glob("profiling/**/*.py"), *ROOT.glob("profiling/**/*.sh"),
             *ROOT.glob("leapfrog_gpu/**/*.py"), *ROOT.glob("tests/**/*.py")}
    return sorted(path for path in found if path != Path(__file__).resolve() and path.is_file())


def hints(text):
    """The ``pip install`` commands in ``text`` that install torch, ``--quiet`` left out; and every mention of
    a ``[torch]`` extra."""
    commands = [QUIET.sub("", m.group().strip()) for m in COMMAND.finditer(text) if "torch" in m.group()]
    return commands + re.findall(r"\[torch\]|extra 'torch'", text)


def test_the_line_is_the_cpu_build_of_one_version():
    assert re.fullmatch(r"pip install torch==\d+\.\d+\.\d+ --index-url https://download\.pytorch\.org/whl/cpu", INSTALL)


def test_every_install_hint_is_the_one_line():
    found = {path.relative_to(ROOT).as_posix(): hints(path.read_text(encoding="utf-8")) for path in files()}
    other = {path: [hint for hint in found_here if hint != INSTALL] for path, found_here in found.items()}
    assert not {path: wrong for path, wrong in other.items() if wrong}, f"give {INSTALL!r} (torch_io.INSTALL)"
    assert all(INSTALL in found[path] for path in SPEAKING)


def test_ci_installs_the_version_of_the_line():
    assert hints(CI.read_text(encoding="utf-8")) == [INSTALL.split(" --index-url")[0]]


def test_hints_are_found_where_they_disagree():
    """The reader itself, on the hints this repository once gave."""
    text = ("(`pip install -e '.[torch]'`) and pip install --quiet torch==2.13.0  # pinned\n"
            f'reason="needs torch (extra \'torch\')"; `{INSTALL}`; pip install --quiet -e \'.[test]\'\n')
    assert hints(text) == ["pip install -e '.[torch]'", "pip install torch==2.13.0", INSTALL, "[torch]", "extra 'torch'"]


def test_pyproject_has_no_torch_extra():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # by hand: tomllib is Python 3.11's
    extras = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    assert "cuda12" in extras and not [line for line in extras.splitlines() if "torch" in line]
