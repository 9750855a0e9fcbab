"""The documents hold together: the README stays a front door, and no reference points at nothing.

Every ``*.py``, ``*.md``, ``*.sh``, ``*.cu``, ``*.h`` and ``*.toml`` file of the repository (outside
``.git`` and virtual environments) is read for names of Markdown files, which must exist relative to
the repository root or to the referring file; a ``docs/design.md §n`` must name a ``## n.`` section of
it. The package's own paths (``leapfrog_gpu/mlp/plan.py``) must exist, and its dotted names
(``leapfrog_gpu.core.capture``, ``leapfrog_gpu.mlp.autotune.tune``) must be a module, or a name a module
defines. In Markdown files every relative link must reach a file from the linking file's own folder (as a
repository browser resolves it), and a ``#fragment`` must be a heading of the target.
"""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_LINES = 200
SUFFIXES = (".py", ".md", ".sh", ".cu", ".h", ".toml")
SKIPPED_DIRS = {".git", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist"}
DESIGN = "docs/design.md"

MD_NAME = re.compile(r"(?<![\w./-])((?:\.\.?/)*(?:[\w-][\w.-]*/)*[\w-][\w.-]*\.md)(?![\w-])")
"""A Markdown file's name in any text: ``README.md``, ``docs/design.md``, ``../kernels/README.md``; not a
pattern (``*.md``) nor the tail of a URL."""
SECTION = re.compile(re.escape(DESIGN) + r"\s*§\s*(\d+)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
PACKAGE_PATH = re.compile(r"(?<![\w./-])(leapfrog_gpu(?:/[\w.]+)+)")
"""A path into the package: ``leapfrog_gpu/core/plan.py``, ``leapfrog_gpu/dag/``."""
DOTTED = re.compile(r"(?<![\w./-])(leapfrog_gpu(?:\.[A-Za-z_]\w*)+)(?![\w-])")
"""A dotted name in the package: ``leapfrog_gpu.tools.bench.runner``, ``leapfrog_gpu.mlp.autotune.tune``."""
SHIPPED = {"leapfrog_gpu/kernels": "kernels"}
"""Where a path of the installed package lies in the repository."""


def scanned_files(root=ROOT):
    """The files whose references are checked, in a stable order. The skipped folders are not entered:
    tests running beside this one write and remove folders in some of them (``.hypothesis``)."""
    found = []
    for folder, subfolders, files in os.walk(root):
        folder = Path(folder)
        subfolders[:] = [name for name in subfolders if name not in SKIPPED_DIRS and not name.endswith(".egg-info")
                         and not (folder / name / "pyvenv.cfg").exists()]  # nor a virtual environment
        found += [folder / name for name in files if Path(name).suffix in SUFFIXES and (folder / name).is_file()]
    return sorted(found)


def slug(heading):
    """The fragment a repository browser gives a Markdown heading: lower case, punctuation dropped,
    spaces turned into hyphens."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def headings(path):
    """The fragments of every heading of the Markdown file ``path`` (a repeated one gets ``-1``, ``-2``)."""
    fragments, seen, fence = set(), {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        found = None if fence else HEADING.match(line)
        if found:
            base = slug(found.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            fragments.add(base if count == 0 else f"{base}-{count}")
    return fragments


def design_sections(root=ROOT):
    """The numbers of the ``## n.`` sections of docs/design.md."""
    path = root / DESIGN
    if not path.is_file():
        return set()
    return {int(n) for n in re.findall(r"^## (\d+)\. ", path.read_text(encoding="utf-8"), re.M)}


def broken_references(root=ROOT):
    """Every reference that points at nothing, as ``file:line: what``."""
    sections = design_sections(root)
    problems = []
    for path in scanned_files(root):
        where = path.relative_to(root).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            at = f"{where}:{number}"
            for name in MD_NAME.findall(line):
                if not ((root / name).exists() or (path.parent / name).exists()):
                    problems.append(f"{at}: names {name}, which is neither at the repository root nor beside {where}")
            for n in SECTION.findall(line):
                if int(n) not in sections:
                    problems.append(f"{at}: cites {DESIGN} §{n}, but {DESIGN} has no '## {n}.' section "
                                    f"(it has §{', §'.join(map(str, sorted(sections))) or ' none'})")
            if where == DESIGN:
                for n in re.findall(r"(?<![\w.])§(\d+)", line):
                    if int(n) not in sections:
                        problems.append(f"{at}: cites its own §{n}, which it does not have")
            if path.suffix == ".md":
                problems.extend(f"{at}: {problem}" for problem in _link_problems(root, path, line))
            problems.extend(f"{at}: {problem}" for problem in _code_problems(root, line))
    return problems


def _code_problems(root, line):
    for name in PACKAGE_PATH.findall(line):
        name = name.rstrip(".")
        shipped = next((name.replace(k, v, 1) for k, v in SHIPPED.items() if name.startswith(k)), name)
        if not (root / shipped).exists():
            yield f"names {name}, which is not in the repository"
    for name in DOTTED.findall(line):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):  # the longest prefix that is a module or a package
            module = root.joinpath(*parts[:cut])
            source = module / "__init__.py" if module.is_dir() else module.with_suffix(".py")
            if source.is_file() or (cut == 2 and parts[1] == "kernels"):
                break
        else:
            yield f"names {name}, which is not a module of the repository"
            continue
        rest = parts[cut:]
        if len(rest) > 1 or rest and not _defines(source.read_text(encoding="utf-8"), rest[0]):
            yield f"names {name}, but {'.'.join(parts[:cut])} has no {rest[0]}"


def _defines(source, name):
    """Whether module ``source`` defines ``name`` (a function, class, assignment, import, or a public name
    a package's face lists)."""
    if name.startswith("__") and name.endswith("__"):
        return True  # a module's own attributes: __file__, __version__
    return bool(re.search(rf"^\s*(?:def|class)\s+{name}\b|^\s*{name}\s*[:=]|\bimport\b.*\b{name}\b|"
                          rf"[\"']{name}[\"']", source, re.M))


def _link_problems(root, path, line):
    for target in LINK.findall(line):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if file_part and not linked.exists():
            yield f"links to {target}, but {file_part} is not there relative to {path.relative_to(root).as_posix()}"
        elif fragment and linked.suffix == ".md" and fragment not in headings(linked):
            yield f"links to {target}, but {linked.relative_to(root).as_posix()} has no heading #{fragment}"


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_LINES, (
        f"README.md has {len(lines)} lines, over {README_LINES}: move the detail into docs/ and link to it")


def test_design_notes_have_their_six_numbered_sections():
    assert design_sections() == set(range(1, 7))


def test_every_reference_points_at_something():
    problems = broken_references()
    assert not problems, f"{len(problems)} references point at nothing:\n" + "\n".join(problems)


def test_the_check_finds_what_is_broken(tmp_path):
    """A tree with one reference of each kind gone wrong: the check names every one of them."""
    missing, pkg = "nowhere" + ".md", "leapfrog" + "_gpu"  # spelt apart, so this file names neither
    (tmp_path / "docs").mkdir()
    (tmp_path / DESIGN).write_text("# Notes\n\n## 1. One\n\nSee §1 and §3.\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(
        f"# T\n\n[ok](docs/design.md#1-one) [gone](docs/{missing}) [bad](docs/design.md#2-two)\n", encoding="utf-8")
    (tmp_path / "code.py").write_text(f'"""See {DESIGN} §1, {DESIGN} §7 and {missing}."""\n'
                                      f'# {pkg}/core/plan.py, {pkg}/gone.py, {pkg}.core.plan.Plan,\n'
                                      f'# {pkg}.core.plan.Gone, {pkg}.nowhere\n', encoding="utf-8")
    (tmp_path / "leapfrog_gpu" / "core").mkdir(parents=True)
    (tmp_path / "leapfrog_gpu" / "core" / "plan.py").write_text("class Plan:\n    pass\n", encoding="utf-8")
    venv = tmp_path / "venv"
    (venv / "lib").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("", encoding="utf-8")
    (venv / "lib" / "x.py").write_text(f"# {missing}\n", encoding="utf-8")  # a virtual environment is not read
    problems = broken_references(tmp_path)
    assert len(problems) == 9, "\n".join(problems)
    expected = [("README.md:3", f"docs/{missing}"), ("README.md:3", "#2-two"),
                ("code.py:1", "§7"), ("code.py:1", f"names {missing}"), ("docs/design.md:5", "§3"),
                ("code.py:2", f"{pkg}/gone.py, which is not"), ("code.py:3", f"{pkg}.core.plan has no Gone"),
                ("code.py:3", f"{pkg}.nowhere, which is not a module")]
    for where, what in expected:
        assert any(p.startswith(where) and what in p for p in problems), (where, what, problems)


@pytest.mark.parametrize("heading, fragment", [
    ("## 3. The host-stream executor", "3-the-host-stream-executor"),
    ("### `--k auto`", "--k-auto"),
    ("## When data parallelism pays: an estimate, not a measurement",
     "when-data-parallelism-pays-an-estimate-not-a-measurement"),
])
def test_fragments_are_those_of_a_repository_browser(heading, fragment):
    assert slug(heading.lstrip("#").strip()) == fragment
