"""Host calls per eager step on the CuPy backend, counted for each configuration of a grid of MLPs.

    PYTHONPATH=tests/harness/standin:tests/harness python profiling/call_count.py --sizes 16 --layers 32 \\
        --batch 32 --k 2 --json profiling/results/call_count_standin_<date>.json

An eager step costs the host one Python call into CuPy for every matmul, kernel and event it enqueues;
with L = 32 that count, not the GPU, can bound the step. ``count_step`` runs one step (after a step
that creates what a first step creates: the plan, worker streams, staging buffers, compiled kernels)
with counting proxies at the backend's boundary with CuPy, for that step only:

- the backend's ``xp`` is a proxy of the ``cupy`` module that counts ``matmul`` (cuBLAS), every raw
  kernel launch (the kernels of ``RawModule.get_function``) and any other module function, and its
  ``ops`` are ``CountingOps``, the same ``CudaOps`` built on that proxy, which count ``set_element``
  as one fill;
- ``Stream.__enter__``, ``Stream.record``, ``Stream.wait_event``, ``Event.record`` and
  ``Event.synchronize`` (plain Python classes in CuPy and in its stand-in) are wrapped on their classes;
- the backend's ``copy_in`` counts one copy per call.

The counts are of the enqueue (``MLP.sgd_step`` returning), not of the ``synchronize()`` after it.
"""

import collections
import contextlib
import dataclasses
import functools
import itertools
import sys

import numpy as np

from leapfrog_gpu.backends import get_backend
from leapfrog_gpu.backends.ops_cuda import CudaOps
from leapfrog_gpu.core.functions import ACTIVATIONS
from leapfrog_gpu.mlp.network import MLP
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench import runner
from leapfrog_gpu.tools.bench.measure import ETA, configurations
from leapfrog_gpu.tools.bench.mlp import DEFAULT_SCHEDULES
from leapfrog_gpu.tools.bench.mlp import label
from leapfrog_gpu.tools.cli import Parser, fitted, integers, output_refusal, path
from leapfrog_gpu.tools.schedules import make_schedule, names_type
from card import refuse_without_gpu

KINDS = ("matmul", "kernel", "fill", "copy", "record", "wait", "sync", "other", "enter")
"""What is counted: cuBLAS matmuls, raw kernel launches, fills (``set_element``), copies in (``copy_in``),
event records, stream waits on events, host waits on events, other ``cupy`` functions, and stream
enters (``with stream:``). Every kind but ``enter`` is a call into CuPy that enqueues or waits."""


@dataclasses.dataclass(frozen=True)
class Counts:
    """What one eager step called, by kind (``KINDS``)."""

    matmul: int = 0
    kernel: int = 0
    fill: int = 0
    copy: int = 0
    record: int = 0
    wait: int = 0
    sync: int = 0
    other: int = 0
    enter: int = 0

    @property
    def calls(self):
        """The calls into CuPy: every kind but the stream enters."""
        return sum(getattr(self, kind) for kind in KINDS if kind != "enter")

    def as_dict(self):
        return {**dataclasses.asdict(self), "calls": self.calls}


class CountingOps(CudaOps):
    """``CudaOps`` whose calls into CuPy are counted in ``counts`` (a ``collections.Counter``)."""

    def __init__(self, cupy, chain, counts):
        super().__init__(cupy, chain)
        self.counts = counts

    def set_element(self, array, index, value):
        self.counts["fill"] += 1
        super().set_element(array, index, value)


class _CountingCupy:
    """The ``cupy`` module, its ``matmul``, ``RawModule`` kernels and other functions counted."""

    def __init__(self, cupy, counts):
        self._cupy, self._counts = cupy, counts

    def __getattr__(self, name):
        value = getattr(self._cupy, name)
        if name == "matmul":
            return _counted(value, self._counts, "matmul")
        if name == "RawModule":
            return functools.partial(_CountingModule, value, self._counts)
        if callable(value) and not isinstance(value, type):
            return _counted(value, self._counts, "other")
        return value


class _CountingModule:
    """A ``RawModule`` whose functions count their launches as ``kernel``."""

    def __init__(self, raw_module, counts, **options):
        self._module, self._counts = raw_module(**options), counts

    def get_function(self, name):
        return _counted(self._module.get_function(name), self._counts, "kernel")


def _counted(fn, counts, kind):
    """``fn``, each call counted as ``kind``."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        counts[kind] += 1
        return fn(*args, **kwargs)

    return call


CLASS_METHODS = (("Stream", "__enter__", "enter"), ("Stream", "record", "record"), ("Stream", "wait_event", "wait"),
                 ("Event", "record", "record"), ("Event", "synchronize", "sync"))
"""The methods of ``cupy.cuda``'s classes counted, and as what (``Stream.record`` records without
calling ``Event.record``, in CuPy and in the stand-in)."""


@contextlib.contextmanager
def counting(backend):
    """Within the block, count what ``backend`` (a ``CupyBackend``) calls of CuPy; yields the
    ``collections.Counter`` of ``KINDS``. The backend's ``xp``, ``ops`` and ``copy_in`` and the classes'
    methods are restored on leaving."""
    counts = collections.Counter()
    xp, ops, own = backend.xp, backend.ops, vars(backend).copy()
    saved = []
    try:
        for cls_name, method, kind in CLASS_METHODS:
            cls = getattr(xp.cuda, cls_name)
            saved.append((cls, method, cls.__dict__.get(method)))
            setattr(cls, method, _counted(getattr(cls, method), counts, kind))
        backend.xp = _CountingCupy(xp, counts)
        backend.ops = CountingOps(backend.xp, ops.chain, counts)
        backend.copy_in = _counted(backend.copy_in, counts, "copy")
        yield counts
    finally:
        for name in ("xp", "ops", "copy_in"):
            if name in own:
                setattr(backend, name, own[name])
            else:
                vars(backend).pop(name, None)
        for cls, method, original in reversed(saved):
            if original is None:
                delattr(cls, method)
            else:
                setattr(cls, method, original)


def count_step(net, x, y, schedule, eta=ETA):
    """The ``Counts`` of one eager ``net.sgd_step(x, y, eta, schedule)`` on a ``CupyBackend``, after an
    uncounted step of the same batch size and schedule."""
    with counting(net.backend) as counts:
        net.sgd_step(x, y, eta, schedule)
        net.synchronize()
        counts.clear()
        net.sgd_step(x, y, eta, schedule)
        step = Counts(**counts)
        net.synchronize()
    return step


def measure(args):
    """One record per network of the grid and eager configuration (``leapfrog-bench``'s: its
    ``configurations``), with ``args.fused``, on a CuPy backend: the configuration and its ``Counts.as_dict()``."""
    rng = np.random.default_rng(0)
    records = []
    with get_backend("cupy") as backend:
        for n, layers, batch in itertools.product(args.sizes, args.layers, args.batch):
            x = rng.random((n, batch)).astype(args.dtype)
            y = rng.uniform(0.05, 0.95, (n, batch)).astype(args.dtype)
            for name, k in configurations(args):
                with MLP([n] * layers, activation=args.activation, dtype=args.dtype, backend=backend) as net:
                    counts = count_step(net, x, y, make_schedule("mlp", name, k, fused=args.fused))
                records.append({"N": n, "L": layers, "B": batch, "schedule": name, "k": k, "fused": args.fused,
                                "chain": backend.ops.chain, **counts.as_dict()})
    return records


TITLES = ("calls", *KINDS)


def table(records):
    """The counts as text, a heading line per network, within 100 columns."""
    width = max(len("schedule"), *(len(label(r)) for r in records))
    head = "  ".join(["schedule".ljust(width), " k", *(f"{t:>6}" for t in TITLES)])
    lines = ["host calls per eager step, CuPy backend (one step's enqueue, its batch copies included):", head]
    network = None
    for r in records:
        if (r["N"], r["L"], r["B"]) != network:
            network = (r["N"], r["L"], r["B"])
            lines.append(f"N={r['N']} L={r['L']} B={r['B']} chain={r['chain']}")
        lines.append("  ".join([label(r).ljust(width), f"{r['k']:>2}", *(f"{r[t]:>6}" for t in TITLES)]))
    return "\n".join([*lines, TABLE_FOOT])


TABLE_FOOT = ("calls: into CuPy, every kind but enter; matmul: cuBLAS; kernel: raw kernel launches; fill: set_element; "
              "copy: copy_in; record, wait: events on streams; sync: the host waits on an event; other: other cupy "
              "functions; enter: with stream")


def parser():
    p = Parser(prog="python profiling/call_count.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("cupy",), default="cupy", help="the calls counted are CuPy's")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="(default float32)")
    p.add_argument("--sizes", type=integers(1, "size"), default=[16], metavar="N[,N...]", help="(default 16)")
    p.add_argument("--layers", type=integers(2, "layer count"), default=[32], metavar="L[,L...]", help="(default 32)")
    p.add_argument("--batch", type=integers(1, "batch size"), default=[32], metavar="B[,B...]", help="(default 32)")
    p.add_argument("--k", type=integers(1, "worker stream count"), default=[2], metavar="K[,K...]",
                   help="worker streams (default 2)")
    p.add_argument("--schedule", type=names_type("mlp"), default=DEFAULT_SCHEDULES, metavar="NAME[,NAME...]",
                   help="schedules by name; sequential is always counted")
    p.add_argument("--activation", choices=tuple(ACTIVATIONS), default="sigmoid", help="(default sigmoid)")
    p.add_argument("--fused", action="store_true", help="every schedule fuses the SGD update into (7)")
    p.add_argument("--json", type=path, metavar="FILE", help="write the counts to FILE, under \"call_counts\"")
    return p


def main(argv=None):
    """Count, print the table (within 100 columns), write ``--json``; the exit status (2: a ``--json`` that cannot be
    written, or no usable CuPy)."""
    p = parser()
    args = p.parse_args(argv)
    if args.json and (why := output_refusal("--json", args.json)):
        p.error(why)
    refuse_without_gpu(p, "counting the calls into CuPy", "or the CuPy stand-in: PYTHONPATH=tests/harness/standin:"
                       "tests/harness python profiling/call_count.py ...")
    counts = measure(args)
    print("\n".join(fitted(line) for line in table(counts).splitlines()))
    if args.json:
        command = runner.command_line("python profiling/call_count.py", argv or sys.argv[1:])
        runner.write_json(args.json, {**runner.header(command, "cupy"), "call_counts": counts})
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, "python profiling/call_count.py"))
