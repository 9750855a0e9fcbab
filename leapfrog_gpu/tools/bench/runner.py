"""What every ``leapfrog-bench`` suite shares: a network's rows timed in turn, refusals recorded
(``interleaved``), each row's speed-up over its network's baseline (``speedups``); the run over a grid of
networks with its progress, table, JSONL and JSON (``main``); the options every suite takes (``parser``); the
machine; the table's cells and lines.

A suite (``mlp``, ``rnn``, profiling/dag_bench.py) is a module that says what is particular to its network:
``PROG`` (its command), ``RECORDS`` (their key in ``--json``), ``parser()`` (``parser``'s options and its own),
``GRID`` (its networks' names and the options whose values they take, ``{"N": "sizes"}``: ``grid``),
``work(key)`` (a network's work, a number), ``case(args, state, key)`` (one network's records, dicts), ``HEAD``
(the lines above the table) and ``format_row(record)`` (a record's line, under ``heading(case)`` where it has
one). Where it needs them: ``check(p, args)`` (more checks of the options, ``p.error``), ``ABOUT`` (the options
the header records beside the command, date, machine and, with ``--no-torch``, ``torch_note``), ``start(args)``
(a context manager yielding ``state``, what the networks share), ``FOOT`` (the lines under the table); where
they depend on the options, ``head(args)``, ``rows(args, case)`` and ``foot(args, state, records, about)``.
"""

import argparse
import contextlib
import datetime
import itertools
import json
import os
import platform
import shlex
import sys
from pathlib import Path

import numpy as np

from ...backends import get_backend, timing
from ...parallel import comm as parallel
from ...core.functions import DTYPES
from ...core.optimizers import SGD, Adam, AdamW
from .. import CLOSED_PIPE_STATUS
from ..cli import (UNWRITTEN, Parser, Unwritten, fitted, integer, integers, one_file_each, output_refusal,
                   parse_args_on_a_backend, path, plural, too_large, unused, writing, written_whole)
from ..schedules import make_schedule, names_type, schedule_names
from . import progress, torch_anchor

ETA = 1e-3
"""The timed steps' learning rate, small enough that they keep the activations away from saturation (a suite
may take another: ``at_rate``)."""
OPTIMIZERS = {"sgd": SGD(ETA), "momentum": SGD(ETA, momentum=0.9), "adam": Adam(ETA), "adamw": AdamW(ETA)}
"""``--optimizer``'s steps by name: ours ``train_step(x, y, OPTIMIZERS[name], ...)``, PyTorch's torch.optim's
class of the same name and hyper-parameters (``torch_anchor.torch_optimizer``)."""
NOISY = 0.25
"""A timing is noisy when p80 - p20 of its repeats exceeds this fraction of their median: its ratios say little."""


def exit_statuses(outputs):
    """What a command's exit status means, as ``--help`` lists it, for a suite that writes ``outputs`` (``--json``,
    ...)."""
    return [(0, "done"), (2, "a bad option, or sizes this machine cannot hold (one line on stderr)"),
            (UNWRITTEN, f"{', '.join(outputs)} or stdout could not be written (a full disk, a folder gone): one line"),
            (130, "stopped by Ctrl-C; the networks measured so far are printed, and in --jsonl if given"),
            CLOSED_PIPE_STATUS]


def interleaved(backend, calls, repeats, warmup=1, settings=None, settle=None):
    """Each of ``calls`` (row -> a callable that runs one repeat and returns a dict to report, or None; or why
    the row is refused) timed on ``backend``: ``max(warmup, 1)`` untimed runs each, then ``repeats`` rounds that
    run every call in turn, with ``settle`` (by default on the host, where a call's threads leave after-effects;
    not on a GPU, whose device time a device check counts) each timed run right after an untimed one of the same
    call, as a training loop runs a step after itself. Under one setting each round starts one call later
    (``timing.measure_interleaved``); with ``settings`` (row -> ``(key, context factory)``: a BLAS setting) of more
    than one key, as the MLP's on NumPy by default, in blocks, key after key (``timing.measure_in_blocks``), each
    block's rounds in the same order, none rotated. A call whose first run raises ``ValueError`` is refused.
    Returns, in the order of ``calls``, row -> ``{"ms": ms (repeats,), **reported}`` or ``{"refused": why}``."""
    settings = settings or {row: (None, contextlib.nullcontext) for row in calls}
    settle = backend.name != "cupy" if settle is None else settle
    results, reported = {row: {"refused": call} for row, call in calls.items() if isinstance(call, str)}, {}
    for row in [row for row in calls if row not in results]:
        try:
            with settings[row][1]():
                reported[row] = calls[row]()
        except ValueError as error:
            results[row] = {"refused": str(error)}
    timed = [row for row in calls if row in reported]

    def run(row):
        reported[row] = calls[row]()

    fns, keys, contexts = ([lambda row=row: run(row) for row in timed], [settings[row][0] for row in timed],
                           [settings[row][1] for row in timed])
    times = []
    if len(set(keys)) > 1:
        times = timing.measure_in_blocks(backend, fns, keys, repeats, max(warmup, 1) - 1, contexts, settle=settle)
    elif fns:
        times = timing.measure_interleaved(backend, fns, repeats, max(warmup, 1) - 1, contexts, rotate=True,
                                           settle=settle)
    results.update({row: {"ms": ms, **(reported[row] or {})} for row, ms in zip(timed, times)})
    return {row: results[row] for row in calls}


def at_rate(name, lr):
    """``OPTIMIZERS[name]`` at the learning rate ``lr``."""
    rule = OPTIMIZERS[name]
    return type(rule)(**{**rule.hyper(), "lr": lr})


def speedups(records, group, baseline, median):
    """``records``, each timed one given ``speedup``: the median time of its group's baseline over its own (> 1:
    faster). ``group(r)``: what r's baseline shares with it (its network, its pass); ``baseline(r)``: whether r
    is one; ``median(r)``: its median time, None where it was not timed."""
    base = {group(r): median(r) for r in records if baseline(r) and median(r)}
    for r in records:
        if median(r) and base.get(group(r)):
            r["speedup"] = base[group(r)] / median(r)
    return records


def schedules(model, names, **options):
    """``name -> schedule`` of ``model`` (``tools.schedules``, made with ``options``) for each of ``names``, the
    baseline first whether named or not."""
    return {name: make_schedule(model, name, **options) for name in dict.fromkeys([schedule_names(model)[0], *names])}


def grid(suite, args):
    """``suite``'s networks: a dict for each combination of the values of the options its ``GRID`` names."""
    options = [getattr(args, option) for option in suite.GRID.values()]
    return [dict(zip(suite.GRID, values)) for values in itertools.product(*options)]


def main(suite, argv=None):
    """Run ``suite`` over its grid: each network's rows printed as soon as it is measured (unless
    ``--quiet``: then the table at the end) and appended to ``--jsonl``, the time left on stderr, the
    records to ``--json``. Returns the exit status: 0 done, 2 a bad option or sizes too large for the machine,
    ``UNWRITTEN`` a file that could not be written, 130 stopped by Ctrl-C. A suite runs in one process: under
    mpiexec it says where the data-parallel study went, and exits 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = suite.parser()
    args = parse_args_on_a_backend(p, argv)
    try:
        return _run(suite, p, args, argv)
    except Unwritten as error:
        print(f"{suite.PROG}: error: {error}", file=sys.stderr)
        return UNWRITTEN
    except (MemoryError, RuntimeError, ValueError) as error:  # RuntimeError: PyTorch's allocator, the anchor's
        line = too_large(error)
        if line is None:
            raise
        print(f"{suite.PROG}: error: {line}", file=sys.stderr)
        return 2


def _run(suite, p, args, argv):
    """``main``'s run of ``suite`` on its parsed ``args``; a file that cannot be written raises ``Unwritten``."""
    if parallel.world(suite.PROG).size > 1:
        p.error("under mpiexec, what the sums across ranks cost is measured by mpiexec -n P python "
                "profiling/parallel_bench.py (docs/data-parallel.md)")
    outputs = [(f"--{option}", getattr(args, option, None)) for option in ("json", "jsonl", "plot")]
    for option, named in outputs:
        if named and (why := output_refusal(option, named)):
            p.error(why)
    if why := one_file_each(outputs):
        p.error(why)
    if hasattr(suite, "check"):
        suite.check(p, args)
    given = [a for i, a in enumerate(argv) if not a.startswith("--model") and argv[i - 1:i] != ["--model"]]
    about = header(command_line(suite.PROG, given), args.backend)
    about.update({option: getattr(args, option) for option in getattr(suite, "ABOUT", ())})
    if hasattr(args, "no_torch"):
        about["torch_note"] = torch_anchor.skipped(args.no_torch)
    keys, networks, printed = grid(suite, args), [], False
    head = suite.head(args) if hasattr(suite, "head") else suite.HEAD

    def table():  # what --quiet holds back to the end: the head and every network measured
        print(*head, *(line for case in networks for line in lines(suite, args, case)), sep="\n")
    if not args.quiet:
        print(*head, sep="\n", flush=True)
    try:
        start = suite.start(args) if hasattr(suite, "start") else contextlib.nullcontext()
        with start as state, progress.Progress(suite.PROG, map(suite.work, keys), args.quiet) as bar:
            for key in keys:
                bar.start(" ".join(value if isinstance(value, str) else f"{name}={value}"
                                   for name, value in key.items()))
                networks.append(suite.case(args, state, key))
                if args.jsonl:  # the header with the first network's lines: a run refused before has written none
                    with writing(f"--jsonl {args.jsonl}"):
                        append_lines(args.jsonl, [about] * (len(networks) == 1) + networks[-1])
                bar.done([] if args.quiet else lines(suite, args, networks[-1]))
            records = [r for case in networks for r in case]
            if args.json:  # before the foot, whose plot may fail: the measurements are kept
                write_json(args.json, {**about, suite.RECORDS: records})
            if args.quiet:
                table()
                printed = True  # a Ctrl-C from here on prints them no more
            if hasattr(suite, "foot"):
                suite.foot(args, state, records, about)
            if hasattr(suite, "FOOT"):
                print(suite.FOOT)
            if about.get("torch_note"):
                print(fitted(about["torch_note"]))
    except KeyboardInterrupt:
        if args.quiet and networks and not printed:
            table()
        kept = f"; their lines are in {args.jsonl}" if args.jsonl and networks else ""
        print(f"{suite.PROG}: interrupted with {len(networks)} of {plural(len(keys), 'network')} measured{kept}",
              file=sys.stderr)
        return 130
    return 0


def lines(suite, args, case):
    """A network's lines: ``suite.rows(args, case)``, else its ``heading(case)`` and a ``format_row`` per record."""
    if hasattr(suite, "rows"):
        return suite.rows(args, case)
    return [*(suite.heading(case) if hasattr(suite, "heading") else ()), *map(suite.format_row, case)]


def parser(prog, description, model, sizes, batch, repeats, warmup, torch=True, schedules=None, model_help=None,
           backend="auto", json=None):
    """A suite's command line with the options every suite takes, each with the suite's default: ``--model``
    (hidden but for ``model_help``), ``--backend`` (``backend``), ``--dtype``, ``--sizes``, ``--batch``, ``--schedule``
    (``schedules``: by default all of ``model``'s), ``--repeats``, ``--warmup``, ``--no-torch`` (with
    ``torch``), ``--quiet``, ``--json`` (``json``: None, none written; else that file, or where one is there, the
    first name free after it, ``cli.unused``) and ``--jsonl``."""
    outputs = ["--json", "--jsonl"] + ["--plot"] * (model == "mlp")
    p = Parser(prog=prog, description=description, exit_statuses=exit_statuses(outputs))
    p.add_argument("--model", choices=("mlp", "rnn") if model_help else (model,), default=model,
                   help=model_help or argparse.SUPPRESS)
    p.add_argument("--backend", choices=("auto", "numpy", "cupy"), default=backend,
                   help=f"auto: cupy when a CUDA device is usable, else numpy (default {backend})")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="(default float32)")
    p.add_argument("--sizes", type=integers(1, "size"), default=sizes, metavar="N[,N...]",
                   help=f"widths N (default {','.join(map(str, sizes))})")
    p.add_argument("--batch", type=integers(1, "batch size"), default=batch, metavar="B[,B...]",
                   help=f"batch sizes B (default {','.join(map(str, batch))})")
    names = schedule_names(model)
    p.add_argument("--schedule", type=names_type(model), default=list(schedules or names), metavar="NAME[,NAME...]",
                   help=f"schedules by name, from {', '.join(names)}; {names[0]} is always measured (default "
                        f"{','.join(schedules) if schedules else 'all'})")
    p.add_argument("--repeats", type=integer(1), default=repeats, metavar="N",
                   help=f"timed repeats of each row (default {repeats})")
    p.add_argument("--warmup", type=integer(0), default=warmup, metavar="N",
                   help=f"untimed runs of each row before its timed ones (default {warmup}); one runs even at 0, "
                        "the first call checking whether the row runs or is refused")
    if torch:
        p.add_argument("--no-torch", action="store_true", help="skip the PyTorch anchor")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar; the table at the end rather than each network's rows as it is measured")
    p.add_argument("--json", type=path, metavar="FILE", default=None if json is None else str(unused(Path(json))),
                   help="write the records to FILE" + (f" (default {json}, or where that file is there, the first "
                                                       "name free with -2, -3 ... before its suffix)" if json else ""))
    p.add_argument("--jsonl", type=path, metavar="FILE",
                   help="append one JSON line per row to FILE as its network is measured, after a line with the "
                        "command and machine")
    return p


def append_lines(path, records):
    """Append each record to ``path`` as one JSON line, flushed at once."""
    with open(path, "a", encoding="utf-8") as out:
        out.writelines(json.dumps(r, default=_plain) + "\n" for r in records)


def write_json(path, report):
    """Write ``report`` to ``path`` whole or not at all (``cli.written_whole``: ``Unwritten`` of ``--json``)."""
    with written_whole(f"--json {path}", path) as out:
        out.write(json.dumps(report, indent=1, default=_plain) + "\n")


def _plain(value):
    """What ``json`` cannot write of a record: a NumPy number or array, as Python's."""
    return value.tolist() if isinstance(value, (np.ndarray, np.generic)) else str(value)


def command_line(prog, argv):
    """The command ``prog`` with the arguments ``argv``, as a shell reads it back: each quoted where it must be
    (``shlex.join``: ``--json 'my run.json'``)."""
    return f"{prog} {shlex.join(argv)}" if argv else prog


def header(command, backend):
    """What a run's records are written under: ``command``, the date (UTC) and the ``machine``."""
    return {"command": command, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(backend)}


def machine(backend):
    """Where the run measures (``backend``, a name): the device (or CPU), its cores, the platform, Python, NumPy."""
    return {"device": get_backend(backend).device_name if backend == "cupy" else cpu_name(),
            "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "numpy": np.__version__}


def cpu_name():
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform`` knows of it."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def ms(value):
    """A time in ms in at most 6 characters, to 4 significant digits from 0.001 up to 9999."""
    return f"{value:.{3 if value < 10 else 2 if value < 100 else 1 if value < 1000 else 0}f}"


def spread(stats):
    """``median [p20-p80]`` of a timing summary."""
    return "-" if stats is None else f"{ms(stats['median'])} [{ms(stats['p20'])}-{ms(stats['p80'])}]"


def median(stats):
    """A timing's median, marked ``!`` when it is noisy."""
    return "-" if stats is None else ms(stats["median"]) + "!" * noisy(stats)


def noisy(stats):
    """Whether a timing summary's p20-p80 range exceeds ``NOISY`` times its median."""
    return stats is not None and stats["p80"] - stats["p20"] > NOISY * stats["median"]


def ratio(value, times="x"):
    """A speed-up to 2 decimals (``1.25x``), below 0.1 to 2 significant digits (``0.0072x``)."""
    return "-" if value is None else (f"{value:.2f}" if value >= 0.1 else f"{value:#.2g}") + times


def line(cells, widths, sep="  "):
    """A table's line: ``cells`` in columns of ``widths`` (< 0: left-aligned) joined by ``sep``, trailing spaces cut."""
    return sep.join(f"{cell!s:{'<' if w < 0 else '>'}{abs(w)}}" for cell, w in zip(cells, widths)).rstrip()
