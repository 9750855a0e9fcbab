"""The package's floors: imports point downwards only (tools -> the networks -> core -> parallel ->
backends), no circle, and no import between the three networks' packages (``mlp``, ``rnn``, ``dag``), which
are peers; modules small enough to read (``MAX_LINES``) and few loose at the top (``MAX_LOOSE``); tools and
profiling scripts on the library's public API only; tests that share helpers through ``tests/harness/helpers.py``,
never through each other.

Every module's imports are read with ``ast``, those inside functions included (a lazy import is still
a dependency), and resolved to modules of the package.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "leapfrog_gpu"
FLOOR = {"backends": 0, "parallel": 1, "core": 2, "loose": 2, "mlp": 3, "rnn": 3, "dag": 3, "face": 4, "tools": 5}
"""The floor of each room: a module may import from its own floor and below. ``loose``: the modules at the
library's top level (the plain reference); ``face``: the package's own ``__init__``."""
MODELS = ("mlp", "rnn", "dag")
"""The networks' packages: peers, none imports another."""
MAX_LINES = 400
MAX_LOOSE = 14
"""Modules at the library's top level, ``__init__`` and ``__main__`` included."""
LOOSE_TESTS = {"test_layout.py", "test_docs.py", "test_doc_examples.py", "test_packaging.py"}
"""The only test modules at the top of tests/, those of the repository as a whole; the others mirror the package."""
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_field_defaults", "_make"}
"""namedtuple's public methods and fields, underscored so as not to clash with field names."""


def module_name(path, package=PACKAGE):
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module):
    """The room of ``module``: its subpackage (``backends``, ``core``, ``mlp``, ...), ``face`` for the
    package's ``__init__``, ``tools`` for ``__main__`` (the tools' entry point), else ``loose``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "face"
    if module == "leapfrog_gpu.__main__":
        return "tools"
    return parts[1] if parts[1] in FLOOR else "loose"


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
    return sorted((a, b) for a, targets in edges.items() for b in targets if FLOOR[room(b)] > FLOOR[room(a)])


def across(edges):
    """Imports from one network's package into another's."""
    return sorted((a, b) for a, targets in edges.items() for b in targets
                  if room(a) in MODELS and room(b) in MODELS and room(a) != room(b))


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
    rooms = {module: room(module) for module in graph()}
    expected = {"backends": {"host", "cuda", "ops_cuda", "ops_numpy"}, "parallel": {"comm", "reducer"},
                "core": {"network", "plan", "handoff", "schedules", "capture", "checks", "controls"},
                "mlp": {"network", "plan", "naumov", "autotune"}, "rnn": {"network", "plan", "schedules", "scans"},
                "dag": {"network", "plan", "layers", "schedules", "forward"}, "tools": {"train.command", "bench.command"}}
    for name, modules in expected.items():
        held = {m.removeprefix(f"leapfrog_gpu.{name}.") for m, r in rooms.items() if r == name}
        assert modules <= held, f"{name} lacks {sorted(modules - held)}"
    assert rooms["leapfrog_gpu.reference"] == "loose"
    for package in [m for m in rooms if (PACKAGE.parent.joinpath(*m.split(".")) / "__init__.py").exists()]:
        path = PACKAGE.parent.joinpath(*package.split(".")) / "__init__.py"
        assert ast.get_docstring(ast.parse(path.read_text())), f"{package} needs a docstring saying what lives there"


def test_no_import_between_the_networks():
    assert across(graph()) == []


def test_few_modules_loose_at_the_top():
    loose = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_LOOSE, f"{len(loose)} modules at the library's top level: {loose}"


def test_the_tests_mirror_the_package():
    loose = {path.name for path in (ROOT / "tests").glob("test_*.py")}
    assert loose <= LOOSE_TESTS, f"test modules loose in tests/, not in the folder of what they test: {loose - LOOSE_TESTS}"


def test_no_import_points_upwards():
    assert upward(graph()) == []


def test_no_import_circle():
    assert cycles(graph()) == []


@pytest.fixture
def toy(tmp_path):
    """A package laid out like ours, whose modules' imports each test writes."""
    package = tmp_path / "leapfrog_gpu"
    for folder in (package, *(package / name for name in FLOOR if name not in ("loose", "face"))):
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").write_text('"""A room."""\n')
    return package


def test_the_checks_catch_an_upward_import_a_crossing_and_a_lazy_circle(toy):
    (toy / "backends" / "host.py").write_text("from ..core.network import Network\n")
    (toy / "core" / "network.py").write_text("def f():\n    from .schedules import Leapfrog\n")
    (toy / "core" / "schedules.py").write_text("def g():\n    from . import network\n")
    (toy / "mlp" / "plan.py").write_text("")
    (toy / "rnn" / "network.py").write_text("from ..mlp.plan import Plan\nfrom ..core import network\n")
    (toy / "tools" / "train.py").write_text("from ..rnn.network import RNN\nfrom ..backends import host\n")
    edges = graph(toy)
    assert upward(edges) == [("leapfrog_gpu.backends.host", "leapfrog_gpu.core.network")]
    assert across(edges) == [("leapfrog_gpu.rnn.network", "leapfrog_gpu.mlp.plan")]
    assert cycles(edges) == [["leapfrog_gpu.core.network", "leapfrog_gpu.core.schedules", "leapfrog_gpu.core.network"]]


# -- sizes, reach-ins, test imports -----------------------------------------------------------------


def oversized(package=PACKAGE, limit=MAX_LINES):
    """``path: N lines`` for each module of ``package`` longer than ``limit`` lines."""
    lengths = {path: len(path.read_text().splitlines()) for path in sorted(package.rglob("*.py"))}
    return [f"{path.relative_to(package.parent)}: {n} lines" for path, n in lengths.items() if n > limit]


def foreign_names(tree, package=PACKAGE.name):
    """The names ``tree`` binds by importing from outside ``package`` (``sys``, ``tqdm``, ``np``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(alias.asname or alias.name).partition(".")[0] for alias in node.names
                      if alias.name.partition(".")[0] != package}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").partition(".")[0] != package:
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def origin(node):
    """The name an attribute chain starts from (``a`` of ``a.b().c``), or None."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def reach_ins(paths, base=ROOT):
    """``path:line: X._name`` for each private attribute that ``paths`` reach for outside ``self`` and
    ``cls``: a single leading underscore, not a dunder, read off an object that is not a foreign module's
    (``sys._getframe``, ``os._exit`` and a ``tqdm`` import's internals are not the library's), nor one of
    namedtuple's public ``_replace``-like names. ``getattr(X, "_name")`` counts too."""
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(), str(path))
        foreign = foreign_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                owner, name = node.value, node.attr
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                owner, name = node.args[0], node.args[1].value
            else:
                continue
            if not name.startswith("_") or name.startswith("__") or name in NAMEDTUPLE_API:
                continue
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls") or origin(owner) in foreign:
                continue
            found.append((path.relative_to(base), node.lineno, node.col_offset, ast.unparse(node)))
    return [f"{path}:{line}: {code}" for path, line, _, code in sorted(found)]


def tool_paths(top=ROOT):
    """The tools' modules (``__main__`` among them) and the profiling scripts."""
    tools = sorted((top / "leapfrog_gpu" / "tools").rglob("*.py")) + sorted((top / "profiling").rglob("*.py"))
    return [path for path in [top / "leapfrog_gpu" / "__main__.py"] if path.exists()] + tools


def imports_of_test_modules(tests):
    """``path:line: import X`` for each import, in any Python file under ``tests``, of a test module
    (``test_*``) or of ``conftest``: what tests share lives in ``helpers.py``."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                modules = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            if any(part.startswith("test_") or part == "conftest" for module in modules for part in module.split(".")):
                found.append((path.relative_to(tests.parent), node.lineno, ast.unparse(node)))
    return [f"{path}:{line}: {code}" for path, line, code in sorted(found)]


def test_no_module_is_over_the_line_limit():
    found = oversized()
    assert not found, f"modules over {MAX_LINES} lines (split each along its ideas):\n" + "\n".join(found)


def test_tools_and_profiling_use_the_public_api_only():
    found = reach_ins(tool_paths())
    assert not found, "private members reached from tools or profiling (add what they need to the public API):\n" + (
        "\n".join(found))


def test_no_test_module_imports_another():
    found = imports_of_test_modules(ROOT / "tests")
    assert not found, "imports of test modules (shared helpers live in tests/harness/helpers.py):\n" + "\n".join(found)


def test_the_checks_catch_a_long_module_a_reach_in_and_a_test_import(toy, tmp_path):
    (toy / "mlp" / "network.py").write_text("x = 1\n" * MAX_LINES)
    (toy / "mlp" / "naumov.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert oversized(toy) == [f"leapfrog_gpu/mlp/naumov.py: {MAX_LINES + 1} lines"]
    (toy / "tools" / "cli.py").write_text(
        "import sys\nimport collections as c\nfrom tqdm import tqdm\nfrom ..network import MLP\n"
        "def f(net, point):\n"
        "    sys._getframe(); c.OrderedDict()._data; tqdm._instances; point._replace(x=1); net.__class__\n"
        "    net._plan(3)._buffers; MLP._forward; getattr(net, '_w'); getattr(net, 'weights')\n"
        "class T:\n"
        "    def g(self):\n"
        "        self._x; self.net._plan\n")
    assert reach_ins(tool_paths(tmp_path), tmp_path) == [
        "leapfrog_gpu/tools/cli.py:7: net._plan", "leapfrog_gpu/tools/cli.py:7: net._plan(3)._buffers",
        "leapfrog_gpu/tools/cli.py:7: MLP._forward", "leapfrog_gpu/tools/cli.py:7: getattr(net, '_w')",
        "leapfrog_gpu/tools/cli.py:10: self.net._plan"]
    tests = tmp_path / "tests"
    (tests / "fake").mkdir(parents=True)
    (tests / "test_a.py").write_text("import helpers\nfrom helpers import batch\nimport test_b\n")
    (tests / "test_b.py").write_text("def f():\n    from conftest import NO_GPU\n")
    (tests / "fake" / "streams.py").write_text("from . import queues\nfrom tests.test_a import x\n")
    assert imports_of_test_modules(tests) == ["tests/fake/streams.py:2: from tests.test_a import x",
                                   "tests/test_a.py:3: import test_b", "tests/test_b.py:2: from conftest import NO_GPU"]
