"""The gated cells (GRU, LSTM) against PyTorch, its parameters copied by torch's documented layout (not through
``to_torch``), against the float64 reference and central finite differences; their schedules, PyTorch in and
out, and their refusals."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the cells are checked against torch.nn.GRU and torch.nn.LSTM",
                            exc_type=ImportError)

from helpers import batch, central
from networks import Mirror
from races import Recorder, buffer_names, host_backend, races, report
from leapfrog_gpu import RNN, Leapfrog, Sequential
from leapfrog_gpu.rnn import gated_reference
from leapfrog_gpu.rnn.newton import TimeNewton
from leapfrog_gpu.rnn.scans import NaumovRNN, TimeScan
from leapfrog_gpu.rnn.schedules import BPTT, Wavefront

CELLS = ("gru", "lstm")
NAMED = {"gru": "a GRU", "lstm": "an LSTM"}
"""Each cell with its article, as a message names it."""
MODULES = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM}
OUTPUTS = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "identity": lambda z: z, "relu": torch.relu}
"""torch's function for each output activation the tests give a gated RNN."""


def torch_twin(net):
    """torch.nn.GRU / LSTM layers and the output Linear, in float64, holding ``net``'s parameters by torch's
    layout: weight_ih = w, weight_hh = u, bias_ih = b, bias_hh = zeros but for the GRU's n rows, b_hn."""
    params, layers = net.parameters(), []
    for l in net.hidden:
        N = net.n[l]
        layer = MODULES[net.cell](net.n[l - 1], N, dtype=torch.float64)
        bias_hh = np.zeros(layer.bias_hh_l0.shape)
        if net.cell == "gru":
            bias_hh[2 * N:] = params[l]["b_hn"]
        with torch.no_grad():
            for name, value in (("weight_ih_l0", params[l]["w"]), ("weight_hh_l0", params[l]["u"]),
                                ("bias_ih_l0", params[l]["b"]), ("bias_hh_l0", bias_hh)):
                getattr(layer, name).copy_(torch.from_numpy(np.array(value)))
        layers.append(layer)
    linear = torch.nn.Linear(net.n[net.L - 1], net.n[net.L], dtype=torch.float64)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(params[net.L]["w"]))
        linear.bias.copy_(torch.from_numpy(params[net.L]["b"]))
    return layers, linear


def torch_pass(net, x, y):
    """PyTorch's output (as ``feedforward`` gives it) and gradients of the quadratic cost (as ``gradients``
    gives them) for ``net``'s parameters and output activation."""
    layers, linear = torch_twin(net)
    h = torch.from_numpy(x).permute(0, 2, 1)
    for layer in layers:
        h = layer(h)[0]
    if net.output == "last":
        h = h[-1]
    out = OUTPUTS[net.output_activation](linear(h))
    target = torch.from_numpy(y).permute(0, 2, 1) if net.output == "every" else torch.from_numpy(y).T
    (0.5 * ((out - target) ** 2).sum()).backward()
    grads = {}
    for l, layer in zip(net.hidden, layers):
        N, bias_hh = net.n[l], layer.bias_hh_l0.grad.numpy()
        grads[l] = {"w": layer.weight_ih_l0.grad.numpy(), "u": layer.weight_hh_l0.grad.numpy(),
                    "b": layer.bias_ih_l0.grad.numpy().copy()}
        if net.cell == "gru":  # bias_ih and bias_hh act alike in r and z: b's gradient is either's
            grads[l]["b_hn"] = bias_hh[2 * N:]
    grads[net.L] = {"w": linear.weight.grad.numpy(), "b": linear.bias.grad.numpy()}
    output = out.detach().numpy()
    return (output.T if net.output == "last" else output.transpose(0, 2, 1)), grads


def relative(got, want):
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300))


def assert_close(got, want, tol):
    assert set(got) == set(want)
    for l in want:
        assert set(got[l]) == set(want[l]), l
        for name in want[l]:
            assert relative(got[l][name], want[l][name]) < tol, (l, name, relative(got[l][name], want[l][name]))


def gated(cell, sizes, output="every", **options):
    return RNN(sizes, cell=cell, output=output, dtype="float64", backend="numpy", seed=5, **options)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("tau", [1, 7, 40])
@pytest.mark.parametrize("output", ["every", "last"])
def test_forward_and_gradients_match_pytorch(cell, tau, output):
    rng = np.random.default_rng(tau)
    sizes = [int(n) for n in rng.integers(1, 7, size=int(rng.integers(3, 6)))]
    x, y = batch(sizes, int(rng.integers(1, 5)), seed=tau, tau=tau, output=output)
    with gated(cell, sizes, output) as net:
        want_out, want = torch_pass(net, x, y)
        assert relative(net.feedforward(x), want_out) < 1e-12
        bptt = net.gradients(x, y, BPTT())
        assert_close(bptt, want, 1e-10)
        for schedule in (Sequential(), Leapfrog(1), Leapfrog(2), Leapfrog(3)):  # the BPTT chain: bitwise
            got = net.gradients(x, y, schedule)
            assert all(np.array_equal(got[l][k], bptt[l][k]) for l in bptt for k in bptt[l]), schedule
        for schedule in (TimeScan(scan="doubling"), TimeScan(k=0, scan="reduction"), Wavefront(k=0), Wavefront()):
            assert_close(net.gradients(x, y, schedule), want, 1e-10)
            assert net.stats["rounds"] == type(schedule).rounds_formula(len(sizes) - 2, tau, *(
                [schedule.scan] if isinstance(schedule, TimeScan) else []))


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("width", [1, 2])
def test_float32_layers_of_one_or_two_units_match_pytorch(cell, width):
    """In float32 each gate of a layer of one unit is a row of its (G, B) arrays whose elements lie 16 (LSTM) or 12
    (GRU) bytes apart, where NumPy 2.4's float32 negative, given a strided out, read them as if contiguous: the LSTM's
    o gate came out of another gate's pre-activations."""
    sizes = [2, width, 3]
    x, y = batch(sizes, 5, seed=3, tau=4)
    with RNN(sizes, cell=cell, output="every", dtype="float32", backend="numpy", seed=5) as net:
        want_out, want = torch_pass(net, x, y)
        x32, y32 = x.astype(np.float32), y.astype(np.float32)
        for solver in (None, TimeNewton(), TimeNewton(quasi=True)):
            assert relative(net.feedforward(x32, solver=solver), want_out) < 1e-5, solver
        assert_close(net.gradients(x32, y32, BPTT()), want, 1e-4)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("output_activation", list(OUTPUTS))
def test_the_reference_matches_pytorch(cell, output_activation):
    """The reference and ``gradients`` against torch's autograd for each output activation: the output delta
    takes that activation's derivative, not tanh's (which a tanh output alone cannot tell apart)."""
    sizes, tau = [3, 4, 5, 2], 6
    x, y = batch(sizes, 3, tau=tau)
    with gated(cell, sizes, output_activation=output_activation) as net:
        want_out, want = torch_pass(net, x, y)
        args = reference_args(net)
        assert_close(net.gradients(x, y), want, 1e-10)
    assert relative(gated_reference.feedforward(cell, *args, x, output_activation, "every"), want_out) < 1e-12
    assert_close(gated_reference.backprop(cell, *args, x, y, output_activation, "every"), want, 1e-10)


def reference_args(net):
    params = net.parameters()
    hidden = list(net.hidden)
    return (net.weights, net.recurrent, net.biases,
            [params[l]["b_hn"] for l in hidden] if net.cell == "gru" else None)


@pytest.mark.parametrize("cell", CELLS)
def test_gradients_match_central_differences(cell):
    sizes, tau, h = [2, 3, 2], 4, 1e-6
    x, y = batch(sizes, 2, tau=tau)
    with gated(cell, sizes) as net:
        grads, params = net.gradients(x, y), net.parameters()
    for l, named in params.items():
        for name, value in named.items():
            numeric = central(lambda: gated_reference.cost(cell, *lists(params, sizes), x, y, output="every"), value, h)
            assert np.max(np.abs(grads[l][name] - numeric)) < 1e-7 * max(1, np.max(np.abs(numeric))), (l, name)


def lists(params, sizes):
    L, hidden = len(sizes), range(2, len(sizes))
    return ([params[l]["w"] for l in range(2, L + 1)], [params[l]["u"] for l in hidden],
            [params[l]["b"] for l in range(2, L + 1)], [params[l]["b_hn"] for l in hidden] if "b_hn" in params[2]
            else None)


@pytest.mark.parametrize("cell", CELLS)
def test_time_scan_checks_the_memory_of_the_state_jacobians(cell):
    """An LSTM's (h, c) Jacobians take (2N)^2 per step and sample: a limit that a GRU's N^2 fits refuses it."""
    sizes, tau, B = [3, 8, 2], 20, 4
    x, y = batch(sizes, B, tau=tau)
    limit = 3 * tau * B * 8 * 8 * 8  # bytes: the GRU's matrices (2 tau B N^2) and vectors, not the LSTM's 4x
    with gated(cell, sizes) as net:
        if cell == "gru":
            net.gradients(x, y, TimeScan(memory_limit=limit))
        else:
            with pytest.raises(ValueError, match=r"TimeScan"):
                net.gradients(x, y, TimeScan(memory_limit=limit))


@pytest.mark.parametrize("cell", CELLS)
def test_parameters_are_laid_out_as_torch_lays_them(cell):
    G = {"gru": 3, "lstm": 4}[cell]
    with gated(cell, [3, 5, 4, 2]) as net:
        params = net.parameters()
        assert [a.shape for a in params[2].values()] == [(G * 5, 3), (G * 5, 5), (G * 5,)] + [(5,)] * (cell == "gru")
        assert [a.shape for a in params[4].values()] == [(2, 4), (2,)]
        assert net.structure()["cell"] == cell and f"cell={cell!r}" in repr(net)


@pytest.mark.parametrize("cell", CELLS)
def test_sgd_step_updates_every_parameter_by_its_gradient(cell):
    sizes, eta = [3, 4, 3, 2], 0.3
    x, y = batch(sizes, 5, tau=6)
    with gated(cell, sizes, check_finite=True) as net:
        before, grads = net.parameters(), net.gradients(x, y)
        net.sgd_step(x, y, eta, Leapfrog(2))
        after = net.parameters()
        net.set_parameters(before)
        net.sgd_step(x, y, eta, graph=True)
        net.set_parameters(before)
        net.sgd_step(x, y, eta, graph=True)  # the captured step, launched again
        graphed = net.parameters()
    for l in before:
        for name in before[l]:
            want = before[l][name] - eta / 5 * grads[l][name]
            assert np.allclose(after[l][name], want, rtol=1e-13, atol=1e-15), (l, name)
            assert np.array_equal(graphed[l][name], after[l][name]), (l, name)


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("cell", CELLS)
def test_check_finite_refuses_an_update_with_a_nan_gradient(cell):
    sizes = [3, 4, 2]
    x, y = batch(sizes, 2, tau=3)
    with gated(cell, sizes, check_finite=True) as net:
        net.set_parameters({3: {"w": np.full((2, 4), 1e-3), "b": np.zeros(2)}})
        before = net.parameters()
        y[...] = -np.finfo(np.float64).max  # finite targets whose deltas sum to inf in nabla_b
        net.sgd_step(x, y, 0.1)
        with pytest.raises(FloatingPointError, match=r"holds NaN or Inf; update refused"):
            net.synchronize()
        after = net.parameters()
    assert all(np.array_equal(after[l][k], before[l][k]) for l in before for k in before[l])


@pytest.mark.parametrize("cell", CELLS)
def test_data_parallel_gradients_sum_each_ranks_share(cell):
    sizes = [3, 4, 2]
    x, y = batch(sizes, 5, tau=4)
    with gated(cell, sizes, comm=Mirror()) as net:
        got = net.gradients(x, y, Leapfrog(2))
    share = Mirror().share(5)
    with gated(cell, sizes) as net:
        alone = net.gradients(x[..., share], y[..., share])
    assert_close(got, {l: {k: 2 * v for k, v in named.items()} for l, named in alone.items()}, 1e-14)


@pytest.mark.parametrize("cell", CELLS)
def test_to_torch_and_back_is_bitwise(cell):
    sizes, tau = [3, 5, 4, 2], 5
    x, _ = batch(sizes, 3, tau=tau)
    with gated(cell, sizes, output="last") as net:
        module = net.to_torch()
        assert [type(m).__name__ for m in (module.layer2, module.layer3)] == [MODULES[cell].__name__] * 2
        out = module(torch.from_numpy(x).permute(0, 2, 1)).detach().numpy().T
        assert relative(out, net.feedforward(x)) < 1e-12
        with RNN.from_torch(module, output="last", backend="numpy") as back:
            assert back.cell == cell
            mine, theirs = net.parameters(), back.parameters()
            assert all(np.array_equal(mine[l][k], theirs[l][k]) for l in mine for k in mine[l])


def test_from_torch_splits_a_grus_hidden_bias():
    gru = torch.nn.GRU(3, 4, num_layers=2, dtype=torch.float64)
    module = torch.nn.Sequential(gru, torch.nn.Linear(4, 2, dtype=torch.float64))
    with RNN.from_torch(module, backend="numpy") as net:
        params = net.parameters()
        for k, l in enumerate(net.hidden):
            ih, hh = (getattr(gru, f"bias_{kind}_l{k}").detach().numpy() for kind in ("ih", "hh"))
            assert np.array_equal(params[l]["b"], np.concatenate([ih[:8] + hh[:8], ih[8:]]))
            assert np.array_equal(params[l]["b_hn"], hh[8:])
        x, _ = batch([3, 2], 2, tau=3)
        want = module[1](gru(torch.from_numpy(x).permute(0, 2, 1))[0][-1]).detach().numpy().T
        assert relative(net.feedforward(x), want) < 1e-12


def test_from_torch_reads_a_bias_less_gru_with_zero_biases():
    """A GRU without biases has no bias_hh to split: its b and b_hn are zeros, and the network computes what the
    module computes (a b_hn of anything else would shift every candidate n)."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(3, 4, bias=False, dtype=torch.float64)
    module = torch.nn.Sequential(gru, torch.nn.Linear(4, 2, dtype=torch.float64))
    with RNN.from_torch(module, backend="numpy") as net:
        params = net.parameters()
        assert np.array_equal(params[2]["b"], np.zeros(12))
        assert np.array_equal(params[2]["b_hn"], np.zeros(4))
        x, _ = batch([3, 2], 2, tau=3)
        want = module[1](gru(torch.from_numpy(x).permute(0, 2, 1))[0][-1]).detach().numpy().T
        assert relative(net.feedforward(x), want) < 1e-12


@pytest.mark.parametrize("module, message", [
    (lambda: torch.nn.LSTM(3, 4, proj_size=2), r"projects its hidden state \(proj_size=2\), which an RNN's LSTM "
                                               r"does not; read a module with proj_size=0"),
    (lambda: torch.nn.GRU(3, 4, bidirectional=True), r"is bidirectional"),
    (lambda: torch.nn.LSTM(3, 4, num_layers=2, dropout=0.5), r"drops out between its layers"),
])
def test_from_torch_refuses_what_a_gated_rnn_cannot_compute(module, message):
    with pytest.raises(ValueError, match=message):
        RNN.from_torch(torch.nn.Sequential(module(), torch.nn.Linear(4, 2)), backend="numpy")


def test_from_torch_refuses_mixed_cells():
    module = torch.nn.Sequential(torch.nn.GRU(3, 4), torch.nn.LSTM(4, 4), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"the recurrent layers must share one cell; .* is 'gru', .* 'lstm'"):
        RNN.from_torch(module, backend="numpy")


@pytest.mark.parametrize("cell", CELLS)
def test_a_gated_cell_refuses_a_foreign_activation(cell):
    with pytest.raises(ValueError, match=rf"^{NAMED[cell]} cell has its own activation, tanh .* got "
                                         r"activation='relu': pass activation='tanh'"):
        RNN([3, 4, 2], "relu", cell=cell, backend="numpy")


def test_set_parameters_refuses_a_missing_or_misshaped_b_hn():
    with gated("gru", [3, 4, 2]) as net:
        before = net.parameters()
        with pytest.raises(ValueError, match=r"a GRU needs b_hn too: set_parameters\(weights, recurrent, biases, "
                                             r"b_hn\)"):
            net.set_parameters([a * 2 for a in net.weights], net.recurrent, net.biases)
        with pytest.raises(TypeError, match=r"^recurrent must be a list of 1 arrays \(layers 2..2\); got NoneType"):
            net.set_parameters([a * 2 for a in net.weights])  # the first missing, as an Elman RNN says it
        with pytest.raises(ValueError, match=r"b_hn\[0\] \(b_hn\^2\) must have shape \(4,\) or \(4, 1\); got \(12,\)"):
            net.set_parameters([a * 2 for a in net.weights], net.recurrent, net.biases, [np.zeros(12)])
        with pytest.raises(ValueError, match=r"b_hn\[0\] \(b_hn\^2\) must have shape \(4,\) or \(4, 1\); got \(3,\)"):
            net.set_parameters({2: {"w": before[2]["w"] * 2, "b_hn": np.zeros(3)}})
        after = net.parameters()
    assert all(np.array_equal(after[l][k], before[l][k]) for l in before for k in before[l])
    with gated("lstm", [3, 4, 2]) as net, pytest.raises(ValueError, match=r"b_hn is the GRU's alone; this RNN's "
                                                                          r"cells are 'lstm': pass no b_hn"):
        net.set_parameters(net.weights, net.recurrent, net.biases, [np.zeros(4)])


@pytest.mark.parametrize("cell", CELLS)
def test_naumov_refuses_a_gated_cell_by_name(cell):
    sizes = [3, 4, 2]
    x, y = batch(sizes, 2, tau=3)
    with gated(cell, sizes) as net:
        with pytest.raises(ValueError, match=rf"NaumovRNN builds the Elman cell's layer operators .* none for "
                                             rf"{NAMED[cell]} cell's state Jacobians; run BPTT\(\)"):
            net.gradients(x, y, NaumovRNN())


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("tau", [1, 7, 40])
@pytest.mark.parametrize("quasi", [False, True])
@pytest.mark.parametrize("scan", ["doubling", "reduction"])
def test_time_newton_solves_the_forward_of_a_gated_cell(cell, tau, quasi, scan):
    """Newton with the whole state Jacobian, or quasi-Newton with its diagonal: the forward within 1e-10 of the
    sequential one, the gradients on it within 1e-10 of PyTorch's, the rounds as counted in closed form."""
    sizes = [3, 5, 4, 2]
    x, y = batch(sizes, 3, seed=tau, tau=tau)
    solver = TimeNewton(quasi=quasi, scan=scan)
    with gated(cell, sizes) as net:
        want_out, want = torch_pass(net, x, y)
        solved = net.feedforward(x, solver=solver)
        assert relative(solved, net.feedforward(x)) < 1e-10 and relative(solved, want_out) < 1e-10
        assert solver.stats["converged"]
        assert solver.stats["rounds"] == TimeNewton.rounds_formula(solver.stats["iterations_per_layer"], tau, scan)
        assert_close(net.gradients(x, y, BPTT(), solver=solver), want, 1e-10)
        warm = TimeNewton(quasi=quasi, warm_start=True)  # from the states just solved: converged already
        assert_close(net.gradients(x, y, TimeScan(), solver=warm), want, 1e-10)
        assert warm.stats["iterations"] == 0


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("schedule", [Leapfrog(1), Leapfrog(2, fused=True), Leapfrog(3), TimeScan(k=2, fused=True),
                                      Wavefront(k=2, fused=True)], ids=repr)
def test_no_two_launches_race(cell, schedule):
    """The race detector (``tests/harness/races.py``) over two SGD steps of a gated RNN on host streams."""
    with host_backend() as made:
        with Recorder(made) as recorder:
            net = RNN([3, 6, 5, 2], cell=cell, output="every", seed=1, backend=made)
            for step in range(2):
                net.sgd_step(*batch([3, 2], 4, seed=step, dtype=np.float32, tau=4), 0.5, schedule)
            net.synchronize()
        names = buffer_names(net)
        found, unseen = races(recorder, names), recorder.unseen(names) + recorder.strays()
    assert not found, f"{len(found)} races:\n{report(found)}"
    assert not unseen, "\n".join(unseen)


@pytest.mark.filterwarnings("ignore:divide by zero encountered in reciprocal:RuntimeWarning")  # the stand-in probes
@pytest.mark.parametrize("cell", CELLS)
def test_the_bptt_chain_runs_on_the_cupy_backend(standin, cell):
    """The CuPy backend's code (through the stand-in, under each order of its queues): the forward and the gradients
    of BPTT() and Leapfrog(2) equal the host's."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    sizes = [3, 5, 4, 2]
    x, y = batch(sizes, 3, tau=5)
    with gated(cell, sizes) as net:
        want_out, want = net.feedforward(x), net.gradients(x, y)
    with CupyBackend() as device, RNN(sizes, cell=cell, output="every", dtype="float64", backend=device,
                                      seed=5) as net:
        assert relative(net.feedforward(x).get(), want_out) < 1e-12
        for schedule in (BPTT(), Leapfrog(2)):
            got = net.gradients(x, y, schedule)
            assert_close({l: {k: v.get() for k, v in named.items()} for l, named in got.items()}, want, 1e-10)
