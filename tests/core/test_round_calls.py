"""Calls per dependent round of the parallel-in-time solvers: TimeScan, Wavefront, TimeNewton, NaumovScan,
DagJacobi, DagDoubling and ForwardNewton. Each round is a few batched calls on stacked operands, as many
whatever tau, the cells of a round or the block pairs: counted at two sizes, on the NumPy backend (every
function of its ``xp`` and ``ops`` and every bound product, the outermost call only) and on the CuPy
stand-in (every operation enqueued on the device, through its queues' observer)."""

import collections
import functools

import numpy as np
import pytest

from helpers import CountedNumpy, batch, dag_data, deep_chain, patched_ops
from leapfrog_gpu import MLP, RNN, DagDoubling, DagJacobi, NaumovScan, TimeScan, Wavefront
from leapfrog_gpu.backends import ops_numpy
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core import triangular
from leapfrog_gpu.dag.forward import ForwardNewton
from leapfrog_gpu.rnn.newton import TimeNewton

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered in reciprocal:RuntimeWarning")


class Rounds:
    """The backend calls made inside each round: ``calls[name]`` lists, round by round, the calls of the
    rounds of that name."""

    def __init__(self, backend, monkeypatch):
        self.count, self.depth, self.calls = 0, 0, collections.defaultdict(list)
        self.monkeypatch = monkeypatch
        if hasattr(backend.xp, "queues"):  # the stand-in: every operation it enqueues
            monkeypatch.setattr(backend.xp.queues.device, "observer", lambda *args: self._add())
        else:
            monkeypatch.setattr(backend, "xp", CountedNumpy(lambda name, fn: self.counted(fn)))
            counted = {name: self.counted(getattr(ops_numpy, name)) for name in dir(ops_numpy)
                       if not name.startswith("_") and callable(getattr(ops_numpy, name))}
            counted["bind_matmul"] = lambda *args, **options: self.counted(ops_numpy.bind_matmul(*args, **options))
            monkeypatch.setattr(backend, "ops", patched_ops(**counted))

    def _add(self):
        self.count += 1

    def counted(self, fn):
        """``fn``, a call of it counted unless made inside another counted call."""
        def call(*args, **options):
            if not self.depth:
                self.count += 1
            self.depth += 1
            try:
                return fn(*args, **options)
            finally:
                self.depth -= 1

        return call

    def rounds(self, owner, name, label=None, static=False):
        """Each call of ``owner.name`` a round, its calls listed under ``label(*args)`` (None: not a round)."""
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def round_(*args, **options):
            start, depth, self.depth = self.count, self.depth, 0
            try:
                return fn(*args, **options)
            finally:
                self.depth = depth
                key = name if label is None else label(*args)
                if key is not None:
                    self.calls[key].append(self.count - start)

        self.monkeypatch.setattr(owner, name, staticmethod(round_) if static else round_)


def launches(rounds, backend, *prefixes):
    """The backend's launches whose names start with one of ``prefixes``, each a round under its prefix."""
    def label(stream, name, *args):
        return next((prefix for prefix in prefixes if name.startswith(prefix)), None)

    rounds.rounds(backend, "launch", label)


def time_scan(backend, rounds, size, scan="doubling"):
    sizes, tau = [3, 5, 4, 2], size
    launches(rounds, backend, "c[", "scan[", "reduce[", "substitute[")
    with RNN(sizes, "tanh", output="every", dtype="float64", backend=backend) as net:
        net.backprop(*batch(sizes, 2, dtype=np.float64, tau=tau), TimeScan(k=0, scan=scan))


def wavefront(backend, rounds, size):
    sizes, tau = [3] + [5, 4, 6, 5, 4, 3][:size] + [2], 2 * size
    launches(rounds, backend, "wavefront[")
    with RNN(sizes, "tanh", output="every", dtype="float64", backend=backend) as net:
        net.backprop(*batch(sizes, 2, dtype=np.float64, tau=tau), Wavefront(k=0))


def time_newton(backend, rounds, size, scan="doubling"):
    sizes, tau = [3, 5, 4, 2], size
    for name in ("scan_round", "reduce_round", "substitute_round"):
        rounds.rounds(triangular, name)
    rounds.rounds(TimeNewton, "_evaluate", static=True)
    with RNN(sizes, "tanh", output="every", dtype="float64", backend=backend) as net:
        net.feedforward(batch(sizes, 2, dtype=np.float64, tau=tau)[0], solver=TimeNewton(scan=scan))


def naumov_scan(backend, rounds, size):
    sizes = [5, 7, 4, 6, 5, 6, 7, 4, 3][: size + 2] + [3]
    launches(rounds, backend, "naumov.round[")
    with MLP(sizes, dtype="float64", backend=backend) as net:
        x, y = np.ones((sizes[0], 3)), np.full((sizes[-1], 3), 0.5)
        net.backprop(x, y, NaumovScan(k=1))


def dag_jacobi(backend, rounds, size):
    rounds.rounds(triangular, "jacobi_sweep")
    net = deep_chain(size, backend)
    net.backprop(*dag_data(net, 2), DagJacobi(k=1))


def dag_doubling(backend, rounds, size):
    rounds.rounds(triangular, "neumann_round")
    net = deep_chain(size, backend)
    net.backprop(*dag_data(net, 2), DagDoubling(k=1))


def forward_newton(backend, rounds, size):
    rounds.rounds(triangular, "neumann_round")
    net = deep_chain(size, backend)
    net.feedforward(dag_data(net, 2)[0], solver=ForwardNewton())


SOLVERS = {"TimeScan": (time_scan, 4, 16),
           "TimeScan-reduction": (functools.partial(time_scan, scan="reduction"), 4, 16),
           "Wavefront": (wavefront, 2, 5), "TimeNewton": (time_newton, 4, 16),
           "TimeNewton-reduction": (functools.partial(time_newton, scan="reduction"), 4, 16),
           "NaumovScan": (naumov_scan, 3, 7), "DagJacobi": (dag_jacobi, 3, 8), "DagDoubling": (dag_doubling, 3, 9),
           "ForwardNewton": (forward_newton, 3, 9)}
"""Each solver: what runs it, and two sizes (tau, recurrent layers or depth) whose rounds are counted."""


def calls_per_round(backend, monkeypatch, solver, size):
    """The most calls any round of each kind made, by kind, when ``solver`` runs at ``size``."""
    with monkeypatch.context() as patch:
        rounds = Rounds(backend, patch)
        SOLVERS[solver][0](backend, rounds, size)
    assert rounds.calls, f"{solver}: no round counted"
    return {name: max(calls) for name, calls in rounds.calls.items()}


@pytest.fixture
def numpy_backend():
    with NumpyBackend(mode="serial") as backend:
        yield backend


@pytest.fixture
def cupy_backend(standin):
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as backend:
        yield backend


@pytest.mark.parametrize("solver", SOLVERS)
def test_calls_per_round_do_not_grow_on_numpy(numpy_backend, monkeypatch, solver):
    _, small, large = SOLVERS[solver]
    assert (calls_per_round(numpy_backend, monkeypatch, solver, small)
            == calls_per_round(numpy_backend, monkeypatch, solver, large))


@pytest.mark.parametrize("solver", SOLVERS)
def test_calls_per_round_do_not_grow_on_the_cupy_standin(cupy_backend, monkeypatch, solver):
    _, small, large = SOLVERS[solver]
    assert (calls_per_round(cupy_backend, monkeypatch, solver, small)
            == calls_per_round(cupy_backend, monkeypatch, solver, large))


def test_a_loop_over_block_pairs_planted_in_a_round_is_caught(numpy_backend, monkeypatch):
    """The x half of DagDoubling's round as one product per block row (a node, width 4 in ``deep_chain``):
    its calls grow with the depth, and the count says so."""
    def looped(xp, P, P_next, X, Q, square):
        for r in range(0, X.shape[1], 4):
            xp.matmul(P[:, r:r + 4], X, out=Q[:, r:r + 4])
        xp.add(X, Q, out=X)
        if square:
            xp.matmul(P, P, out=P_next)

    monkeypatch.setattr(triangular, "neumann_round", looped)
    _, small, large = SOLVERS["DagDoubling"]
    assert (calls_per_round(numpy_backend, monkeypatch, "DagDoubling", small)
            != calls_per_round(numpy_backend, monkeypatch, "DagDoubling", large))
