"""``host_bound``: a host graph's ops bound to their arguments once give the op's bits, read what a step may change
(eta / B, a refusal) as they run, and leave a launched graph no unbound product to make.

Each bound op is run beside the op itself on copies of the same operands, outputs filled with NaN first: the same
bits and no warning, at B = 1 and above, in one row block and in several, refused and not, twice with the operands
and the scale changed in between (a bound call that kept what its arguments held at binding fails the second round).
"""

import functools
import warnings

import numpy as np
import pytest

from helpers import batch
from leapfrog_gpu import MLP, Leapfrog, Sequential
from leapfrog_gpu.backends import host_blas, host_bound, ops_numpy
from leapfrog_gpu.backends.host import NumpyBackend

N, M = 37, 29
FILLED = ("z", "a", "sp", "delta", "nabla_w", "nabla_b", "scratch")  # written by the ops, NaN before them


def operands(batch_size, seed):
    """The arrays an op of a layer of N units over M takes, columns in Fortran order as a plan holds them."""
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def columns(n):
        return np.asfortranarray(normal(n, batch_size))

    arrays = {"w": normal(N, M), "w_next": normal(N, M), "b": normal(N), "a_prev": columns(M), "a_m": columns(M),
              "delta_next": columns(N), "sp_m": columns(M), "controls": np.array([0.25, 0], np.float32)}
    arrays.update(z=columns(N), a=columns(N), sp=columns(N), nabla_w=normal(N, M), delta=columns(M), nabla_b=normal(N),
                  scratch=normal(100), grad_w=normal(N, M), grad_b=normal(N))
    arrays["delta_next"][3] = 0  # a zero row: its row of w stays as it was
    arrays["a_prev"][5] = -200  # sigma(z) of a saturated unit: exp overflows, sigmoid gives 0
    for name in FILLED:
        arrays[name][...] = np.nan
    return arrays


CALLS = {  # op -> the names of its arguments, in order (the strings pass as they are)
    "forward": ("z", "a", "sp", "w", "a_prev", "b", "sigmoid"),
    "forward-tanh": ("z", "a", "sp", "w", "a_prev", "b", "tanh"),
    "forward-relu": ("z", "a", "sp", "w", "a_prev", "b", "relu"),
    "backward": ("delta", "w_next", "delta_next", "sp_m"),
    "backward_update": ("delta", "w_next", "delta_next", "sp_m", "a_m", "controls"),
    "rank_update": ("w", "delta_next", "a_m", "controls"),
    "nabla_b": ("nabla_b", "delta_next"),  # run as it is, as nabla_w at B = 1: nothing to work out once
    "nabla_w": ("nabla_w", "delta_next", "a_m"),
    "gradients": ("nabla_w", "nabla_b", "delta_next", "a_m"),
    "sgd_update": ("w", "grad_w", "controls", "scratch"),  # in chunks of scratch's 100 elements, the last shorter
    "sgd_update-b": ("b", "grad_b", "controls", "scratch"),
}


def arguments(arrays, names):
    return [arrays.get(name, name) for name in names]


def change(arrays, rng):
    """What a step changes between two launches: the operands' values, eta / B."""
    for name in ("w", "w_next", "b", "a_prev", "a_m", "delta_next", "sp_m", "grad_w", "grad_b"):
        arrays[name] *= np.float32(1 + rng.random())
    arrays["controls"][0] = rng.random()


@pytest.mark.parametrize("refused", [False, True], ids=["updates", "refused"])
@pytest.mark.parametrize("sweep", [1 << 22, 8 * M * 4], ids=["one block", "blocks of 8 rows"])
@pytest.mark.parametrize("batch_size", [1, 3], ids=lambda b: f"B{b}")
@pytest.mark.parametrize("call", CALLS)
def test_a_bound_op_gives_the_ops_bits(call, batch_size, sweep, refused, monkeypatch):
    monkeypatch.setattr(ops_numpy, "SWEEP", sweep)
    op, names = getattr(ops_numpy, call.split("-")[0]), CALLS[call]
    want, got = operands(batch_size, 0), operands(batch_size, 0)
    want["controls"][1] = got["controls"][1] = refused
    bound = host_bound.bound(op, arguments(got, names))
    as_it_is = call == "nabla_b" or call == "nabla_w" and batch_size == 1  # no product, no view to make once
    assert as_it_is or not isinstance(bound, functools.partial) or bound.func is not op, f"{call} was not bound"
    rng_want, rng_got = np.random.default_rng(1), np.random.default_rng(1)
    for _ in range(2):
        op(*arguments(want, names))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # what the op keeps quiet (exp's overflow in a sigmoid), so does it
            bound()
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{call}: {name}", strict=True)
        change(want, rng_want)
        change(got, rng_got)


def test_the_sweep_scales_by_eta_b_as_it_runs_and_skips_a_refused_update():
    """Planted: a rank update whose scale is fixed at binding fails here (eta / B changes after it)."""
    arrays = operands(1, 2)
    bound = host_bound.bound(ops_numpy.rank_update, arguments(arrays, CALLS["rank_update"]))
    w, delta, a = (arrays[name].astype(np.float64) for name in ("w", "delta_next", "a_m"))
    arrays["controls"][0] = 0.5
    bound()
    np.testing.assert_allclose(arrays["w"], w - 0.5 * delta @ a.T, rtol=1e-6, atol=1e-6)
    before = arrays["w"].copy()
    arrays["controls"][1] = 3
    bound()
    np.testing.assert_array_equal(arrays["w"], before)


def test_an_op_with_an_update_of_its_own_or_no_binder_runs_as_it_is():
    arrays = operands(1, 3)
    seen = []
    call = host_bound.bound(ops_numpy.backward_update, [*arguments(arrays, CALLS["backward_update"]),
                                                        lambda block: seen.append((block.start, block.stop)), 10])
    assert isinstance(call, functools.partial) and call.func is ops_numpy.backward_update
    call()
    assert seen == [(0, 10), (10, 20), (20, 30), (30, N)]
    copied = host_bound.bound(np.copyto, [arrays["a"], arrays["z"]])
    copied()
    np.testing.assert_array_equal(arrays["a"], arrays["z"])


def test_a_graph_binds_a_callable_that_cannot_be_hashed():
    """A ctypes function cannot be hashed; a graph that launches one (a BLAS setting, say) still captures it."""
    seen = []

    class Unhashable:
        __hash__ = None

        def __eq__(self, other):
            return self is other

        def __call__(self, value):
            seen.append(value)

    with NumpyBackend() as backend:
        launch = Unhashable()
        graph = backend.capture(lambda: backend.launch(backend.main, "unhashable", launch, 3))
        graph.launch()
        backend.synchronize()
    assert seen == [3, 3]  # the eager run, then the launch


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Sequential(one_pass=True), Leapfrog(2, one_pass=True)],
                         ids=repr)
@pytest.mark.parametrize("batch_size", [1, 4], ids=lambda b: f"B{b}")
def test_a_launched_graph_makes_no_unbound_product(schedule, batch_size, monkeypatch):
    """Every product of a captured SGD step is bound: launched with ``matmul`` refusing, it still gives the eager
    step's bits."""
    sizes = [6, 9, 7, 4]
    steps = [batch(sizes, batch_size, seed=s, dtype=np.float32) for s in range(3)]
    with NumpyBackend() as backend, MLP(sizes, seed=1, backend=backend) as eager, \
            MLP(sizes, seed=1, backend=backend) as graph:
        for x, y in steps[:2]:
            eager.sgd_step(x, y, 0.5, schedule)
            graph.sgd_step(x, y, 0.5, schedule, graph=True)  # the first captures, eagerly run twice
        eager.sgd_step(*steps[2], 0.25, schedule)
        backend.synchronize()  # the eager steps' products made before matmul refuses

        def refused(*args, **kwargs):
            raise AssertionError("an unbound product in a launched graph")

        monkeypatch.setattr(ops_numpy, "matmul", refused)
        monkeypatch.setattr(host_blas, "matmul", refused)
        graph.sgd_step(*steps[2], 0.25, schedule, graph=True)
        for got, want in zip(graph.weights + graph.biases, eager.weights + eager.biases):
            np.testing.assert_array_equal(got, want)
