"""What the command-line tools share: a parser whose errors are one line, with ``--version`` and its exit statuses
in ``--help``, argument types (a path is never empty), a file that cannot be written said in one line
(``writing``), or refused before anything is measured (``output_refusal``), sizes too large for the machine said
in one line (``too_large``, ``refusing_too_large``), the ``--backend`` choice said in the command line's words,
install hints as the README gives them, and lines that fit the terminal's 100 columns."""

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import textwrap
from pathlib import Path

from .. import __version__
from ..parallel.launcher import launcher_rank
from ..backends import cuda_status, host_blas
from ..core.files import regular, replaced_atomically

WIDTH = 100
"""Columns that a line of a command's own output (not a table's row) may take."""

MOST = 2**31 - 1
"""The largest integer an option takes: a width or a count beyond a C int fits no machine's memory, and overflows what
takes counts as C ints (BLAS threads)."""

UNWRITTEN = 5
"""The exit status of a command that could not write a file it was asked for (a full disk, a folder gone)."""


class Unwritten(Exception):
    """A file a command writes could not be written: exit status ``UNWRITTEN``, with this one line."""


@contextlib.contextmanager
def writing(what):
    """An OSError in the block raised as ``Unwritten``: ``cannot write {what} ({why})``."""
    try:
        yield
    except OSError as error:
        raise Unwritten(f"cannot write {what} ({error.strerror or error})") from None


@contextlib.contextmanager
def written_whole(what, path, mode="w"):
    """``path`` open for writing in ``mode`` ("w" or "wb") in the block, put in its place whole once the block ends or
    not at all (``core.files.replaced_atomically``); an OSError (a full disk) raised as ``Unwritten`` of ``what``."""
    text = {} if "b" in mode else {"encoding": "utf-8"}
    with writing(what), replaced_atomically(path) as tmp, open(tmp, mode, **text) as out:
        yield out


class Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported in one line on stderr, exit status 2 (not argparse's usage block),
    and no option taken by a prefix of its name (``--epoch 5`` is an error, not ``--epochs 5``). Under mpiexec
    rank 0 alone says what is wrong, and prints ``--help`` and ``--version`` (the rank comes from the launcher,
    before MPI starts). With
    ``exit_on_error=False`` every bad argument raises ``argparse.ArgumentError`` instead, unrecognized ones too."""

    def __init__(self, *args, exit_statuses=(), **kwargs):
        """``exit_statuses``: ``[(status, meaning)]``, listed at the end of ``--help``."""
        if exit_statuses:
            kwargs.update(formatter_class=argparse.RawDescriptionHelpFormatter, epilog=listed(exit_statuses))
        super().__init__(*args, allow_abbrev=False, **kwargs)
        self.add_argument("--version", action=Version, version=f"{self.prog} {__version__}")

    def error(self, message):
        if not self.exit_on_error:
            raise argparse.ArgumentError(None, message)
        self.exit(2, f"{self.prog}: error: {message}\n" if launcher_rank() == 0 else None)

    def print_help(self, file=None):
        if launcher_rank() == 0:
            super().print_help(file)

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, where a negative number, or a list of numbers that starts with one, that argparse would take for
        an option (``--lr -1e-3``, ``--lr -inf``, ``--betas -0.1,0.9``) is the value of the option before it, so
        that the option's own check says what is wrong with it."""
        args = list(sys.argv[1:] if args is None else args)
        single = {option for action in self._actions if action.nargs is None for option in action.option_strings}
        end = args.index("--") if "--" in args else len(args)
        for i in reversed(range(end - 1)):
            if args[i] in single and args[i + 1].startswith("-") and _numbers(args[i + 1]):
                args[i:i + 2] = [f"{args[i]}={args[i + 1]}"]
        return super().parse_known_args(args, namespace)


def listed(exit_statuses):
    """``--help``'s list of ``exit_statuses``, ``[(status, meaning)]``: ``Parser``'s epilog."""
    return "exit status:\n" + "\n".join(
        textwrap.fill(f"{status:<5}{meaning}", 78, initial_indent="  ", subsequent_indent=" " * 7)
        for status, meaning in exit_statuses)


class Version(argparse.Action):
    """``--version``: the program's name and version on stdout (rank 0's alone under mpiexec), then exit."""

    def __init__(self, option_strings, version, dest=argparse.SUPPRESS, default=argparse.SUPPRESS):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help="show the version and exit")
        self.version = version

    def __call__(self, parser, namespace, values, option_string=None):
        if launcher_rank() == 0:
            print(self.version)
        parser.exit()


def png_refusal(option, path, beside=""):
    """Why ``option`` cannot write its chart, a PNG, to ``path``, or ``None`` when the name ends in .png
    (``beside``: what else it writes there, for the message)."""
    if str(path).lower().endswith(".png"):
        return None
    return f"{option} {path}: the chart is written as PNG: give a name ending in .png{beside}"


def output_refusal(option, path):
    """Why ``option`` cannot write a file at ``path``, in one line, or ``None``: its folder exists, ``path`` is not
    a folder itself, its name is no longer than the folder's file system takes, a file there is one this process
    may write, and where there is none yet a new file can be made in the folder (tried, not read from its
    permissions, which root passes even in /proc). A device or a pipe (``/dev/stdout``) is written as it is."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"{option} {path}: the folder {folder} does not exist"
    if os.path.isdir(path):
        return f"{option} {path}: it is a folder; give a file's name"
    with contextlib.suppress(OSError):  # a file system that does not say: the write itself will
        longest = os.pathconf(folder, "PC_NAME_MAX")
        if len(os.fsencode(os.path.basename(path))) > longest:
            return f"{option} {path}: its name is longer than the {longest} bytes a file's name may have there"
    if os.path.exists(path):
        if regular(path) and not os.access(path, os.W_OK):
            return f"{option} {path}: the file is not writable; give another name, or make it writable"
        return None
    made = os.path.dirname(os.path.realpath(path))  # a link's target's folder, where the file will be made
    try:
        with tempfile.TemporaryFile(dir=made):
            pass
    except OSError as error:
        return f"{option} {path}: no file can be made in the folder {made} ({error.strerror}); give a file in one " \
               "where one can"
    return None


def unused(named):
    """``named`` (a ``Path``), or where a file is there already, the first of ``NAME-2.EXT``, ``NAME-3.EXT``, ... that
    is not: a default output, which a second run the same day would otherwise write over."""
    candidate, count = named, 1
    while candidate.exists():
        count += 1
        candidate = named.with_name(f"{named.stem}-{count}{named.suffix}")
    return candidate


def path(text):
    """An argument type: the name of a file or a folder, which the empty string is not."""
    if not text:
        raise argparse.ArgumentTypeError("must name a file or a folder; got ''")
    return text


def integer(least, capped=True):
    """An argument type: one integer >= ``least``, and unless not ``capped`` (a seed, a count of epochs) at most
    ``MOST`` (argparse names the option in its error message)."""
    return _scalar(int, lambda value: value >= least, f"must be an integer >= {least}", capped)


def blas_threads(text):
    """An argument type: a count of BLAS threads, an integer >= 1 that OpenBLAS runs (``host_blas.check_threads``)."""
    return _run_by_openblas([integer(1)(text)])[0]


def blas_thread_counts(text):
    """An argument type: ``blas_threads``' comma-separated, each given once."""
    return _run_by_openblas(integers(1, "BLAS thread count")(text))


def _run_by_openblas(counts):
    """``counts`` where OpenBLAS runs each, else an ``argparse.ArgumentTypeError`` (``host_blas.check_threads``)."""
    try:
        return [host_blas.check_threads(threads) for threads in counts]
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def refuse_blas_threads_on_cupy(p, args):
    """``p.error`` (one line, exit status 2) for ``--blas-threads`` given with ``--backend cupy``, where no BLAS
    thread runs."""
    if args.backend == "cupy" and args.blas_threads is not None:
        p.error("--blas-threads applies to the numpy backend only")


def integer_or_auto(least):
    """An argument type: one integer >= ``least``, or the word ``auto`` (returned as it is)."""
    return _scalar(lambda text: text if text == "auto" else int(text), lambda value: value == "auto" or value >= least,
                   f"must be an integer >= {least} or auto")


def number(least, strict=False, what="a finite number", most=math.inf):
    """An argument type: one finite number >= ``least`` (> ``least`` when ``strict``) and <= ``most``; ``what``
    names it in the error message."""
    rule = f"must be {what} {'>' if strict else '>='} {least:g}" + ("" if most == math.inf else f" and <= {most}")
    return _scalar(float, lambda value: math.isfinite(value) and (value > least if strict else value >= least)
                   and value <= most, rule)


def integers(least, name="value"):
    """An argument type: a comma-separated list of integers, each >= ``least`` and given once (a repeated one
    would be a row measured twice, or two rows under one name)."""
    def parse(text):
        values = _listed(int, text, f"{name}s must be a comma-separated list of integers")
        if min(values) < least:
            raise argparse.ArgumentTypeError(f"every {name} must be >= {least}; got {text!r}")
        if len(set(values)) < len(values):
            twice = next(value for i, value in enumerate(values) if value in values[:i])
            raise argparse.ArgumentTypeError(f"give each {name} once; got {text!r}, with {twice} twice")
        return values

    return parse


def reals(least, name="value"):
    """An argument type: a comma-separated list of finite numbers, each >= ``least``."""
    one = number(least)
    return lambda text: _listed(one, text, f"{name}s must be a comma-separated list of numbers >= {least:g}")


def _scalar(convert, good, rule, capped=True):
    """An argument type: ``convert(text)`` where that is ``good``, else an error that says the ``rule``; an integer
    beyond ``MOST`` is refused as such where ``capped``."""
    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not good(value):
            raise argparse.ArgumentTypeError(f"{rule}; got {text!r}")
        return at_most(value, text) if capped else value

    return parse


def _numbers(text):
    """Whether ``text`` is a comma-separated list of numbers (one or more) that Python's ``float`` reads."""
    try:
        [float(part) for part in text.split(",")]
    except ValueError:
        return False
    return True


def _listed(convert, text, rule):
    """``convert`` of each comma-separated part of ``text``, or an error that says the ``rule``."""
    try:
        values = [convert(part) for part in text.split(",")]
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"{rule}; got {text!r}") from None
    return [at_most(value, text) for value in values]


def at_most(value, text):
    """``value``, unless it is an integer beyond ``MOST`` (an ``ArgumentTypeError`` that says so)."""
    if isinstance(value, int) and value > MOST:
        raise argparse.ArgumentTypeError(f"must be at most {MOST}; got {text!r}")
    return value


def names(registry, what="schedule"):
    """An argument type: a comma-separated list of names, each a key of ``registry``, none twice."""
    def parse(text):
        chosen = text.split(",")
        unknown = [name for name in chosen if name not in registry]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {what} {unknown[0]!r}; choose from {', '.join(registry)}")
        twice = [name for name in chosen if chosen.count(name) > 1]
        if twice:
            raise argparse.ArgumentTypeError(f"{what} {twice[0]!r} is named twice; name each once")
        return chosen

    return parse


def one_file_each(outputs):
    """Why two of a command's ``outputs``, ``[(option, path)]`` (None: not written), cannot both be written, in one
    line, or None: the later of two that name one file would write over the earlier."""
    seen = {}
    for option, path in outputs:
        if path:
            real = os.path.realpath(path)
            if real in seen:
                return f"{seen[real]} and {option} name one file, {path}: give each its own"
            seen[real] = option
    return None


def read_or_refuse(parser, path, read, what):
    """``read(path)``, or ``parser.error``'s one line where the file cannot be read or is not JSON (``what``: what
    it should be)."""
    try:
        return read(path)
    except OSError as error:
        parser.error(f"cannot read {path} ({error.strerror})")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        parser.error(f"{path} is not {what} ({error})")


def too_large(error):
    """The line that says ``error`` comes of sizes this machine cannot hold (a MemoryError, PyTorch's RuntimeError
    from its allocator, or NumPy's ValueError for an array beyond any address space), or None for another error."""
    if isinstance(error, MemoryError) or (isinstance(error, RuntimeError) and _out_of_memory(str(error))):
        said = str(error).splitlines()[0] if str(error) else "an allocation failed"  # one line, whatever it says
        return f"not enough memory ({said}): ask for smaller sizes"
    if isinstance(error, ValueError) and str(error).startswith("array is too big"):
        return "the sizes asked for make an array larger than this machine can address: ask for smaller sizes"
    return None


@contextlib.contextmanager
def refusing_too_large(parser):
    """A block whose error of sizes too large for this machine (``too_large``) is ``parser.error``'s one line, exit
    status 2; any other error is raised as it is."""
    try:
        yield
    except (MemoryError, RuntimeError, ValueError) as error:  # RuntimeError: PyTorch's allocator
        line = too_large(error)
        if line is None:
            raise
        parser.error(line)


def _out_of_memory(message):
    """Whether a RuntimeError's ``message`` is PyTorch's for memory it could not allocate, on the host or a GPU."""
    return "can't allocate memory" in message or "out of memory" in message.lower()


def choose_backend(name, prog):
    """The backend that ``--backend name`` runs on, and why: ``("numpy" | "cupy", why)``, ``why`` empty for a
    backend named outright. Where ``auto`` falls back to numpy although CuPy is installed, a note on stderr says
    what CUDA answered; a ``cupy`` that cannot run raises a ``ValueError`` that says why and what to do."""
    if name == "numpy":
        return name, ""
    status = cuda_status()
    if name == "cupy":
        if not status.installed:
            raise ValueError(f"--backend cupy needs CuPy: {pip_install('cuda12')} (CUDA 12) or "
                             f"{pip_install('cuda13')} (CUDA 13); or use --backend numpy")
        if not status.usable:
            raise ValueError(f"--backend cupy cannot run: {status.why}; use --backend numpy")
        return name, ""
    if status.usable:
        return "cupy", "auto: a GPU is usable"
    if not status.installed:
        return "numpy", "auto: CuPy is not installed"
    if launcher_rank() == 0:  # under mpiexec every rank would say it
        print(fitted(f"{prog}: note: --backend auto runs on numpy: {status.why}"), file=sys.stderr)
    return "numpy", "auto: no usable GPU, see stderr"


def parse_args_on_a_backend(p, argv):
    """``p.parse_args(argv)`` with its ``--backend`` resolved by ``choose_backend``; one that cannot run
    is ``p.error``: one line, exit status 2."""
    args = p.parse_args(argv)
    try:
        args.backend, _ = choose_backend(args.backend, p.prog)
    except ValueError as error:
        p.error(str(error))
    return args


def fitted(text):
    """``text`` in lines of at most ``WIDTH`` columns: as it is if it fits, else broken at its ``" | "``
    and then, where a part is still too wide, between words, each further line indented by two spaces."""
    if len(text) <= WIDTH:
        return text
    return "\n  ".join(line for part in text.split(" | ")
                       for line in textwrap.wrap(part, WIDTH - 2, break_long_words=False, break_on_hyphens=False))


def pip_install(extra):
    """The command that adds the optional dependencies ``extra``, as the README gives it: ``pip install -e
    '.[extra]'`` in a checkout, else ``pip install 'leapfrog_gpu[extra]'``."""
    checkout = (Path(__file__).resolve().parents[2] / "pyproject.toml").is_file()
    return f"pip install -e '.[{extra}]'" if checkout else f"pip install 'leapfrog_gpu[{extra}]'"


def plural(count, noun):
    """``1 epoch``, ``30 epochs``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
