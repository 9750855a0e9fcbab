"""The package's three rooms: imports point downwards only (tools -> library -> backends), no circle.

Every module's imports are read with ``ast``, those inside functions included (a lazy import is still
a dependency), and resolved to modules of the package.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "leapfrog_gpu"
RANK = {"backends": 0, "library": 1, "tools": 2}


def module_name(path, package=PACKAGE):
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module):
    """``backends``, ``tools`` or ``library`` (the top level; ``__main__`` is the tools' entry point)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("backends", "tools"):
        return parts[1]
    return "tools" if module == "leapfrog_gpu.__main__" else "library"


def imports(path, package=PACKAGE):
    """The package modules that ``path`` imports, anywhere in its body."""
    name = module_name(path, package)
    modules = {module_name(p, package) for p in package.rglob("*.py")}
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import x`: the module pkg.x if there is one, else an attribute of pkg
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]  # `import pkg.mod.attr` or a third-party module
            if target and target != name:
                found.add(target)
    return found


def graph(package=PACKAGE):
    return {module_name(p, package): imports(p, package) for p in sorted(package.rglob("*.py"))}


def upward(edges):
    return sorted((a, b) for a, targets in edges.items() for b in targets if RANK[room(b)] > RANK[room(a)])


def cycles(edges):
    """Every import circle, as a list of modules, found by depth-first search."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                found.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_every_module_sits_in_a_room_and_the_rooms_hold_what_the_readme_says():
    edges = graph()
    rooms = {module: room(module) for module in edges}
    assert {"leapfrog_gpu.network", "leapfrog_gpu.schedules", "leapfrog_gpu.naumov", "leapfrog_gpu.autotune",
            "leapfrog_gpu.reference", "leapfrog_gpu.functions"} <= {m for m, r in rooms.items() if r == "library"}
    assert {"leapfrog_gpu.backends.host", "leapfrog_gpu.backends.cuda", "leapfrog_gpu.backends.ops_cuda",
            "leapfrog_gpu.backends.ops_numpy"} <= {m for m, r in rooms.items() if r == "backends"}
    assert {"leapfrog_gpu.tools.train", "leapfrog_gpu.tools.bench"} <= {m for m, r in rooms.items() if r == "tools"}
    for package in ("leapfrog_gpu", "leapfrog_gpu.backends", "leapfrog_gpu.tools"):
        path = PACKAGE.parent.joinpath(*package.split(".")) / "__init__.py"
        assert ast.get_docstring(ast.parse(path.read_text())), f"{package} needs a docstring saying what lives there"


def test_no_import_points_upwards():
    assert upward(graph()) == []


def test_no_import_circle():
    assert cycles(graph()) == []


@pytest.fixture
def toy(tmp_path):
    """A package laid out like ours, whose modules' imports each test writes."""
    package = tmp_path / "leapfrog_gpu"
    for folder in (package, package / "backends", package / "tools"):
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").write_text('"""A room."""\n')
    return package


def test_the_checks_catch_an_upward_import_and_a_lazy_circle(toy):
    (toy / "backends" / "host.py").write_text("from ..network import MLP\n")
    (toy / "network.py").write_text("def f():\n    from .schedules import Leapfrog\n")
    (toy / "schedules.py").write_text("def g():\n    from . import network\n")
    (toy / "tools" / "train.py").write_text("from ..network import MLP\nfrom ..backends import host\n")
    edges = graph(toy)
    assert upward(edges) == [("leapfrog_gpu.backends.host", "leapfrog_gpu.network")]
    assert cycles(edges) == [["leapfrog_gpu.network", "leapfrog_gpu.schedules", "leapfrog_gpu.network"]]


MAX_LINES = 420
"""The most lines a module of the library or of the backends may hold."""


def long_modules(package=PACKAGE, rooms=("library", "backends")):
    """``(module, lines)`` for every module of ``rooms`` over ``MAX_LINES`` lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        lines = len(path.read_text().splitlines())
        if room(module) in rooms and lines > MAX_LINES:
            found.append((module, lines))
    return found


def reach_ins(path):
    """``(line, "X._name")`` for every attribute access with one leading underscore whose ``X`` is not
    ``self``, ``cls`` or a module imported from outside the package (``os._exit`` is the standard
    library's business): a reach-in into a private member of the library."""
    tree = ast.parse(path.read_text(), str(path))
    outside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            outside |= {(alias.asname or alias.name).split(".")[0] for alias in node.names
                        if not alias.name.startswith("leapfrog_gpu")}
        elif isinstance(node, ast.ImportFrom) and not node.level and not (node.module or "").startswith("leapfrog_gpu"):
            outside |= {alias.asname or alias.name for alias in node.names}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in {"self", "cls"} | outside:
            continue
        found.append((node.lineno, f"{ast.unparse(base)}.{node.attr}"))
    return sorted(found)


def test_no_module_of_the_library_or_the_backends_is_over_420_lines():
    assert long_modules() == []


def test_tools_and_profiling_use_the_public_api_only():
    paths = sorted(PACKAGE.joinpath("tools").rglob("*.py")) + sorted((PACKAGE.parent / "profiling").glob("*.py"))
    found = {str(path.relative_to(PACKAGE.parent)): reach_ins(path) for path in paths}
    assert {path: hits for path, hits in found.items() if hits} == {}


def test_the_checks_catch_a_long_module_and_a_reach_in(toy):
    (toy / "network.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (toy / "backends" / "host.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(toy) == [("leapfrog_gpu.network", MAX_LINES + 1)]
    (toy / "tools" / "bench.py").write_text(
        "import os\nfrom ..network import MLP\n\n\nclass Bench:\n    def run(self, net):\n"
        "        self._net = net\n        os._exit(0)\n        return net._plan(3).reducer, MLP([2, 2])._w\n")
    assert reach_ins(toy / "tools" / "bench.py") == [(9, "MLP([2, 2])._w"), (9, "net._plan")]
