"""The recurrent network on the CuPy backend's own code, through the CuPy stand-in (tests/harness/fake_cupy) under
each order in which it interleaves its queues: gradients of every schedule against the float64 reference,
training steps bitwise across BPTT() and Leapfrog(k), and a removed wait caught there too."""

import numpy as np
import pytest

from helpers import batch, host
from leapfrog_gpu import BPTT, RNN, SGD, Leapfrog, NaumovRNN, TimeScan, Wavefront
from leapfrog_gpu.rnn import gated_reference, reference as reference_rnn
from leapfrog_gpu.core.handoff import Handoff

from helpers import rnn_lists

SIZES = [3, 5, 7, 2]

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered in reciprocal:RuntimeWarning")
# the stand-in probes a ufunc's result dtype on zeros; CuPy itself does not compute there


@pytest.mark.parametrize("output", ["last", "every"])
@pytest.mark.parametrize("B", [1, 3])
def test_gradients_of_every_schedule_match_the_reference(standin, backend, B, output):
    x, y = batch(SIZES, B, 0, tau=4, output=output)
    with RNN(SIZES, "sigmoid", output=output, dtype="float64", backend=backend) as net:
        assert "CPU stand-in" in repr(net.backend)
        params = [host(net.weights), host(net.recurrent), host(net.biases)]
        want = reference_rnn.backprop(*params, x, y, net.activation, net.cost, net.output_activation, output)
        for schedule in (BPTT(), Leapfrog(2), Wavefront(), TimeScan(k=1), TimeScan(k=1, scan="reduction"), NaumovRNN()):
            got = rnn_lists(net.backprop(x, y, schedule))
            for got_list, want_list in zip(got, want):
                for g, w in zip(host(got_list), want_list):
                    np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-14, err_msg=repr(schedule))
            if isinstance(schedule, TimeScan):  # "auto" on a GPU: doubling, the fewest rounds
                assert schedule.stats["scan"] == ("doubling" if schedule.scan == "auto" else schedule.scan)
        np.testing.assert_allclose(net.feedforward(x).get(), reference_rnn.feedforward(
            *params, x, net.activation, net.output_activation, output), rtol=1e-12, atol=1e-15)
    kernels = {detail for kind, _, detail in standin.trace() if kind == "launch"}
    assert {"delta_output_f64", "bias_sum_f64", "bias_activation_f64"} <= kernels  # the existing kernels
    assert {"rank_update_f64", "outer_f64"} & kernels


@pytest.mark.parametrize("schedule", [Leapfrog(1, fused=True), Leapfrog(2)], ids=["k1-fused", "k2"])
def test_a_layer_of_width_one_steps_as_the_reference(standin, backend, schedule):
    """A width-1 layer's nabla_u is a product of one contiguous row, which nvmath's handle would run on the main
    stream, not on the worker that enqueues it: a fused update then read it before it was made (NaN here)."""
    sizes, eta, B = [2, 1, 1, 3], 0.1, 3
    x, y = batch(sizes, B, 0, tau=4, output="last")
    with RNN(sizes, output="last", dtype="float64", seed=2, backend=backend) as net:
        params = [host(net.weights), host(net.recurrent), host(net.biases)]
        nabla_b, nabla_w, nabla_u = reference_rnn.backprop(*params, x, y, net.activation, net.cost,
                                                           net.output_activation, "last")
        net.train_step(x, y, SGD(eta), schedule)
        got = [host(net.weights), host(net.recurrent), host(net.biases)]
    for got_list, old, nabla in zip(got, params, (nabla_w, nabla_u, nabla_b)):
        for g, p, n in zip(got_list, old, nabla):
            np.testing.assert_allclose(g, p - eta / B * n.reshape(p.shape), rtol=1e-12, atol=1e-15)


def trained(backend, schedule, steps=3):
    with RNN(SIZES, output="every", seed=3, backend=backend) as net:
        for step in range(steps):
            x, y = batch(SIZES, 2, step, np.float32, tau=5, output="every")
            net.sgd_step(x, y, 0.3, schedule)
        return host(net.weights + net.recurrent + net.biases)


def test_training_steps_agree_bitwise_across_bptt_and_leapfrog(backend):
    want = trained(backend, BPTT())
    for schedule in (Leapfrog(2), Leapfrog(3, fused=True), BPTT(fused=True)):
        assert all(np.array_equal(a, b) for a, b in zip(trained(backend, schedule), want)), repr(schedule)


def test_missing_read_after_write_wait_is_caught_on_the_standin(monkeypatch):
    """In the stand-in's workers-first order a worker that does not wait for E_l reads delta^l too early."""
    from helpers import install_standin
    from leapfrog_gpu.backends.cuda import CupyBackend

    install_standin(monkeypatch, "workers-first")
    with CupyBackend() as backend:
        want = trained(backend, BPTT())
        assert all(np.array_equal(a, b) for a, b in zip(trained(backend, Leapfrog(2)), want))
        monkeypatch.setattr(Handoff, "wait", lambda self, worker, unit: None)
        assert not all(np.array_equal(a, b) for a, b in zip(trained(backend, Leapfrog(2)), want))


def test_the_chain_on_our_own_kernels_gives_the_same_gradients(standin):
    """With chain="kernels" the output layer's (2)(3) runs on kernels/chain.cu instead of cuBLAS."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    x, y = batch(SIZES, 2, 0, tau=3, output="every")
    with CupyBackend(chain="kernels") as backend, RNN(SIZES, output="every", dtype="float64", backend=backend) as net:
        params = [host(net.weights), host(net.recurrent), host(net.biases)]
        want = reference_rnn.backprop(*params, x, y, net.activation, net.cost, net.output_activation, "every")
        for schedule in (BPTT(), Leapfrog(2)):
            for got_list, want_list in zip(rnn_lists(net.backprop(x, y, schedule)), want):
                for g, w in zip(host(got_list), want_list):
                    np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-14)
    assert any(kind == "launch" and detail.startswith("forward_gemm") for kind, _, detail in standin.trace())


@pytest.mark.parametrize("B", [1, 3])
def test_the_recurrence_runs_on_cublas_through_nvmath_one_call_a_step(standin, backend, B):
    """Each step's u^l a^{l,t-1} and (u^l)^T delta^{l,t+1} is one cuBLAS call (beta = 1) on the step's
    strided columns: 2 recurrent layers, tau - 1 steps each way."""
    import fake_cupy.nvmath

    tau, name = 5, "dgemv" if B == 1 else "dgemm"
    x, y = batch(SIZES, B, 0, tau=tau, output="every")
    with RNN(SIZES, output="every", dtype="float64", backend=backend) as net:
        net.backprop(x, y, BPTT())
        fake_cupy.nvmath.calls.clear()
        got = rnn_lists(net.backprop(x, y, BPTT()))
        params = [host(net.weights), host(net.recurrent), host(net.biases)]
    calls = [routine for routine, _, _ in fake_cupy.nvmath.calls]
    assert calls.count(name) >= 2 * 2 * (tau - 1)
    want = reference_rnn.backprop(*params, x, y, net.activation, net.cost, net.output_activation, "every")
    for got_list, want_list in zip(got, want):
        for g, w in zip(host(got_list), want_list):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("B", [1, 3])
def test_without_nvmath_the_recurrence_runs_on_cupy_matmul(standin_without_nvmath, B):
    from leapfrog_gpu.backends.cuda import CupyBackend

    x, y = batch(SIZES, B, 0, tau=4, output="last")
    with CupyBackend() as cupy_backend, RNN(SIZES, dtype="float64", backend=cupy_backend) as net:
        assert cupy_backend.ops.blas is None
        params = [host(net.weights), host(net.recurrent), host(net.biases)]
        want = reference_rnn.backprop(*params, x, y, net.activation, net.cost, net.output_activation, "last")
        for got_list, want_list in zip(rnn_lists(net.backprop(x, y, BPTT())), want):
            for g, w in zip(host(got_list), want_list):
                np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("quasi", [False, True])
def test_time_newton_on_the_standin_matches_the_reference(backend, quasi):
    from leapfrog_gpu import TimeNewton

    x, _ = batch(SIZES, 2, 0, tau=9, output="every")
    with RNN(SIZES, output="every", dtype="float64", backend=backend, recurrent_norm=2.0) as net:
        params = [host(net.weights), host(net.recurrent), host(net.biases)]
        solver = TimeNewton(quasi=quasi)
        got = net.feedforward(x, solver=solver).get()
    want = reference_rnn.feedforward(*params, x, net.activation, net.output_activation, "every")
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert solver.stats["converged"] and solver.stats["rounds"] == TimeNewton.rounds_formula(
        solver.stats["iterations_per_layer"], 9)
    assert solver.stats["scan"] == "doubling"  # "auto" on a GPU: the fewest rounds


def gated_lists(net):
    """A gated network's parameters as ``gated_reference`` takes them: w, u, b by layer and the GRU's b_hn."""
    params, L, hidden = net.parameters(), net.L, net.hidden
    return ([host([params[l]["w"]])[0] for l in range(2, L + 1)], [host([params[l]["u"]])[0] for l in hidden],
            [host([params[l]["b"]])[0] for l in range(2, L + 1)],
            [host([params[l]["b_hn"]])[0] for l in hidden] if net.cell == "gru" else None)


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-10), ("float32", 2e-4)])
@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_gated_cells_run_their_steps_on_the_gates_kernels(standin, backend, cell, B, dtype, rtol):
    """The GRU's and the LSTM's steps, forward and backward, are kernels/gates.cu's on the CuPy backend: the
    output and the gradients of BPTT() and Leapfrog(2) against the float64 reference (within float32's
    rounding in float32)."""
    sizes = [3, 5, 4, 2]
    x, y = batch(sizes, B, 0, tau=5, output="every")
    x, y = x.astype(dtype), y.astype(dtype)
    with RNN(sizes, cell=cell, output="every", dtype=dtype, backend=backend, seed=5) as net:
        params = gated_lists(net)
        want_out = gated_reference.feedforward(cell, *params, x, output="every")
        want = gated_reference.backprop(cell, *params, x, y, output="every")
        got_out = net.feedforward(x).get()
        np.testing.assert_allclose(got_out, want_out, rtol=rtol, atol=rtol * np.max(np.abs(want_out)))
        for schedule in (BPTT(), Leapfrog(2)):
            got = net.gradients(x, y, schedule)
            assert set(got) == set(want)
            for l, named in want.items():
                assert set(got[l]) == set(named), l
                for name, value in named.items():
                    np.testing.assert_allclose(got[l][name].get(), value, rtol=rtol,
                                               atol=rtol * max(np.max(np.abs(value)), 1e-300),
                                               err_msg=f"{schedule!r} {l} {name}")
    suffix = "f64" if dtype == "float64" else "f32"
    kernels = {detail for kind, _, detail in standin.trace() if kind == "launch"}
    assert {f"{cell}_{part}_{suffix}" for part in ("forward", "backward")} <= kernels


def trained_gated(backend, cell, schedule, steps=3):
    with RNN(SIZES, cell=cell, output="every", seed=3, backend=backend) as net:
        for step in range(steps):
            x, y = batch(SIZES, 2, step, np.float32, tau=5, output="every")
            net.sgd_step(x, y, 0.3, schedule)
        return [host([value])[0] for named in net.parameters().values() for value in named.values()]


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_gated_training_steps_agree_bitwise_across_bptt_and_leapfrog(standin, backend, cell):
    want = trained_gated(backend, cell, BPTT())
    for schedule in (Leapfrog(2), Leapfrog(3, fused=True), BPTT(fused=True)):
        got = trained_gated(backend, cell, schedule)
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want)), repr(schedule)
    kernels = {detail for kind, _, detail in standin.trace() if kind == "launch"}
    assert {f"{cell}_forward_f32", f"{cell}_backward_f32"} <= kernels


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_gated_schedules_and_solvers_run_on_the_standin(standin, backend, cell):
    """Every schedule and solver a gated cell takes, on the CuPy backend's code: the gradients of BPTT(),
    Leapfrog(2), Wavefront() and TimeScan() (both scans), and the forward of TimeNewton() (Newton and quasi) with
    the gradients on it, against the float64 reference."""
    from leapfrog_gpu import TimeNewton

    sizes, tau = [3, 5, 4, 2], 6
    x, y = batch(sizes, 2, 0, tau=tau, output="every")
    with RNN(sizes, cell=cell, output="every", dtype="float64", backend=backend, seed=5) as net:
        params = gated_lists(net)
        want_out = gated_reference.feedforward(cell, *params, x, output="every")
        want = gated_reference.backprop(cell, *params, x, y, output="every")
        runs = [(schedule, None) for schedule in (BPTT(), Leapfrog(2), Wavefront(), TimeScan(k=1),
                                                  TimeScan(k=1, scan="reduction"))]
        runs += [(BPTT(), TimeNewton(quasi=quasi, scan=scan)) for quasi in (False, True)
                 for scan in ("doubling", "reduction")]
        for schedule, solver in runs:
            what = f"{schedule!r} {solver!r}"
            if solver is not None:
                got_out = net.feedforward(x, solver=solver).get()
                np.testing.assert_allclose(got_out, want_out, rtol=1e-10, atol=1e-12, err_msg=what)
                assert solver.stats["converged"], what
            got = net.gradients(x, y, schedule, solver=solver)
            for l, named in want.items():
                for name, value in named.items():
                    np.testing.assert_allclose(got[l][name].get(), value, rtol=1e-10, atol=1e-12,
                                               err_msg=f"{what} {l} {name}")
