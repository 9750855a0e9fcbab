"""Forward solvers: Jacobi bitwise the node-by-node forward after D sweeps and not after D - 1, Newton
within 1e-12 with its iterations counted (early on a contracting network, all D on a hard one), both
for DagNets and for the MLP, inside backprop, and their counters."""

import math

import numpy as np
import pytest

from leapfrog_gpu import MLP, Leapfrog
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.dag.forward import ForwardJacobi, ForwardNewton
from leapfrog_gpu.dag.network import chain
from helpers import NETS, dag_data as data, deep_chain, flat, same_arrays as same

KEYS = {"rounds", "flops", "bytes", "memory_bytes", "sequential_flops", "sequential_bytes"}


@pytest.fixture
def backend():
    with NumpyBackend(mode="threads") as backend:
        yield backend


@pytest.mark.parametrize("name", list(NETS) + ["chain"])
def test_jacobi_is_bitwise_after_d_sweeps_and_not_after_d_minus_1(backend, name):
    net = deep_chain(9, backend) if name == "chain" else NETS[name](backend)
    x, _ = data(net, 4)
    want = net.feedforward(x)
    exact = ForwardJacobi()
    assert np.array_equal(net.feedforward(x, solver=exact), want)
    assert exact.stats["sweeps"] == net.depth and exact.stats["converged"] and KEYS <= set(exact.stats)
    short = ForwardJacobi(max_sweeps=net.depth - 1)
    with pytest.warns(RuntimeWarning, match=f"stopped after {net.depth - 1} sweeps short of those that make it "
                                            "exact: "):
        assert not np.allclose(net.feedforward(x, solver=short), want, rtol=1e-6, atol=0)
    assert short.stats["sweeps"] == net.depth - 1 and not short.stats["converged"]


def test_jacobi_blocks_and_warm_start(backend):
    net = deep_chain(12, backend)
    x, _ = data(net, 3)
    want = net.feedforward(x)
    blocked = ForwardJacobi(blocks=3)
    assert np.array_equal(net.feedforward(x, solver=blocked), want)
    assert blocked.stats["sweeps_per_block"] == [4, 4, 4]
    tolerant = ForwardJacobi(tol=0.0, blocks=3)  # each group stops once a sweep changes nothing
    assert np.array_equal(net.feedforward(x, solver=tolerant), want)
    warm = ForwardJacobi(tol=1e-12, warm_start=True)
    net.feedforward(x, solver=warm)
    assert warm.stats["sweeps"] == net.depth
    assert np.array_equal(net.feedforward(x, solver=warm), want)
    assert warm.stats["sweeps"] == 1 and warm.stats["change"] == 0  # the answer was already in place


def test_a_tolerance_of_zero_is_met_by_a_sweep_that_changes_nothing(backend):
    """The stopping test is ``change <= tol``: with tol = 0 a warm start from the answer stops after its first
    sweep, whose change is exactly 0, instead of running all D."""
    net = deep_chain(5, backend)
    x, _ = data(net, 3)
    warm = ForwardJacobi(tol=0.0, warm_start=True)
    want = net.feedforward(x, solver=warm)
    assert warm.stats["sweeps"] == net.depth == 5
    assert np.array_equal(net.feedforward(x, solver=warm), want)
    assert (warm.stats["sweeps"], warm.stats["change"], warm.stats["converged"]) == (1, 0, True)


@pytest.mark.parametrize("name", list(NETS) + ["chain"])
def test_newton_is_within_1e_12(backend, name):
    net = deep_chain(9, backend) if name == "chain" else NETS[name](backend)
    x, _ = data(net, 4)
    want = net.feedforward(x)
    newton = ForwardNewton()
    got = net.feedforward(x, solver=newton)
    assert np.max(np.abs(got - want)) <= 1e-12
    stats = newton.stats
    assert stats["converged"] and 1 <= stats["iterations"] <= net.depth and KEYS <= set(stats)
    assert stats["rounds"] == stats["iterations"] * math.ceil(math.log2(net.depth))
    assert set(stats["residual"]) == set(net.order) and max(stats["residual"].values()) <= 1e-12


def scaled_chain(backend, D, scale, activation):
    net = chain([4] + [6] * (D - 1) + [4], activation=activation, output_activation=activation, dtype="float64",
                seed=2, backend=backend)
    params = net.parameters()
    for v in net.nodes:
        params[v]["w"] *= scale
    net.set_parameters(params)
    return net


def test_newton_converges_early_on_a_contracting_network(backend):
    net = scaled_chain(backend, 16, 0.05, "tanh")
    x, _ = data(net, 3)
    newton = ForwardNewton()
    assert np.max(np.abs(net.feedforward(x, solver=newton) - net.feedforward(x))) <= 1e-12
    assert newton.stats["iterations"] <= 4 < net.depth


def test_newton_stops_at_float32_precision_by_default(backend):
    net = chain([4] + [6] * 15 + [4], activation="tanh", output_activation="tanh", seed=2, backend=backend)
    params = net.parameters()
    for v in net.nodes:
        params[v]["w"] *= np.float32(0.05)
    net.set_parameters(params)
    x, _ = data(net, 3)
    newton = ForwardNewton()
    assert np.max(np.abs(net.feedforward(x, solver=newton) - net.feedforward(x))) <= 1e-6
    assert newton.stats["tol"] == 1e-6 and newton.stats["converged"] and newton.stats["iterations"] <= 3


def test_newton_needs_all_d_iterations_on_an_expanding_network(backend):
    net = scaled_chain(backend, 8, 4.0, "tanh")
    x, _ = data(net, 3)
    newton = ForwardNewton()
    assert np.max(np.abs(net.feedforward(x, solver=newton) - net.feedforward(x))) <= 1e-12
    assert newton.stats["iterations"] == net.depth
    capped = ForwardNewton(max_iterations=net.depth - 1)
    with pytest.warns(RuntimeWarning, match="stopped after 7 iterations"):
        net.feedforward(x, solver=capped)
    assert not capped.stats["converged"] and capped.stats["residuals"][-1] > 1e-12


def test_damped_newton_stops_unconverged_at_the_depth_and_says_so(backend):
    """damping = 1/2 leaves half of the error of the nodes of level 1, which depend on x alone, after every
    step: (1/2)^8 of it after D = 8 iterations, the default cap, well above tol; undamped, D iterations are exact."""
    net = scaled_chain(backend, 8, 1.0, "tanh")
    x, _ = data(net, 3)
    damped = ForwardNewton(damping=0.5)
    with pytest.warns(RuntimeWarning, match=f"stopped after {net.depth} iterations with a relative residual"):
        got = net.feedforward(x, solver=damped)
    assert damped.stats["iterations"] == net.depth and not damped.stats["converged"]
    assert np.max(np.abs(got - net.feedforward(x))) > 1e-6
    undamped = ForwardNewton()
    net.feedforward(x, solver=undamped)
    assert undamped.stats["converged"] and undamped.stats["iterations"] <= net.depth


@pytest.mark.parametrize("damping", [0.5, 0.9])
def test_damped_newton_converges_on_a_relu_node_off_for_the_whole_batch(backend, damping):
    """h = tanh(w x + 10) is near 1, so ``off`` = relu(-10 (h_1 + ... + h_4) + 5) is 0 on every sample, while at the
    zero start it is on (5): a damped step takes its iterate towards 0 without reaching it, whose residual against
    ||f_off|| = 0 was inf at every iteration (unconverged, strict raised). Against the largest ||f_u|| it converges,
    and the output is sigmoid(b_out), as off = 0 gives."""
    from leapfrog_gpu import DagNet, Dense

    net = DagNet(3, [("h", Dense(4, "tanh"), "x"), ("off", Dense(2, "relu"), "h"), ("out", Dense(2, "sigmoid"), "off")],
                 dtype="float64", backend=backend)
    params = net.parameters()
    params["h"]["b"], params["off"]["w"], params["off"]["b"] = np.full(4, 10.0), np.full((2, 4), -10.0), np.full(2, 5.0)
    net.set_parameters(params)
    x = np.random.default_rng(0).standard_normal((3, 4))
    solver = ForwardNewton(damping=damping, max_iterations=100, strict=True)
    got = net.feedforward(x, solver=solver)
    assert solver.stats["converged"] and solver.stats["iterations"] < 100
    want = np.repeat((1 / (1 + np.exp(-params["out"]["b"])))[:, None], 4, axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_newton_damping_and_the_reset_on_nan(backend, monkeypatch):
    net = scaled_chain(backend, 6, 1.0, "tanh")
    x, _ = data(net, 2)
    want = net.feedforward(x)
    damped = ForwardNewton(damping=0.5, max_iterations=200)
    assert np.max(np.abs(net.feedforward(x, solver=damped) - want)) <= 1e-12 and damped.stats["iterations"] > 6
    blowup = ForwardNewton()
    real = ForwardNewton._newton_step

    def poisoned(*args):
        step, flops, moved = real(*args)
        return {v: s * np.nan for v, s in step.items()}, flops, moved

    monkeypatch.setattr(ForwardNewton, "_newton_step", staticmethod(poisoned))
    assert np.array_equal(net.feedforward(x, solver=blowup), want)  # every step reset: Jacobi sweeps, exact in D
    assert blowup.stats["resets"] == net.depth == blowup.stats["iterations"]


def test_newton_checks_its_memory_first(backend):
    net = deep_chain(6, backend)
    x, _ = data(net, 2)
    with pytest.raises(ValueError, match="over memory_limit"):
        net.feedforward(x, solver=ForwardNewton(memory_limit=64))


@pytest.mark.parametrize("solver", [ForwardJacobi(), ForwardNewton()], ids=repr)
def test_the_mlp_takes_a_solver(backend, solver):
    sizes = [5, 7, 7, 7, 3]
    with MLP(sizes, activation="tanh", dtype="float64", seed=3, backend=backend) as mlp:
        x = np.random.default_rng(0).random((5, 6))
        want = mlp.feedforward(x)
        got = mlp.feedforward(x, solver=solver)
        if isinstance(solver, ForwardJacobi):
            assert np.array_equal(got, want) and solver.stats["sweeps"] == len(sizes) - 1
        else:
            assert np.max(np.abs(got - want)) <= 1e-12


@pytest.mark.parametrize("solver", [ForwardJacobi(tol=1e-12, warm_start=True), ForwardNewton(warm_start=True)],
                         ids=repr)
def test_an_mlp_s_solves_start_warm_on_its_parameters_of_the_moment(backend, solver):
    """The MLP's second solve of one batch starts from the first's outputs, already the answer: one Jacobi sweep,
    no Newton step. After a step it starts there again and still gives the node-by-node forward of the new
    parameters (within the solver's tolerance of 1e-12), not the old one."""
    with MLP([4] * 9, activation="tanh", dtype="float64", seed=3, backend=backend) as mlp:
        rng = np.random.default_rng(0)
        x, y = rng.random((4, 3)), rng.uniform(0.1, 0.9, (4, 3))
        steps = "sweeps" if isinstance(solver, ForwardJacobi) else "iterations"
        mlp.feedforward(x, solver=solver)
        assert solver.stats[steps] >= 5
        got = mlp.feedforward(x, solver=solver)
        assert solver.stats[steps] == (1 if steps == "sweeps" else 0)
        old = mlp.feedforward(x)
        assert np.max(np.abs(got - old)) <= 1e-12
        mlp.sgd_step(x, y, 5.0)
        want = mlp.feedforward(x)
        got = mlp.feedforward(x, solver=solver)
        assert np.max(np.abs(want - old)) > 1e-3 and np.max(np.abs(got - want)) <= 1e-12
        assert solver.stats["converged"]


@pytest.mark.parametrize("name", list(NETS))
def test_solvers_inside_backprop(name):
    with NumpyBackend(mode="threads") as backend:
        net = NETS[name](backend)
        x, y = data(net, 3)
        want = flat(net.backprop(x, y))
        assert same(flat(net.backprop(x, y, Leapfrog(2), solver=ForwardJacobi())), want)
        got = flat(net.backprop(x, y, Leapfrog(2), solver=ForwardNewton()))
        assert max(float(np.max(np.abs(g - w))) for g, w in zip(got, want)) <= 1e-11
        assert net.stats["forward"]["iterations"] >= 1 and "rounds" in net.stats["backward"]


def test_bad_options_say_so():
    for make, message in ((lambda: ForwardJacobi(tol=-1), "tol"), (lambda: ForwardJacobi(blocks=0), "blocks"),
                          (lambda: ForwardNewton(damping=0), "damping"),
                          (lambda: ForwardNewton(damping=1.5), "damping"),
                          (lambda: ForwardNewton(max_iterations=0), "max_iterations")):
        with pytest.raises(ValueError, match=message):
            make()
    for bad in (2.5, "3", True):  # not an integer: a TypeError
        with pytest.raises(TypeError, match=r"^max_iterations must be None \(the depth\) or an integer >= 1; got "):
            ForwardNewton(max_iterations=bad)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # the stand-in probes 1 / x on zeros
@pytest.mark.parametrize("solver", [ForwardJacobi(), ForwardJacobi(tol=1e-9, blocks=2), ForwardNewton()], ids=repr)
def test_solvers_on_the_cupy_backend(standin, solver):
    from leapfrog_gpu.backends.cuda import CupyBackend

    with NumpyBackend(mode="serial") as host:
        x, y = data(NETS["residual"](host), 3)
        want = NETS["residual"](host).feedforward(x)
    with CupyBackend() as cupy_backend:
        net = NETS["residual"](cupy_backend)
        np.testing.assert_allclose(net.feedforward(x, solver=solver).get(), want, rtol=1e-12, atol=1e-13)
        grads = net.backprop(x, y, Leapfrog(2), solver=solver)
        assert all(np.isfinite(g.get()).all() for g in flat(grads))
        with MLP([5, 7, 7, 3], dtype="float64", backend=cupy_backend) as mlp:
            xm = np.random.default_rng(1).random((5, 4))
            np.testing.assert_allclose(mlp.feedforward(xm, solver=solver).get(), mlp.feedforward(xm).get(),
                                       rtol=1e-12, atol=1e-13)


def relu_chain(backend, scale):
    """40 relu layers of width 8, weights times ``scale``, float32: the sequential output's magnitude grows by
    orders of magnitude (times 12) or overflows to Inf and NaN (times 1e4)."""
    net = chain([8] * 41, activation="relu", output_activation="relu", seed=0, backend=backend)
    params = net.parameters()
    for v in net.nodes:
        params[v]["w"] *= np.float32(scale)
    net.set_parameters(params)
    return net


def relative_error(got, want):
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("solver", [ForwardNewton(), ForwardJacobi(tol=1e-6), ForwardJacobi()], ids=repr)
def test_a_solver_never_claims_convergence_on_a_wrong_output(backend, solver):
    """Residuals that square float32 values overflow, and an overflow's NaN must not pass for converged: a
    solve that says it converged is within float32 rounding of the sequential output, relative to its
    largest value, and one whose sequential output overflows says it did not."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.random.default_rng(0).random((8, 3))
        net = relu_chain(backend, 12)
        want = net.feedforward(x).astype(np.float64)
        assert np.isfinite(want).all() and np.max(np.abs(want)) > 1e4
        got = net.feedforward(x, solver=solver)
        assert not solver.stats["converged"] or relative_error(got, want) <= 1e-4, solver.stats
        overflowing = relu_chain(backend, 1e4)
        assert not np.isfinite(overflowing.feedforward(x)).all()
        overflowing.feedforward(x, solver=solver)
        assert solver.stats["converged"] is False


@pytest.mark.parametrize("solver", [ForwardJacobi(tol=1e-6, warm_start=True, strict=True),
                                    ForwardNewton(warm_start=True, strict=True)], ids=repr)
def test_every_sample_is_tested_not_one_norm_over_the_batch(backend, solver):
    """A warm start whose second batch changes only a sample 1e-14 the size of the other: one norm over the batch
    counted its change as none, and the solve stopped with that sample's output the first batch's (113 % off). Its
    output now as the plain float64 loop gives it (tanh, no biases: the sample's own scale throughout)."""
    net = chain([4, 6, 6, 6, 6, 2], activation="tanh", dtype="float64", seed=1, backend=backend)
    params = net.parameters()
    net.set_parameters({v: {"w": params[v]["w"], "b": np.zeros_like(params[v]["b"])} for v in params})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 2)) * [1.0, 1e-14]
    moved = x.copy()
    moved[:, 1] = 1e-14 * rng.standard_normal(4)
    want = moved
    for v in net.order:
        want = np.tanh(params[v]["w"] @ want)
    net.feedforward(x, solver=solver)
    got = net.feedforward(moved, solver=solver)
    assert solver.stats["converged"]
    for sample in range(2):
        assert relative_error(got[:, sample], want[:, sample]) <= 1e-5, sample


def test_a_sample_off_from_its_first_node_converges_under_a_damped_warm_newton(backend):
    """A zero input without biases: every node of that sample is off and driven by the iterate alone, which a damped
    step shrinks, its own largest ||f|| with it; against the largest of the batch it converges, to zeros."""
    net = chain([4, 6, 6, 6, 2], activation="relu", dtype="float64", seed=0, backend=backend)
    params = net.parameters()
    net.set_parameters({v: {"w": params[v]["w"], "b": np.zeros_like(params[v]["b"])} for v in params})
    x = np.abs(np.random.default_rng(0).standard_normal((4, 2)))
    solver = ForwardNewton(damping=0.5, warm_start=True, max_iterations=60, strict=True)
    net.feedforward(x, solver=solver)
    x[:, 1] = 0
    got, want = net.feedforward(x, solver=solver), x
    for v in net.order:
        want = np.maximum(params[v]["w"] @ want, 0)
    assert solver.stats["converged"] and solver.stats["iterations"] < 60
    assert relative_error(got, want) <= 1e-10 and np.abs(got[:, 1]).max() <= 1e-10


def test_relative_change_is_never_nan_and_counts_overflow_as_unconverged():
    from leapfrog_gpu.core.convergence import column_norms, relative as _relative

    big = np.full((3, 2), 3e38, dtype=np.float32)
    assert _relative(np, big, big * np.float32(0.5)) == pytest.approx(0.5)  # the squares would overflow float32
    assert _relative(np, np.full((2, 2), 1e-30, np.float32), np.zeros((2, 2), np.float32)) == pytest.approx(1.0)
    assert _relative(np, np.zeros(3), np.zeros(3)) == 0 and _relative(np, np.zeros(3), np.ones(3)) == math.inf
    assert not np.signbit(column_norms(np, np.zeros((2, 2)), -np.zeros((2, 2)))[2]).any()  # a zero scale is +0
    for bad in (np.nan, np.inf, -np.inf):
        assert _relative(np, np.array([1.0, bad]), np.ones(2)) == math.inf
        assert _relative(np, np.ones(2), np.array([bad, 1.0])) == math.inf
    new = np.array([[1.0, 1e-20, 0.0], [1.0, 0.0, 0.0]])  # columns: a sample each, the second 1e20 times smaller
    assert _relative(np, new, new + [[0.0, 1e-21, 0.0], [0.0, 0.0, 0.0]]) == pytest.approx(0.1)  # its own 10 %
    assert _relative(np, new, new + [[1e-3, 0.0, 0.0], [0.0, 0.0, 0.0]]) == pytest.approx(1e-3 / np.sqrt(2))
    assert _relative(np, new, new + [[0.0, 0.0, 1e-300], [0.0, 0.0, 0.0]]) == math.inf  # new_j vanishes alone
    assert _relative(np, np.full(2, 1e308), np.full(2, -1e308)) == pytest.approx(2.0)  # new - old overflows
    states = np.asfortranarray(np.arange(1.0, 13.0).reshape(2, 3, 2))  # (n, tau, B) as a plan holds them
    moved = states.copy(order="F")
    moved[:, 1, 0] *= 1.1  # one step of one sample: its own 10 % (of new's norm: 0.1 / 1.1)
    kept = states.copy(), moved.copy()
    assert _relative(np, moved, states) == pytest.approx(0.1 / 1.1)
    assert np.array_equal(states, kept[0]) and np.array_equal(moved, kept[1])  # the caller's arrays untouched


def test_an_early_stop_warns_once_or_raises_when_strict(backend):
    net = deep_chain(9, backend)
    x, _ = data(net, 3)
    want = net.feedforward(x)
    solver = ForwardNewton(max_iterations=2)
    with pytest.warns(RuntimeWarning, match=r"stopped after 2 iterations with a relative residual of .* above "
                                            r"tol=1e-12: its output is not the forward pass's"):
        got = net.feedforward(x, solver=solver)
    assert not solver.stats["converged"] and not np.allclose(got, want, rtol=1e-9, atol=0)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per solver: a second early stop is silent
        net.feedforward(x, solver=solver)
    with pytest.warns(RuntimeWarning, match="stopped after 3 sweeps"):
        net.feedforward(x, solver=ForwardJacobi(max_sweeps=3))
    for strict in (ForwardNewton(max_iterations=2, strict=True), ForwardJacobi(max_sweeps=3, strict=True)):
        with pytest.raises(RuntimeError, match="stopped after"):
            net.feedforward(x, solver=strict)
    with pytest.raises(TypeError, match="strict must be True or False"):
        ForwardNewton(strict="yes")


@pytest.mark.parametrize("solver", [ForwardJacobi, ForwardNewton], ids=lambda kind: kind.__name__)
def test_warm_start_must_be_true_or_false_for_either_solver(solver):
    with pytest.raises(TypeError, match="^warm_start must be True or False; got 'yes'$"):
        solver(warm_start="yes")
