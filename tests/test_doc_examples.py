"""Every code block of the documents runs, or is parsed, as a reader would use it.

The documents: README.md, docs/*.md, kernels/README.md and profiling/**/*.md. Every code block in them
is fenced (an indented code block outside a list is refused: nothing would check it), and a fence
names its language. The rules, by language:

- ``python``: run. Each document's blocks run in order, in one namespace per document, as a reader
  pastes them one after another, in a fresh Python process (in a scratch folder) where ``import cupy``
  fails, so that ``backend="auto"`` is the NumPy backend, with a limit on each block's CPU time (``BLOCK_SECONDS``,
  every thread's: other work on the machine does not stretch it, as it would a wall-clock time).
  The examples are written small: they run as shipped, at the sizes printed, nothing shrunk. A failure
  names the document and the line of the block, and the traceback names the document's own lines.
  Blocks that use PyTorch are skipped, with the reason, where torch does not import.
- ``bash``, ``sh``, ``shell``, ``console`` (the lines after a ``$`` prompt): parsed. Each line is split
  into commands (``&&``, ``||``, ``;``, ``|``; comments dropped; ``VAR=value`` and ``mpiexec`` prefixes
  removed), and every command must be one this test knows how to check: ``leapfrog-train`` and
  ``leapfrog-bench`` (``python -m leapfrog_gpu`` too) are parsed by the command's own argparse parser,
  so every option must exist and every value must parse; ``python FILE.py`` and ``bash FILE.sh`` must
  name a file of the repository, whose ``--help`` (a Python script) or text (a shell script) names every
  option given; ``pip install -e '.[EXTRA,...]'`` must name extras of pyproject.toml; the setup commands
  of ``SETUP`` are left alone. The commands of ``RUN`` are cheap, and are also run here, on NumPy, and
  their output checked against what the documents say of it. Nothing else is run: a command that needs a
  GPU, ``mpiexec``, a download or minutes (a benchmark, the test suite itself) is parsed, not run.
- any other language (``text``: a diagram, a table, a command's output): left alone.

A ``python`` block may be kept from running only by a comment on the line just before its fence,
``<!-- not run: WHY -->``, which must give its reason; such a block is still compiled. Keep them rare.
"""

import dataclasses
import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from leapfrog_gpu.core.torch_io import INSTALL

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted({ROOT / "README.md", ROOT / "kernels" / "README.md", *ROOT.glob("docs/*.md"),
                    *ROOT.glob("profiling/**/*.md")})
RUN_LANGUAGES = {"python"}
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
BLOCK_SECONDS = 30
"""A block's limit of CPU time; every example takes well under two seconds on an idle core."""
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+)\s*([\w+-]*)\s*$")
SETUP = {("python", "-m", "venv"), ("python3", "-m", "venv"), (".",), ("source",), ("python", "-m", "pytest")}
"""Commands left alone: a fresh environment, its activation, the test suite (which runs this test)."""
RUN = {"leapfrog-train": "test_the_readme_training_command_reaches_its_accuracy"}
"""Commands cheap enough to run here, exactly as a document gives them, and the test that runs each."""
MARKDOWN = ".md"  # a scratch document's suffix, kept apart from its stem: tests/test_docs.py reads names
MPI_OPTIONS_WITHOUT_VALUE = {"-l", "-prepend-rank", "-verbose"}


@dataclasses.dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str  # its lines, the fence's indentation removed
    not_run: str | None  # the reason given in a <!-- not run: ... --> comment just before it

    @property
    def where(self):
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}" if self.path.is_relative_to(ROOT) \
            else f"{self.path}:{self.line}"


def blocks(path):
    """The fenced code blocks of the Markdown file ``path``, in order."""
    found, lines, at = [], path.read_text(encoding="utf-8").splitlines(), 0
    while at < len(lines):
        opening = FENCE.match(lines[at])
        if not opening:
            at += 1
            continue
        indent, ticks, language = opening.groups()
        end = next((i for i in range(at + 1, len(lines)) if lines[i].strip() == ticks), None)
        assert end is not None, f"{path}:{at + 1}: a fence that is never closed"
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[at + 1:end]]
        previous = lines[at - 1] if at else ""
        reason = NOT_RUN.match(previous)
        found.append(Block(path, at + 1, language.lower(), "\n".join(body) + "\n", reason and reason.group(1)))
        at = end + 1
    return found


def indented_code(path):
    """Lines that open an indented code block (four spaces after a blank line, outside a fence and a
    list): such a block has no language, so nothing here would run or parse it."""
    found, fenced, in_list, previous = [], False, False, ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            if re.match(r"\s*([-*+]|\d+[.)])\s", line):
                in_list = True
            elif line.strip() and not line.startswith(" "):
                in_list = False
            if line.startswith("    ") and line.strip() and not previous.strip() and not in_list:
                found.append(f"{path.relative_to(ROOT).as_posix()}:{number}: {line.strip()[:60]}")
        previous = line
    return found


def every_block(languages):
    return [block for path in DOCUMENTS for block in blocks(path) if block.language in languages]


# -- python blocks --------------------------------------------------------------------------------------

RUNNER = r"""
import json, sys, time, traceback
sys.modules["cupy"] = None  # CuPy does not import: backend="auto" is the NumPy backend
namespace = {"__name__": "__main__"}
for block in json.load(sys.stdin):
    start = time.process_time()
    try:
        code = compile("\n" * block["first"] + block["text"], block["path"], "exec")  # the document's line numbers
        if block["not_run"]:
            continue
        exec(code, namespace)
    except BaseException:
        sys.stdout.flush()
        print(f"\n{block['where']}: this block raised:\n{traceback.format_exc()}", file=sys.stderr)
        sys.exit(1)
    seconds = time.process_time() - start
    sys.stdout.flush()
    print(json.dumps({"where": block["where"], "seconds": seconds}), file=sys.stderr, flush=True)
    if seconds > block["limit"]:
        print(f"{block['where']}: this block took {seconds:.1f} s of CPU time, over its {block['limit']} s",
              file=sys.stderr)
        sys.exit(1)
"""


def run_python_blocks(chosen, timeout=None, cwd=None):
    """Run the blocks ``chosen`` (of one document) in order in one namespace, in a fresh process;
    return (exit status, stdout, stderr)."""
    payload = [{"path": str(b.path), "where": b.where, "first": b.line, "text": b.text, "not_run": b.not_run,
                "limit": BLOCK_SECONDS} for b in chosen]
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(payload), capture_output=True,
                              text=True, cwd=cwd or scratch, timeout=timeout or BLOCK_SECONDS * len(chosen) + 60,
                              env=_environment())
    return done.returncode, done.stdout, done.stderr


def _environment():
    import os

    env = dict(os.environ, MPLBACKEND="Agg")
    env.pop("PYTHONPATH", None)  # the package as installed, not the stand-ins of tests/harness
    return env


def _needs_torch(block):
    return "torch" in block.text  # import torch, net.to_torch(), MLP.from_torch(...)


def _torch_imports():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


PYTHON_DOCUMENTS = [path for path in DOCUMENTS if any(b.language in RUN_LANGUAGES for b in blocks(path))]


@pytest.mark.parametrize("path", PYTHON_DOCUMENTS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_python_blocks_run(path):
    chosen = [b for b in blocks(path) if b.language in RUN_LANGUAGES]
    skipped = None
    if not _torch_imports():
        first = next((i for i, b in enumerate(chosen) if _needs_torch(b)), None)
        if first is not None:
            chosen, skipped = chosen[:first], chosen[first]
    status, out, err = run_python_blocks(chosen)
    assert status == 0, f"{path.relative_to(ROOT).as_posix()}: a python block failed\n{err}"
    ran = [json.loads(line)["where"] for line in err.splitlines() if line.startswith('{"where"')]
    assert ran == [b.where for b in chosen if not b.not_run], err
    if skipped is not None:
        pytest.skip(f"torch does not import ({INSTALL}): {skipped.where} and the blocks after it "
                    "were not run")


def test_a_failing_block_is_named_by_document_and_line(tmp_path):
    """The runner itself: a NameError in the second block of a document fails with that block's
    document, the line of its fence, and the document's own line in the traceback; the first block's
    names are seen by the second."""
    doc = tmp_path / ("example" + MARKDOWN)
    doc.write_text("# Example\n\n```python\nimport numpy as np\nx = np.ones(3)\n```\n\nThen:\n\n"
                   "```python\ny = 2 * x\nz = y + undefined_name\n```\n", encoding="utf-8")
    status, out, err = run_python_blocks(blocks(doc), cwd=tmp_path)
    assert status == 1
    assert f"{doc}:10: this block raised" in err, err
    assert f'File "{doc}", line 12' in err and "NameError: name 'undefined_name' is not defined" in err, err
    assert "z = y + undefined_name" in err, err  # the document's line, as the traceback shows it


def test_a_block_over_its_time_limit_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "BLOCK_SECONDS", 0.2)
    doc = tmp_path / ("slow" + MARKDOWN)
    doc.write_text(("```python\nimport time\nstart = time.process_time()\nwhile time.process_time() < start + 0.5:\n"
                    "    pass\n```\n"), encoding="utf-8")
    status, out, err = run_python_blocks(blocks(doc), cwd=tmp_path)
    assert status == 1 and f"{doc}:1: this block took" in err, err


def test_blocks_not_run_say_why(tmp_path):
    """A block kept from running says why; it is still compiled, and the blocks around it run."""
    doc = tmp_path / ("skip" + MARKDOWN)
    doc.write_text("```python\nx = 1\n```\n\n<!-- not run: it needs a GPU -->\n```python\nimport cupy\n```\n\n"
                   "```python\nassert x == 1\n```\n", encoding="utf-8")
    found = blocks(doc)
    assert [b.not_run for b in found] == [None, "it needs a GPU", None]
    assert run_python_blocks(found, cwd=tmp_path)[0] == 0
    unmarked = [b for path in DOCUMENTS for b in blocks(path) if b.not_run is not None]
    assert all(b.not_run for b in unmarked), [b.where for b in unmarked if not b.not_run]
    assert all(b.language in RUN_LANGUAGES for b in unmarked), [b.where for b in unmarked]


# -- every block is fenced and labelled -----------------------------------------------------------------


def test_every_code_block_is_fenced_with_a_language():
    unlabelled = [b.where for path in DOCUMENTS for b in blocks(path) if not b.language]
    assert not unlabelled, f"fences without a language (python, bash, text, ...): {unlabelled}"
    indented = [line for path in DOCUMENTS for line in indented_code(path)]
    assert not indented, "indented code blocks (fence them, ```python or ```text):\n" + "\n".join(indented)


def test_an_indented_code_block_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    doc = tmp_path / ("a" + MARKDOWN)
    doc.write_text("Text.\n\n    net = MLP([2, 2])\n\n- a list item\n\n    its second paragraph\n\n```text\n\n"
                   "    inside a fence\n```\n", encoding="utf-8")
    assert indented_code(doc) == ["a" + MARKDOWN + ":3: net = MLP([2, 2])"]


# -- shell blocks ---------------------------------------------------------------------------------------


def commands(block):
    """The commands of a shell block, each a list of words, ``VAR=value`` and ``mpiexec`` prefixes removed."""
    text = block.text
    if block.language == "console":
        text = "\n".join(line[2:] for line in text.splitlines() if line.startswith("$ "))
    text = re.sub(r"\\\n", " ", text)
    text = re.sub(r"\$\([^()]*\)", "VALUE", text)  # $(git rev-parse --short HEAD)
    text = re.sub(r"<[^<>\n]+>", "VALUE", text)  # placeholders: COMMIT=<the commit, short>
    found = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        words = []
        for word in [*lexer, ";"]:
            if word in {"&&", "||", ";", "|", "&"}:
                if words:
                    found.append(_unprefixed(words))
                words = []
            else:
                words.append(word)
    return [words for words in found if words]


def _unprefixed(words):
    while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
        words = words[1:]
    if words and words[0] in ("mpiexec", "mpirun"):
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[1 if words[0] in MPI_OPTIONS_WITHOUT_VALUE else 2:]
    return words


def parse_with_the_commands_parser(words):
    """Parse ``leapfrog-train ...`` or ``leapfrog-bench ...`` with the command's own parser; return the
    one line its parser writes on an error, or None. ``--help`` and ``--version`` parse."""
    import contextlib
    import io

    program, argv = words[0], list(words[1:])
    if program == "leapfrog-train":
        from leapfrog_gpu.tools.train.options import build_parser

        chosen = build_parser()
    else:
        from leapfrog_gpu.tools.bench import command

        model = next((argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--model"), None)
        model = next((word.split("=", 1)[1] for word in argv if word.startswith("--model=")), model)
        chosen = command.SUITES.get(model, command.SUITES["mlp"]).parser()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            chosen.parse_args(argv)
    except SystemExit as leaving:
        if leaving.code not in (0, None):
            return said.getvalue().strip() or f"exit status {leaving.code}"
    return None


def _help_of(script):
    done = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=_environment())
    assert done.returncode == 0, f"python {script} --help: exit status {done.returncode}\n{done.stderr}"
    return done.stdout


def _extras():
    """The extras pyproject.toml declares (read by hand: tomllib is Python 3.11's)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([\w-]+)\s*=", section, re.M))


def command_problems(words, helps=None):
    """What is wrong with one command of a shell block, as a list of sentences (empty: nothing)."""
    helps = {} if helps is None else helps
    program, shown = words[0], shlex.join(words)
    if program in ("python", "python3") and words[1:3] == ["-m", "leapfrog_gpu"]:
        words, program = ["leapfrog-train", *words[3:]], "leapfrog-train"
    if program in ("leapfrog-train", "leapfrog-bench"):
        refusal = parse_with_the_commands_parser(words)
        return [] if refusal is None else [f"{shown}: its parser refuses it: {refusal}"]
    if any(tuple(words[:len(prefix)]) == prefix for prefix in SETUP):
        return []
    if program == "pip" and words[1:2] == ["install"]:
        targets = [word for word in words[2:] if not word.startswith("-")]
        problems = []
        for target in targets:
            local = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", target)
            if local is None:
                problems.append(f"{shown}: installs {target}, which is not this package; add it to SETUP if a "
                                "reader needs it")
                continue
            unknown = set((local.group(1) or "").split(",")) - _extras() - {""}
            problems += [f"{shown}: pyproject.toml has no extra {name!r}" for name in sorted(unknown)]
        return problems
    if program in ("python", "python3", "bash", "sh") and len(words) > 1 and re.search(r"\.(py|sh)$", words[1]):
        script, options = words[1], [w.split("=", 1)[0] for w in words[2:] if w.startswith("--")]
        if not (ROOT / script).is_file():
            return [f"{shown}: {script} is not a file of the repository"]
        if not options:
            return []
        if script.endswith(".py"):
            text = helps.setdefault(script, _help_of(script))
        else:
            text = (ROOT / script).read_text(encoding="utf-8")
        return [f"{shown}: {script} has no option {option}" for option in options
                if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text)]
    return [f"{shown}: a command this test does not know how to check; check it here, or add it to SETUP"]


SHELL_BLOCKS = every_block(SHELL_LANGUAGES)


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda block: block.where)
def test_command_lines_parse(block):
    found = commands(block)
    assert found, f"{block.where}: a {block.language} block with no command"
    helps = {}
    problems = [problem for words in found for problem in command_problems(words, helps)]
    assert not problems, f"{block.where}:\n" + "\n".join(problems)


def test_a_bad_command_line_is_caught(tmp_path):
    """Each check of a shell block fails where it should: an unknown option, a value that does not
    parse, a missing script, an unknown extra, an unknown command."""
    doc = tmp_path / ("bad" + MARKDOWN)
    doc.write_text("```bash\nleapfrog-train --epochs 2 --no-such-option\n"
                   "OUT=x mpiexec -n 2 leapfrog-bench --sizes 1024 --k 0 && leapfrog-bench --model rnn --tau 8 "
                   "--depths 3\n"
                   "leapfrog-bench --model rnn --tau 16  # a comment; --bogus\n"
                   "pip install -e '.[nothing]' && python profiling/nowhere.py\n"
                   "make everything\n```\n", encoding="utf-8")
    block, = blocks(doc)
    found = commands(block)
    assert found == [["leapfrog-train", "--epochs", "2", "--no-such-option"],
                     ["leapfrog-bench", "--sizes", "1024", "--k", "0"],
                     ["leapfrog-bench", "--model", "rnn", "--tau", "8", "--depths", "3"],
                     ["leapfrog-bench", "--model", "rnn", "--tau", "16"],
                     ["pip", "install", "-e", ".[nothing]"], ["python", "profiling/nowhere.py"],
                     ["make", "everything"]]
    # the commands take no prefix of an option for the option: --layer is not --layers
    layer = command_problems(["leapfrog-bench", "--model", "rnn", "--layer", "8"])
    assert "unrecognized arguments: --layer 8" in layer[0]
    problems = [command_problems(words) for words in found]
    assert "unrecognized arguments: --no-such-option" in problems[0][0]
    assert "every worker stream count must be >= 1" in problems[1][0]
    assert "unrecognized arguments: --depths 3" in problems[2][0]  # the rnn bench has --tau, no --depths
    assert problems[3] == []
    assert "no extra 'nothing'" in problems[4][0]
    assert "not a file of the repository" in problems[5][0]
    assert "does not know how to check" in problems[6][0]


def test_every_document_block_is_counted():
    """What this test covers today, so that a block that escapes every rule shows here."""
    counted = {language: len(every_block({language})) for language in RUN_LANGUAGES | SHELL_LANGUAGES}
    assert counted["python"] >= 8 and counted["bash"] >= 10, counted
    assert {"leapfrog-train", "leapfrog-bench"} <= {words[0] for b in SHELL_BLOCKS for words in commands(b)}


# -- commands run here ----------------------------------------------------------------------------------


def test_the_readme_training_command_reaches_its_accuracy():
    """The README's first command ends in ``leapfrog-train``, "about 97 % test accuracy" on the digits;
    docs/training.md shows its output. Run as given (the NumPy backend, CuPy kept out), it must reach it."""
    readme = [words for b in blocks(ROOT / "README.md") if b.language in SHELL_LANGUAGES for words in commands(b)]
    assert ["leapfrog-train"] in readme
    assert "about 97 % test accuracy" in (ROOT / "README.md").read_text(encoding="utf-8")
    code = ("import sys; sys.modules['cupy'] = None; sys.argv = ['leapfrog-train']\n"
            "from leapfrog_gpu.tools import leapfrog_train; sys.exit(leapfrog_train())")
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                              cwd=scratch, env=_environment())
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", last).group(1))
    assert last.startswith("done: 30 epochs") and 96 <= accuracy <= 98.5, last


def test_run_lists_only_commands_the_documents_give():
    given = {shlex.join(words) for b in SHELL_BLOCKS for words in commands(b)}
    assert set(RUN) <= given, set(RUN) - given
    assert all(callable(globals().get(name)) for name in RUN.values())
