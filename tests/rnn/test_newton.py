"""TimeNewton, the forward pass over time as a Newton solve (DEER), against the float64 reference: its
iterations and errors on contracting and expanding RNNs (float64, float32; full and quasi; damped or
not), the tau bound (every iteration makes one more step exact), its rounds against their formula, early
stops (a warning once, or an error), NaN and Inf undone, warm starts, its refusals, and an SGD step whose
forward pass it runs within rounding of BPTT's."""

import warnings

import numpy as np
import pytest

from helpers import CountedNumpy, batch, rnn_lists
from leapfrog_gpu import BPTT, RNN, TimeNewton, TimeScan
from leapfrog_gpu.rnn import newton
from leapfrog_gpu.rnn import reference as reference_rnn

SIZES = [4, 6, 5, 3]
NORMS = {"contracting": 0.9, "expanding": 3.0}
"""Spectral norms of u: the linearised recurrence contracts, or it expands (its Jacobians' products grow)."""


def network(norm, dtype="float64", activation="tanh", output="every", seed=1):
    return RNN(SIZES, activation, output=output, dtype=dtype, seed=seed, backend="numpy", recurrent_norm=norm)


def inputs(tau, B=3, dtype="float64", seed=0):
    """The sequences of ``helpers.batch`` alone: the solvers run the forward pass only."""
    return batch(SIZES, B, seed, dtype, tau=tau)[0]


def reference(net, x):
    """Every a^{L,t} in float64, by the plain loop of ``rnn.reference``."""
    return reference_rnn.feedforward(net.weights, net.recurrent, net.biases, x, net.activation,
                                     net.output_activation, net.output)


def error(got, want):
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / np.max(np.abs(want)))


def solved(net, x, solver):
    """The outputs by ``solver``, and the warnings the solve gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = net.feedforward(x, solver=solver)
    return out, [w for w in caught if issubclass(w.category, RuntimeWarning)]


SOLVERS = {"newton": {}, "quasi": {"quasi": True}, "damped": {"damping": 0.5}, "quasi-damped": {"quasi": True,
                                                                                                 "damping": 0.3}}


@pytest.mark.parametrize("scan", ["doubling", "reduction"])
@pytest.mark.parametrize("kind", list(SOLVERS))
@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("tau", [1, 2, 5, 33])
def test_float64_outputs_match_the_reference_within_1e_10(tau, norm, kind, scan):
    with network(NORMS[norm]) as net:
        x = inputs(tau)
        solver = TimeNewton(**SOLVERS[kind], scan=scan)
        out, caught = solved(net, x, solver)
        stats, want = solver.stats, reference(net, x)
    assert not caught and stats["converged"] and stats["resets"] == 0
    assert error(out, want) <= 1e-10
    assert all(1 <= i <= tau for i in stats["iterations_per_layer"])
    assert stats["residual"] <= stats["tol"] == 1e-12


def test_iterations_and_errors_of_each_kind_at_64_steps():
    """The table of docs/rnn.md: iterations per layer, float64, tau = 64, B = 3."""
    table = {}
    for norm in NORMS:
        for kind, options in SOLVERS.items():
            with network(NORMS[norm]) as net:
                x = inputs(64)
                solver = TimeNewton(**options)
                out, _ = solved(net, x, solver)
                table[norm, kind] = (solver.stats["iterations_per_layer"], error(out, reference(net, x)))
    assert table["contracting", "newton"][0] == [4, 5] and table["expanding", "newton"][0] == [8, 7]
    assert all(1 <= i < 64 for iterations, _ in table.values() for i in iterations)
    assert max(e for _, e in table.values()) <= 1e-10
    newton_iterations = sum(table["expanding", "newton"][0])
    assert sum(table["expanding", "quasi"][0]) > newton_iterations  # the diagonal converges more slowly


@pytest.mark.parametrize("quasi", [False, True])
@pytest.mark.parametrize("norm", list(NORMS))
def test_float32_outputs_match_the_reference_within_float32_rounding(norm, quasi):
    tau = 64
    with network(NORMS[norm], dtype="float32") as net:
        x = inputs(tau, dtype="float32")
        solver = TimeNewton(quasi=quasi)
        out, caught = solved(net, x, solver)
        assert solver.stats["converged"] and solver.stats["tol"] == 1e-6 and not caught
        assert error(out, reference(net, x)) <= 1e-6 * (1 + tau / 8)  # as test_rnn's float32 tolerance


@pytest.mark.parametrize("damping", [0.0, 1.0])
@pytest.mark.parametrize("quasi", [False, True])
def test_each_iteration_makes_at_least_one_more_step_exact(quasi, damping):
    """After i iterations of every layer the first i steps are the sequential forward's, whatever the
    Jacobian (damping = 1 is the Picard sweep), on an expanding RNN; tau iterations make every step exact."""
    tau = 12
    with network(NORMS["expanding"]) as net:
        x = inputs(tau)
        want = reference(net, x)
        for i in (1, 2, 5, tau):
            out, _ = solved(net, x, TimeNewton(tol=0, max_iterations=i, quasi=quasi, damping=damping))
            assert error(out[:i], want[:i]) <= 1e-10, f"{i} iterations"
        solver = TimeNewton(quasi=quasi, damping=damping)
        out, caught = solved(net, x, solver)
        assert solver.stats["converged"] and not caught and max(solver.stats["iterations_per_layer"]) <= tau
        assert error(out, want) <= 1e-10


@pytest.mark.parametrize("scan", ["doubling", "reduction"])
@pytest.mark.parametrize("quasi", [False, True])
@pytest.mark.parametrize("tau", [1, 2, 3, 8, 13, 64])
def test_rounds_are_counted_as_run_and_match_the_formula(tau, quasi, scan):
    with network(1.5) as net:
        solver = TimeNewton(quasi=quasi, scan=scan)
        solved(net, inputs(tau), solver)
    stats, log2 = solver.stats, (tau - 1).bit_length()
    per_scan = log2 if scan == "doubling" else max(2 * log2 - 1, 0)  # reduction: up log2, down one fewer
    assert stats["scan"] == scan
    assert stats["rounds"] == TimeNewton.rounds_formula(stats["iterations_per_layer"], tau, scan)
    assert stats["rounds"] == sum(i * per_scan + i + 1 for i in stats["iterations_per_layer"])
    assert stats["evaluations"] == sum(i + 1 for i in stats["iterations_per_layer"])
    assert stats["sequential_rounds"] == 2 * tau
    assert stats["flops"] > 0 and stats["sequential_flops"] > 0
    n = max(SIZES[1:-1])
    assert stats["memory_bytes"] == 8 * (5 * tau * 3 * n + 2 * tau * 3 * (n if quasi else n * n))


@pytest.mark.parametrize("quasi", [False, True])
def test_one_more_iteration_of_every_layer_costs_the_predicted_flops(quasi):
    flops = {}
    for m in (1, 2):
        with network(3.0) as net, warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # stopped early, as asked
            solver = TimeNewton(quasi=quasi, max_iterations=m)
            solved(net, inputs(16), solver)
        assert solver.stats["iterations_per_layer"] == [m, m]
        flops[m] = solver.stats["flops"]
    assert flops[2] - flops[1] == solver.iteration_flops(SIZES, 16, 3) > 0


def test_auto_scans_full_jacobians_by_reduction_and_diagonals_by_doubling_on_the_host():
    with network(0.9) as net:
        for quasi, want in ((False, "reduction"), (True, "doubling")):
            solver = TimeNewton(quasi=quasi)
            solved(net, inputs(8), solver)
            assert solver.stats["scan"] == want
            assert solver.stats["rounds"] == TimeNewton.rounds_formula(solver.stats["iterations_per_layer"], 8, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_solve_that_reaches_rounding_above_tol_stops_there_and_says_so(dtype):
    """tol = 0 cannot be met: Newton stops once its residual is within STALL machine epsilons and has not
    fallen by 10 % in PATIENCE iterations, far short of tau iterations, unconverged, its output the forward
    pass's to rounding."""
    tau = 256
    with network(0.9, dtype) as net:
        x = inputs(tau, dtype=dtype)
        solver = TimeNewton(tol=0)
        out, caught = solved(net, x, solver)
        want = reference(net, x.astype("float64"))
    stats, eps = solver.stats, np.finfo(dtype).eps
    assert stats["stalled"] == [True, True] and stats["converged"] is False
    assert max(stats["iterations_per_layer"]) < 20
    for h in stats["residuals"]:
        recent = h[-newton.PATIENCE:]
        assert max(recent) <= newton.STALL * eps and min(recent) > 0.9 * min(h[:-newton.PATIENCE])
    assert error(out, want) <= 100 * eps
    assert [f"where it stopped falling: the rounding of {dtype}" in str(w.message) for w in caught] == [True]


@pytest.mark.parametrize("scan, vectors, matrices", [
    # tau = 5. Doubling, strides 1, 2, 4: J x + c for t + s < 5 (4, 3, 1), J J for t + 2s < 5 (3, 1, 0).
    ("doubling", 8, 4),
    # Reduction up, strides 1, 2, 4: pairs (0,1) (2,3); (0,2); (0,4): 2 + 1 + 1 J x + c; J J kept for a later
    # level at 0 and 2, then 0: 2 + 1; down, strides 2 then 1: x_2 from x_4; x_1 from x_2 and x_3 from x_4.
    ("reduction", 2 + 1 + 1 + 1 + 2, 2 + 1),
])
def test_the_scans_run_the_products_their_algorithm_takes_and_the_flops_count_them(monkeypatch, scan, vectors,
                                                                                     matrices):
    """One Newton iteration a layer at tau = 5, B = 3: the matrix-vector and matrix-matrix products the scans
    run, counted from the calls, are those of the algorithm worked by hand, and ``iteration_flops`` is their
    flops (2 n^2 and 2 n^3 a product, n a vector product's add) with the elementwise work and the evaluation."""
    tau, B, ran, in_scan = 5, 3, [], []

    def counted(name, fn):
        def call(*args, **options):
            if name == "matmul" and in_scan:
                ran.append((args[0].shape[-2], args[1].shape[-1], args[0].shape[0]))  # (n, 1 or n, products)
            return fn(*args, **options)
        return call

    def scanning(*args):
        in_scan.append(True)
        try:
            return suffix_scan(*args)
        finally:
            in_scan.pop()

    suffix_scan = newton.suffix_scan
    monkeypatch.setattr(newton, "suffix_scan", scanning)
    with network(3.0) as net, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # stopped after one iteration, as asked
        monkeypatch.setattr(net.backend, "xp", CountedNumpy(counted))
        solver = TimeNewton(scan=scan, max_iterations=1)
        solved(net, inputs(tau, B), solver)
    assert solver.stats["iterations_per_layer"] == [1, 1]
    for n in SIZES[1:-1]:  # the layers in turn: 6 then 5
        mine = [(rows, cols, count) for rows, cols, count in ran if rows == n]
        assert sum(count for _, cols, count in mine if cols == 1) == vectors
        assert sum(count for _, cols, count in mine if cols == n) == matrices
    step = sum((4 + 2 * n) * n * tau * B + vectors * B * (2 * n * n + n) + matrices * B * 2 * n ** 3
               for n in SIZES[1:-1])
    evaluation = sum(2 * n * n * (tau - 1) * B + 5 * n * tau * B for n in SIZES[1:-1])
    assert solver.iteration_flops(SIZES, tau, B) == step + evaluation


@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
def test_every_activation(activation):
    with network(1.5, activation=activation, output="last") as net:
        x = inputs(20)
        out, caught = solved(net, x, TimeNewton())
        assert not caught and error(out, reference(net, x)) <= 1e-10


def test_an_early_stop_warns_once_and_says_so_in_its_stats():
    with network(NORMS["contracting"]) as net:
        x = inputs(40)
        solver = TimeNewton(max_iterations=1)
        with pytest.warns(RuntimeWarning, match=r"TimeNewton\(.*\) stopped after 2 iterations \(1 \+ 1 by layer\) "
                                                 r"with a relative residual of .* above tol=1e-12"):
            net.feedforward(x, solver=solver)
        assert solver.stats["converged"] is False and solver.stats["residual"] > 1e-12
        _, caught = solved(net, x, solver)  # once per solver
        assert not caught and solver.stats["converged"] is False


def test_strict_raises_from_the_call_that_waits_for_the_solve():
    with network(NORMS["contracting"]) as net:
        with pytest.raises(RuntimeError, match="stopped after 2 iterations"):
            net.feedforward(inputs(40), solver=TimeNewton(max_iterations=1, strict=True))
        out, caught = solved(net, inputs(40), TimeNewton())  # the network still runs
        assert not caught and error(out, reference(net, inputs(40))) <= 1e-10


def test_a_step_that_leaves_nan_or_inf_is_undone_and_counted(monkeypatch):
    """A scan that returns NaN (as one that overflows does) is undone: the Picard sweep from the previous
    iterate replaces it, the solve still converges, and ``resets`` counts it."""
    scans, suffix_scan = [], newton.suffix_scan

    def poisoned(xp, product, A, A_next, c, q, scan):
        rounds = suffix_scan(xp, product, A, A_next, c, q, scan)
        scans.append(scan)
        if len(scans) in (1, 2):  # the first layer's first two iterations
            c[3].fill(np.nan if len(scans) == 1 else np.inf)
        return rounds

    monkeypatch.setattr(newton, "suffix_scan", poisoned)
    with network(NORMS["expanding"]) as net:
        x = inputs(16)
        solver = TimeNewton()
        out, caught = solved(net, x, solver)
        assert solver.stats["resets"] == 2 and solver.stats["converged"] and not caught
        assert error(out, reference(net, x)) <= 1e-10


def test_an_overflowing_expanding_rnn_in_float32_is_undone_and_still_converges():
    with network(3.0, dtype="float32") as net:
        x = inputs(1024, B=1, dtype="float32")
        solver = TimeNewton()
        out, caught = solved(net, x, solver)
        assert solver.stats["resets"] >= 1 and solver.stats["converged"] and not caught
        assert error(out, reference(net, x)) <= 1e-5


def test_nan_input_is_refused_before_the_solve():
    with network(0.9) as net:
        x = inputs(5)
        x[2, 1, 0] = np.nan
        with pytest.raises(ValueError, match="x contains NaN or Inf"):
            net.feedforward(x, solver=TimeNewton())


def test_a_warm_start_begins_at_the_previous_minibatchs_states():
    with network(NORMS["expanding"]) as net:
        x, other = inputs(30), inputs(30, seed=5)
        cold, warm = TimeNewton(), TimeNewton(warm_start=True)
        solved(net, x, cold)
        first = cold.stats["iterations"]
        solved(net, x, cold)
        assert cold.stats["iterations"] == first  # from zero again
        out, _ = solved(net, x, warm)
        assert warm.stats["iterations"] == 0 and error(out, reference(net, x)) <= 1e-10  # already solved
        out, _ = solved(net, other, warm)
        assert warm.stats["converged"] and error(out, reference(net, other)) <= 1e-10
        solved(net, inputs(31), warm)  # another (tau, B): another plan, which holds no states yet: from zero
        assert warm.stats["converged"] and warm.stats["iterations"] > 0


def test_backprop_and_sgd_step_take_the_forward_pass_from_the_solver():
    """Forward by TimeNewton, backward by TimeScan: within rounding of BPTT over three SGD steps."""
    x, y = inputs(9, B=2), np.random.default_rng(3).uniform(0.1, 0.9, (9, SIZES[-1], 2))
    with network(1.5) as bptt, network(1.5) as solved_net:
        for _ in range(3):
            bptt.sgd_step(x, y, 0.2, BPTT())
            solved_net.sgd_step(x, y, 0.2, schedule=TimeScan(), solver=TimeNewton())
        for got, want in zip(solved_net.weights + solved_net.recurrent + solved_net.biases,
                             bptt.weights + bptt.recurrent + bptt.biases):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
        want = reference_rnn.backprop(bptt.weights, bptt.recurrent, bptt.biases, x, y, bptt.activation, bptt.cost,
                                      bptt.output_activation, "every")
        for got_list, want_list in zip(rnn_lists(solved_net.backprop(x, y, BPTT(), solver=TimeNewton(quasi=True))), want):
            for got, expected in zip(got_list, want_list):
                np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("options,kind,message", [
    ({"tol": -1}, ValueError, r"tol must be None or a finite number >= 0; got -1"),
    ({"tol": float("nan")}, ValueError, r"tol must be None or a finite number >= 0; got nan"),
    ({"tol": "1e-9"}, TypeError, r"tol must be None or a finite number >= 0; got '1e-9'"),
    ({"max_iterations": 0}, ValueError, r"max_iterations must be None \(tau\) or an integer >= 1; got 0"),
    ({"max_iterations": 2.5}, TypeError, r"max_iterations must be None \(tau\) or an integer >= 1; got 2.5"),
    ({"max_iterations": True}, TypeError, r"max_iterations must be None \(tau\) or an integer >= 1; got True"),
    ({"damping": 1.5}, ValueError, r"damping must be a number in \[0, 1\] \(0: Newton, 1: Picard sweeps\); got 1.5"),
    ({"damping": -0.1}, ValueError, r"damping must be a number in \[0, 1\]"),
    ({"damping": None}, TypeError, r"damping must be a number in \[0, 1\]"),
    ({"quasi": "yes"}, TypeError, r"quasi must be True or False; got 'yes'"),
    ({"warm_start": 1}, TypeError, r"warm_start must be True or False; got 1"),
    ({"memory_limit": 0}, ValueError, r"memory_limit must be an integer number of bytes >= 1; got 0"),
    ({"strict": "no"}, TypeError, r"strict must be True or False; got 'no'"),
    ({"scan": "blelloch"}, ValueError, r"scan must be one of 'auto', 'doubling', 'reduction'; got 'blelloch'"),
    ({"scan": None}, TypeError, r"scan must be one of 'auto', 'doubling', 'reduction'; got None"),
])
def test_bad_options_are_refused_naming_the_option(options, kind, message):
    with pytest.raises(kind, match=message):
        TimeNewton(**options)


def test_what_cannot_run_is_refused_before_it_runs():
    with network(0.9) as net:
        x = inputs(6)
        with pytest.raises(TypeError, match=r"solver must be None \(the forward step by step\) or a TimeNewton\(\); "
                                            r"got 'newton'"):
            net.feedforward(x, solver="newton")
        with pytest.raises(ValueError, match=r"TimeNewton\(.*\) needs 14688 bytes .* for sizes \[4, 6, 5, 3\] at tau=6, "
                                             r"B=3 \(float64\), over memory_limit=1000 bytes; pass a larger "
                                             r"memory_limit, quasi=True"):
            net.feedforward(x, solver=TimeNewton(memory_limit=1000))
        with pytest.raises(ValueError, match="graph=True captures the step-by-step forward pass"):
            net.sgd_step(x, np.zeros((6, 3, 3)), 0.1, graph=True, solver=TimeNewton())
        np.testing.assert_allclose(net.feedforward(x, solver=TimeNewton(quasi=True, memory_limit=7000)),
                                   reference(net, x), rtol=1e-10, atol=1e-12)


def test_the_example_in_docs_rnn_md_runs():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs/rnn.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/rnn.md", "exec"), {})


def test_a_warm_start_on_a_new_network_begins_at_zero_as_a_cold_start_does():
    """The first solve of a plan has no states to start from (it holds NaN): a warm start then starts from
    zero, taking a cold start's iterations with no step undone, not from the NaN it would reset each step."""
    for tau in (30, 64):
        x = inputs(tau)
        with network(NORMS["expanding"]) as cold_net, network(NORMS["expanding"]) as warm_net:
            cold, warm = TimeNewton(), TimeNewton(warm_start=True)
            solved(cold_net, x, cold)
            out, caught = solved(warm_net, x, warm)
            want = reference(warm_net, x)
        assert warm.stats["iterations_per_layer"] == cold.stats["iterations_per_layer"]
        assert max(warm.stats["iterations_per_layer"]) < 12 and warm.stats["resets"] == 0
        assert warm.stats["converged"] and not caught and error(out, want) <= 1e-10


CAPPED = [  # (sizes, recurrent_norm, tol): 3 iterations a layer leave some layers above tol and others below
    ([4, 6, 5, 3], 0.3, 1e-13),  # the first layer converges, the last does not
    ([4, 2, 6, 3], 0.5, 1e-12),  # the first does not, the last does
    ([4, 6, 5, 2, 3], 0.5, 3e-12),  # the middle one alone converges
]


@pytest.mark.parametrize("sizes, norm, tol", CAPPED, ids=["first", "last", "middle"])
def test_converged_means_every_layer_converged(sizes, norm, tol):
    """``converged`` is every layer's final residual <= tol, whichever layers stop short; the solve warns
    exactly when it did not converge. Without the cap every layer converges."""
    with RNN(sizes, "tanh", output="every", dtype="float64", seed=1, backend="numpy", recurrent_norm=norm) as net:
        x = batch(sizes, 3, 0, "float64", tau=8)[0]
        for cap in (3, None):
            solver = TimeNewton(tol=tol, max_iterations=cap)
            _, caught = solved(net, x, solver)
            final = [history[-1] for history in solver.stats["residuals"]]
            assert len(final) == len(sizes) - 2
            if cap is not None:
                assert min(final) <= tol < max(final), final  # the case is as described
            assert solver.stats["converged"] is all(r <= tol for r in final)
            assert len(caught) == (0 if solver.stats["converged"] else 1)


def test_every_state_is_tested_not_one_norm_over_the_sequence_and_the_batch():
    """One norm over a layer's (n, tau, B) states let the largest hide the rest: a relu RNN whose states grow from 1
    to 1e41 over tau = 128 stopped "converged" at a residual of 1e-16, 74 % off; a warm start whose second batch
    changes only a sequence 1e-13 the size of its batch-mate stopped after 0 iterations, holding the first
    batch's states. Each now as the plain loop gives it."""
    with RNN([3, 6, 2], "relu", output="every", dtype="float64", seed=0, backend="numpy", recurrent_norm=3.0) as net:
        x = np.random.default_rng(0).standard_normal((128, 3, 2))
        want = reference(net, x)
        assert np.abs(want).max() > 1e35  # the case is as described
        solver = TimeNewton(strict=True)
        assert error(net.feedforward(x, solver=solver), want) <= 1e-12 and solver.stats["converged"]
    with RNN([3, 6, 2], "tanh", output="every", dtype="float64", seed=0, backend="numpy") as net:
        params = net.parameters()
        net.set_parameters({l: {**named, "b": np.zeros_like(named["b"])} for l, named in params.items()})
        rng = np.random.default_rng(0)
        x = rng.standard_normal((32, 3, 2)) * [1.0, 1e-13]
        moved = x.copy()
        moved[..., 1] = 1e-13 * rng.standard_normal((32, 3))
        warm = TimeNewton(warm_start=True, strict=True)
        net.feedforward(x, solver=warm)
        got, want = net.feedforward(moved, solver=warm), reference(net, moved)
        assert warm.stats["converged"]
        for sequence in range(2):
            assert error(got[..., sequence], want[..., sequence]) <= 1e-10, sequence


def test_stalled_on_hand_made_histories():
    """Stalled: the last PATIENCE residuals all within the floor, none of them 10 % below the best before."""
    assert newton.PATIENCE == 3  # the histories below are written for it
    stalled, floor = newton.stalled, 1.0
    assert stalled([5.0, 1.0, 0.95, 0.92, 0.91], floor)  # flat within the floor
    assert stalled([5.0, 0.9, 0.95, 0.92, 0.91], floor)  # the best before is 0.9: none below 0.81
    assert stalled([5.0, 1.0, 1.0, 1.0, 1.0], floor)  # at the floor counts as within it
    assert not stalled([5.0, 1.0, 0.95, 1.5, 0.96], floor)  # one bounced back above the floor: it may yet fall
    assert not stalled([5.0, 1.0, 1.2, 0.95, 0.95], floor)  # the oldest of the last three above the floor
    assert not stalled([5.0, 1.0, 0.95, 0.92, 1.0 + 1e-9], floor)  # the newest just above it
    assert not stalled([5.0, 1.0, 0.95, 0.92, 0.85], floor)  # 15 % below the best before: still falling
    assert not stalled([5.0, 1.0, 0.95, 0.92, 0.9], floor)  # exactly 10 % below: still falling
    assert not stalled([0.5, 0.5, 0.5], floor)  # PATIENCE residuals, none before them to compare with
    assert stalled([0.5, 0.5, 0.5, 0.5], floor)  # one more: there is
    assert not stalled([], floor) and not stalled([0.5], floor)


def stall_criterion(history, floor, patience):
    """The docstring's rule, written out: the last ``patience`` within ``floor``, none 10 % below the best
    before them."""
    recent, before = history[-patience:], history[:-patience]
    return len(before) > 0 and all(r <= floor for r in recent) and all(r > 0.9 * min(before) for r in recent)


def test_a_layer_that_converges_is_never_stalled():
    """A tol set just under the first new low of a float32 layer that has reached rounding: the layer
    converges on an iteration whose history meets the stall rule, and is not ``stalled`` (it stopped at
    tol). On every solve, ``stalled`` layers are above tol."""
    shown = False
    for quasi in (False, True):
        for norm in (1.5, 2.0):  # at tau = 128 one each (Newton at 2, quasi at 1.5) meets a new low at rounding
            with network(norm, "float32") as net:
                x = inputs(128, dtype="float32")
                floor = newton.STALL * float(np.finfo(np.float32).eps)
                probe = TimeNewton(tol=0, quasi=quasi)
                solved(net, x, probe)
                history = probe.stats["residuals"][0]  # the first layer: its input does not depend on tol
                for j in range(1, len(history)):
                    if history[j] < min(history[:j]) and stall_criterion(history[:j + 1], floor, newton.PATIENCE):
                        tol = float(np.sqrt(history[j] * min(history[:j])))
                        solver = TimeNewton(tol=tol, quasi=quasi)
                        solved(net, x, solver)
                        first = solver.stats["residuals"][0]
                        assert first == history[:j + 1] and first[-1] <= tol
                        shown = True
                        for h, stuck in zip(solver.stats["residuals"], solver.stats["stalled"]):
                            assert not (stuck and h[-1] <= tol)
                        break
            for h, stuck in zip(probe.stats["residuals"], probe.stats["stalled"]):
                assert stuck and h[-1] > 0  # tol = 0: every layer stops at rounding
    assert shown, "no solve converged on an iteration where its history met the stall rule"


@pytest.mark.parametrize("quasi", [False, True])
def test_memory_is_sized_by_the_widest_recurrent_layer_not_the_output(quasi):
    """sizes [4, 6, 5, 9]: the output (9) is wider than every recurrent layer (n = 6). The solver's buffers are
    5·tau·B·n values and 2·tau·B·n^2 (quasi: 2·tau·B·n), in bytes; a memory_limit of exactly that runs, one
    byte less is refused."""
    sizes, tau, B, n = [4, 6, 5, 9], 7, 3, 6
    need = 8 * (5 * tau * B * n + 2 * tau * B * (n if quasi else n * n))
    x = batch(sizes, B, 0, "float64", tau=tau)[0]
    with RNN(sizes, "tanh", output="every", dtype="float64", seed=1, backend="numpy", recurrent_norm=0.9) as net:
        want = reference(net, x)
        solver = TimeNewton(quasi=quasi, memory_limit=need)
        assert solver.memory_needed(sizes, tau, B, 8) == need
        out, caught = solved(net, x, solver)
        assert solver.stats["memory_bytes"] == need and not caught and error(out, want) <= 1e-10
        with pytest.raises(ValueError, match=rf"needs {need} bytes .* over memory_limit={need - 1} bytes"):
            net.feedforward(x, solver=TimeNewton(quasi=quasi, memory_limit=need - 1))
