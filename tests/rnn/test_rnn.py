"""The recurrent network against its float64 reference, central finite differences and PyTorch autograd;
its initialisation, its validation and the schedules it refuses."""

import math

import numpy as np
import pytest

from helpers import assert_bitwise_equal, batch, central, host, install_standin
from leapfrog_gpu import BPTT, MLP, RNN, Leapfrog, NaumovJacobi, NaumovRNN, NaumovScan, Sequential, TimeScan, Wavefront
from leapfrog_gpu.rnn import reference as reference_rnn
from leapfrog_gpu.core.torch_io import INSTALL

from helpers import rnn_lists

FUNCTIONS = [  # (activation, cost, output_activation): every activation and cost
    ("tanh", "quadratic", None), ("sigmoid", "quadratic", None), ("relu", "quadratic", "identity"),
    ("tanh", "cross_entropy", None), ("sigmoid", "quadratic", "identity"),
]

SCANS = (TimeScan(scan="doubling"), TimeScan(scan="reduction"))
"""TimeScan by each of its algorithms (``"auto"`` picks one by the backend)."""


def odd_widths(L, seed):
    """L odd widths in 1..15."""
    return [int(2 * n + 1) for n in np.random.default_rng(seed).integers(0, 8, size=L)]


def reference(net, x, y):
    return reference_rnn.backprop(net.weights, net.recurrent, net.biases, x, y, net.activation, net.cost,
                                  net.output_activation, net.output)


def worst(got, want):
    """The largest relative error per array, max |got - want| / max |want|, over the three lists."""
    errors = [0.0]
    for got_list, want_list in zip(got, want):
        assert len(got_list) == len(want_list)
        for g, w in zip(got_list, want_list):
            assert g.shape == w.shape
            scale = max(float(np.max(np.abs(w))), 1e-300)
            errors.append(float(np.max(np.abs(np.asarray(g, np.float64) - w))) / scale)
    return max(errors)


def schedules(tau, sizes):
    """Every schedule; NaumovRNN where its (tau·N)^2 blocks stay small enough to be quick."""
    found = [BPTT(), Sequential(), Leapfrog(2), Leapfrog(3, fused=True), Wavefront(), TimeScan(k=1)]
    if tau * max(sizes[1:-1]) <= 64:
        found.append(NaumovRNN(k=2))
    return found


@pytest.mark.parametrize("output", ["last", "every"])
@pytest.mark.parametrize("B", [1, 5])
@pytest.mark.parametrize("tau", [1, 2, 7, 33])
@pytest.mark.parametrize("L", [3, 4, 5, 6])
def test_float64_gradients_of_every_schedule_match_the_reference(L, tau, B, output):
    sizes = odd_widths(L, seed=10 * L + tau)
    for i, (activation, cost, output_activation) in enumerate(FUNCTIONS):
        with RNN(sizes, activation, cost, output, dtype="float64", seed=i, backend="numpy",
                 output_activation=output_activation) as net:
            x, y = batch(net.sizes, B, i, tau=tau, output=net.output)
            want = reference(net, x, y)
            for schedule in schedules(tau, sizes):
                error = worst(rnn_lists(net.backprop(x, y, schedule)), want)
                assert error <= 1e-10, f"{schedule!r}, {activation}/{cost}, sizes {sizes}: relative error {error:.2e}"


@pytest.mark.parametrize("output", ["last", "every"])
def test_naumov_rnn_over_33_steps_on_narrow_layers_matches_the_reference(output):
    for i, (activation, cost, output_activation) in enumerate(FUNCTIONS):
        with RNN([3, 1, 3, 1, 3], activation, cost, output, dtype="float64", seed=i, backend="numpy",
                 output_activation=output_activation) as net:
            for B in (1, 5):
                x, y = batch(net.sizes, B, i, tau=33, output=net.output)
                assert worst(rnn_lists(net.backprop(x, y, NaumovRNN())), reference(net, x, y)) <= 1e-10


def float32_tolerance(tau):
    """float32 against the float64 reference. Each step of the recursion over t rounds its products and
    sums (unit roundoff 6e-8, sums of up to n terms), and the errors of delta^{l,t+1} carry into delta^{l,t}:
    a bound linear in tau (machine precision times length, as ParaRNN reports), although the contraction
    of u (spectral norm 0.9) and sigma' <= 1 damps it. Measured here: worst 3.5e-7 at tau = 1, 5.9e-7 at
    tau = 33, 6.1e-7 at tau = 128 (every schedule, activation and cost, widths [5, 9, 7, 3], B = 5): a bound
    for these networks and seeds, not in general, where a gradient whose terms cancel loses more
    (docs/rnn.md)."""
    return 1e-6 * (1 + tau / 8)


@pytest.mark.parametrize("tau", [1, 2, 7, 33])
@pytest.mark.parametrize("output", ["last", "every"])
def test_float32_gradients_match_the_reference_within_a_tolerance_growing_with_tau(tau, output):
    sizes = [5, 9, 7, 3]
    for i, (activation, cost, output_activation) in enumerate(FUNCTIONS):
        with RNN(sizes, activation, cost, output, dtype="float32", seed=i, backend="numpy",
                 output_activation=output_activation) as net:
            x, y = batch(net.sizes, 5, i, np.float32, tau=tau, output=net.output)
            want = reference(net, x, y)
            for schedule in (BPTT(), Leapfrog(2), Wavefront(), *SCANS) + ((NaumovRNN(),) if tau <= 7 else ()):
                error = worst(rnn_lists(net.backprop(x, y, schedule)), want)
                assert error <= float32_tolerance(tau), f"{schedule!r}, {activation}/{cost}: {error:.2e}"


@pytest.mark.parametrize("output", ["last", "every"])
@pytest.mark.parametrize("activation,cost,output_activation", FUNCTIONS)
def test_gradients_match_central_finite_differences(activation, cost, output_activation, output):
    sizes = [2, 3, 3, 2]
    with RNN(sizes, activation, cost, output, dtype="float64", seed=4, backend="numpy",
             output_activation=output_activation) as net:
        x, y = batch(net.sizes, 2, 1, tau=4, output=net.output)
        params = [net.weights, net.recurrent, net.biases]
        nabla_b, nabla_w, nabla_u = rnn_lists(net.backprop(x, y, Leapfrog(2)))
    def cost_at():
        return reference_rnn.cost(*params, x, y, activation, cost, net.output_activation, output)

    for group, grads in zip(range(3), (nabla_w, nabla_u, nabla_b)):
        for array, grad in zip(params[group], grads):
            assert central(cost_at, array) == pytest.approx(grad, rel=1e-5, abs=1e-7)


def torch_gradients(torch, net, x, y):
    """The same network written as a hand-made cell in PyTorch: autograd's (nabla_b, nabla_w, nabla_u)."""
    def tensor(array):
        return torch.tensor(np.asarray(array, np.float64), requires_grad=True)

    w, u, b = [tensor(a) for a in net.weights], [tensor(a) for a in net.recurrent], [tensor(a) for a in net.biases]
    act = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu, "identity": lambda z: z}
    xt = torch.tensor(x, dtype=torch.float64)
    tau, B, L = x.shape[0], x.shape[2], net.L
    state = [torch.zeros(n, B, dtype=torch.float64) for n in net.sizes[1:-1]]
    total = torch.zeros((), dtype=torch.float64)
    for t in range(tau):
        below = xt[t]
        for i in range(L - 2):
            state[i] = act[net.activation](w[i] @ below + u[i] @ state[i] + b[i][:, None])
            below = state[i]
        if net.output == "every" or t == tau - 1:
            a = act[net.output_activation](w[-1] @ below + b[-1][:, None])
            target = torch.tensor(y[t] if net.output == "every" else y, dtype=torch.float64)
            if net.cost == "quadratic":
                total = total + 0.5 * ((a - target) ** 2).sum()
            else:
                total = total + torch.nn.functional.binary_cross_entropy(a, target, reduction="sum")
    total.backward()
    return [t.grad.numpy() for t in b], [t.grad.numpy() for t in w], [t.grad.numpy() for t in u]


@pytest.mark.parametrize("output", ["last", "every"])
@pytest.mark.parametrize("activation,cost,output_activation", FUNCTIONS)
def test_gradients_match_pytorch_autograd(activation, cost, output_activation, output):
    torch = pytest.importorskip("torch", reason=f"the PyTorch comparison needs torch ({INSTALL})")
    sizes = [5, 9, 7, 3]
    with RNN(sizes, activation, cost, output, dtype="float64", seed=2, backend="numpy",
             output_activation=output_activation) as net:
        for tau in (1, 7, 33):
            x, y = batch(net.sizes, 5, tau, tau=tau, output=net.output)
            want = torch_gradients(torch, net, x, y)
            for schedule in (BPTT(), Leapfrog(2), Wavefront(), *SCANS):
                assert worst(rnn_lists(net.backprop(x, y, schedule)), want) <= 1e-10


def test_gradients_match_pytorch_nn_rnn():
    """Two tanh layers of one width are torch.nn.RNN(num_layers=2) with bias_hh = 0; the output layer is ours."""
    torch = pytest.importorskip("torch", reason=f"the PyTorch comparison needs torch ({INSTALL})")
    sizes, tau, B = [4, 6, 6, 3], 9, 3
    with RNN(sizes, "tanh", "quadratic", "every", dtype="float64", seed=5, backend="numpy") as net:
        x, y = batch(net.sizes, B, 0, tau=tau, output=net.output)
        rnn = torch.nn.RNN(4, 6, num_layers=2, nonlinearity="tanh", dtype=torch.float64)
        weights, recurrent, biases = net.weights, net.recurrent, net.biases
        with torch.no_grad():
            for i in range(2):
                getattr(rnn, f"weight_ih_l{i}").copy_(torch.tensor(weights[i]))
                getattr(rnn, f"weight_hh_l{i}").copy_(torch.tensor(recurrent[i]))
                getattr(rnn, f"bias_ih_l{i}").copy_(torch.tensor(biases[i]))
                getattr(rnn, f"bias_hh_l{i}").zero_()
        w_out = torch.tensor(weights[2], requires_grad=True)
        b_out = torch.tensor(biases[2], requires_grad=True)
        states, _ = rnn(torch.tensor(x.transpose(0, 2, 1)))  # (tau, B, n) as torch wants
        a = torch.tanh(states @ w_out.T + b_out)
        (0.5 * ((a - torch.tensor(y.transpose(0, 2, 1))) ** 2).sum()).backward()
        nabla_b, nabla_w, nabla_u = rnn_lists(net.backprop(x, y, Leapfrog(2)))
    got = [nabla_w[0], nabla_u[0], nabla_b[0], nabla_w[1], nabla_u[1], nabla_b[1], nabla_w[2], nabla_b[2]]
    want = [rnn.weight_ih_l0.grad, rnn.weight_hh_l0.grad, rnn.bias_ih_l0.grad, rnn.weight_ih_l1.grad,
            rnn.weight_hh_l1.grad, rnn.bias_ih_l1.grad, w_out.grad, b_out.grad]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-10, atol=1e-12)


def test_feedforward_matches_the_reference():
    for output in ("last", "every"):
        with RNN([3, 5, 7, 2], "sigmoid", output=output, dtype="float64", backend="numpy") as net:
            x, _ = batch(net.sizes, 4, 0, tau=6, output=net.output)
            want = reference_rnn.feedforward(net.weights, net.recurrent, net.biases, x, "sigmoid",
                                             net.output_activation, output)
            got = net.feedforward(x)
            assert got.shape == ((2, 4) if output == "last" else (6, 2, 4))
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(net.feedforward(x[:, :, 0]), want[..., :1], rtol=1e-12, atol=1e-15)


def test_initialisation_draws_w_and_b_as_the_mlp_and_u_with_spectral_norm_below_one():
    sizes = [4, 9, 6, 3]
    with RNN(sizes, dtype="float64", seed=7, backend="numpy") as net, \
            MLP(sizes, dtype="float64", seed=7, backend="numpy") as mlp:
        assert all(np.array_equal(a, b) for a, b in zip(net.weights + net.biases, mlp.weights + mlp.biases))
        for u in net.recurrent:
            assert np.linalg.norm(u, 2) == pytest.approx(0.9)
    with RNN(sizes, dtype="float64", recurrent_norm=0.5, backend="numpy") as net:
        assert all(np.linalg.norm(u, 2) == pytest.approx(0.5) for u in net.recurrent)


def test_sgd_step_follows_the_update_rule():
    with RNN([3, 5, 2], dtype="float64", output="every", backend="numpy") as net:
        x, y = batch(net.sizes, 3, 0, tau=4, output=net.output)
        before = [net.weights, net.recurrent, net.biases]
        nabla_b, nabla_w, nabla_u = rnn_lists(net.backprop(x, y))
        net.sgd_step(x, y, 0.3, Leapfrog(2, fused=True))
        after = [net.weights, net.recurrent, net.biases]
    for old, new, grads in zip(before, after, (nabla_w, nabla_u, nabla_b)):
        for o, n, g in zip(old, new, grads):
            np.testing.assert_allclose(n, o - 0.3 / 3 * g, rtol=1e-12, atol=1e-15)


def test_set_parameters_round_trips_and_refuses_bad_arrays():
    with RNN([3, 5, 2], dtype="float64", backend="numpy") as net, \
            RNN([3, 5, 2], dtype="float64", seed=9, backend="numpy") as other:
        other.set_parameters(net.weights, net.recurrent, net.biases)
        assert all(np.array_equal(a, b) for a, b in zip(net.recurrent, other.recurrent))
        with pytest.raises(ValueError, match=r"recurrent\[0\] \(u\^2\) must have shape \(5, 5\); got \(5, 4\)"):
            net.set_parameters(net.weights, [np.zeros((5, 4))], net.biases)
        with pytest.raises(ValueError, match=r"weights must list 2 arrays \(layers 2..3\); got 1"):
            net.set_parameters(net.weights[:1], net.recurrent, net.biases)
        biases = net.biases
        biases[1][0] = np.nan
        with pytest.raises(ValueError, match=r"biases\[1\] \(b\^3\) contains NaN"):
            net.set_parameters(net.weights, net.recurrent, biases)
        with RNN([3, 5, 2], backend="numpy") as single, \
                pytest.raises(ValueError, match=r"recurrent\[0\] \(u\^2\) contains NaN or Inf \(as float32\)"):
            single.set_parameters(net.weights, [np.full((5, 5), 1e300)], net.biases)
        with pytest.raises(TypeError, match=r"recurrent must be a list of 1 arrays \(layers 2..2\); got ndarray"):
            net.set_parameters(net.weights, np.zeros((5, 5)), net.biases)
        with pytest.raises(TypeError, match=r"weights\[0\] \(w\^2\) must hold real numbers"):
            net.set_parameters([np.zeros((5, 3), complex), net.weights[1]], net.recurrent, net.biases)


@pytest.mark.parametrize("name", ["weights", "recurrent", "biases"])
def test_assigning_the_parameters_points_at_set_parameters(name):
    """The call it names loads a GRU's too (which needs b_hn, or the dict of ``parameters()``)."""
    with RNN([3, 5, 2], backend="numpy") as net:
        with pytest.raises(AttributeError, match=rf"^{name} cannot be assigned: each read of it is a copy; to load "
                                                 r"parameters call net.set_parameters\(weights, recurrent, biases\), "
                                                 r"a GRU's with b_hn after them$"):
            setattr(net, name, getattr(net, name))


def test_a_gru_s_lists_load_back_as_they_are_given():
    """``net.b_hn`` is the last list of a GRU's ``set_parameters``, which the assignment hint names: the four lists
    of one GRU loaded into another give it the same parameters, bit for bit (b_hn was in parameters() alone)."""
    with RNN([3, 5, 4, 2], cell="gru", backend="numpy", seed=1) as net, \
            RNN([3, 5, 4, 2], cell="gru", backend="numpy", seed=2) as other:
        b_hn = net.b_hn
        assert [b.shape for b in b_hn] == [(5,), (4,)]
        assert_bitwise_equal(b_hn, [net.parameters()[l]["b_hn"] for l in (2, 3)])
        other.set_parameters(net.weights, net.recurrent, net.biases, b_hn)
        assert_bitwise_equal([a for l in (2, 3, 4) for a in other.parameters()[l].values()],
                             [a for l in (2, 3, 4) for a in net.parameters()[l].values()])
        with pytest.raises(AttributeError, match="^b_hn cannot be assigned"):
            net.b_hn = b_hn
    with RNN([3, 5, 2], cell="lstm", backend="numpy") as lstm, \
            pytest.raises(AttributeError, match="^b_hn is the GRU's alone; this RNN's cells are 'lstm'$"):
        lstm.b_hn


@pytest.mark.parametrize("tau, batch, error", [(0, 1, ValueError), (1, 0, ValueError), (-1, 2, ValueError),
                                               (2, True, TypeError), (2.0, 3, TypeError)])
def test_a_plan_of_no_sequence_is_refused_naming_its_argument(tau, batch, error):
    """``plan(tau, B)`` as ``MLP.plan(B)``: B = 0 was a plan, and tau = 0 an IndexError."""
    with RNN([3, 5, 2], backend="numpy") as net:
        name, value = ("tau", tau) if error is ValueError and tau < 1 or isinstance(tau, float) else ("batch", batch)
        with pytest.raises(error, match=rf"^{name} must be an integer >= 1; got {value!r}$"):
            net.plan(tau, batch)


@pytest.mark.parametrize("output,x_shape,y_shape,message", [
    ("last", (4, 2, 3), (2, 3), r"x \(the input of layer 1\) must have shape \(tau, 3, B\) or \(tau, 3\)"),
    ("last", (4, 3), (2, 3), r"x and y must hold the same number of sequences B; got 1 in x of shape \(4, 3\) "
                             r"and 3 in y of shape \(2, 3\)$"),
    ("every", (4, 3), (4, 2, 3), r"got 1 in x of shape \(4, 3\) and 3 in y of shape \(4, 2, 3\)$"),
    ("last", (4, 3, 2), (5,), r"must have shape \(2, B\) or \(2,\) for sizes \[3, 5, 2\], or class labels of shape "
                              r"\(B,\); got \(5,\)$"),
    ("every", (4, 3, 3), (3,), r"for sizes \[3, 5, 2\], tau as in x, or class labels of shape \(4, B\) or \(4,\); "
                               r"got \(3,\)$"),
    ("last", (0, 3), (2,), r"x holds an empty batch: shape \(0, 3\), need tau >= 1 and B >= 1"),
    ("last", (4, 3, 3), (3, 3), r"y \(the target of layer L=3, output='last'\) must have shape \(2, B\) or \(2,\)"),
    ("every", (4, 3, 3), (2, 3), r"y \(the target of layer L=3 at every time step\) must have shape \(4, 2, B\)"),
    ("every", (4, 3, 3), (5, 2, 3), r"must have shape \(4, 2, B\) or \(4, 2\) for sizes \[3, 5, 2\], tau as in x"),
    ("last", (0, 3, 3), (2, 3), r"x holds an empty batch: shape \(0, 3, 3\), need tau >= 1 and B >= 1"),
    ("last", (4, 3, 0), (2, 0), r"x holds an empty batch"),
])
def test_bad_batches_are_refused_naming_the_argument_the_layer_and_the_shape(output, x_shape, y_shape, message):
    """Each shape as it was given: one sequence (tau, n_1) is not shown as (tau, n_1, 1)."""
    with RNN([3, 5, 2], output=output, backend="numpy") as net:
        with pytest.raises(ValueError, match=message):
            net.backprop(np.zeros(x_shape), np.zeros(y_shape))


def test_nan_strings_and_bad_options_are_refused():
    with RNN([3, 5, 2], backend="numpy") as net:
        x = np.zeros((4, 3, 2))
        x[1, 2, 0] = np.inf
        with pytest.raises(ValueError, match="x contains NaN or Inf"):
            net.sgd_step(x, np.zeros((2, 2)), 0.1)
        with pytest.raises(ValueError, match="y contains NaN or Inf"):
            net.backprop(np.zeros((4, 3, 2)), np.full((2, 2), np.nan))
        with pytest.raises(TypeError, match="x must hold real numbers"):
            net.feedforward(np.array([["a"] * 3] * 2))
        with pytest.raises(ValueError, match="eta"):
            net.sgd_step(np.zeros((4, 3, 2)), np.zeros((2, 2)), -1.0)
    with pytest.raises(ValueError, match="at least 3 layers"):
        RNN([3, 2], backend="numpy")
    with pytest.raises(ValueError, match="output must be one of 'last', 'every'"):
        RNN([3, 5, 2], output="first", backend="numpy")
    with pytest.raises(ValueError, match="dtype must be one of"):
        RNN([3, 5, 2], dtype="float16", backend="numpy")
    with pytest.raises(ValueError, match="recurrent_norm"):
        RNN([3, 5, 2], recurrent_norm=math.inf, backend="numpy")


def test_schedules_that_cannot_run_are_refused_naming_those_that_can():
    with RNN([3, 5, 2], backend="numpy") as net:
        x, y = np.zeros((2, 3, 1)), np.zeros((2, 1))
        for schedule in (NaumovScan(), NaumovJacobi()):
            with pytest.raises(TypeError, match=r"an RNN cannot run .*; it takes Sequential\(\), Leapfrog\(k\), "
                                                r"BPTT\(\), Wavefront\(\), TimeScan\(\) or NaumovRNN\(\)"):
                net.backprop(x, y, schedule)
        with pytest.raises(TypeError, match=r"schedule must be a schedule object: Sequential\(\), Leapfrog\(k\), "
                                            r"BPTT\(\), Wavefront\(\), TimeScan\(\) or NaumovRNN\(\); got 'bptt'"):
            net.backprop(x, y, "bptt")
    for cell in ("gru", "lstm"):  # NaumovRNN has no operators for a gated cell: neither named nor run
        with RNN([3, 5, 2], cell=cell, backend="numpy") as net:
            with pytest.raises(TypeError, match=r"an RNN cannot run NaumovScan\(.*\); it takes Sequential\(\), "
                                                r"Leapfrog\(k\), BPTT\(\), Wavefront\(\) or TimeScan\(\)$"):
                net.backprop(x, y, NaumovScan())
            with pytest.raises(ValueError, match=r"^NaumovRNN builds the Elman cell's layer operators .* run BPTT"):
                net.backprop(x, y, NaumovRNN())
    with MLP([3, 5, 2], backend="numpy") as mlp:
        for schedule in (BPTT(), Wavefront(), TimeScan(), NaumovRNN()):
            for run in (lambda: mlp.backprop(np.zeros(3), np.zeros(2), schedule),
                        lambda: mlp.sgd_step(np.zeros(3), np.zeros(2), 0.1, schedule)):
                with pytest.raises(TypeError, match=r"an MLP cannot run .*; it takes Sequential\(\), "
                                                    r"Leapfrog\(k\), NaumovScan\(\) or NaumovJacobi\(\)"):
                    run()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow, in the stream threads
@pytest.mark.parametrize("on", ["numpy", "cupy"])
@pytest.mark.parametrize("output, t", [("every", 1), ("last", 5)])
def test_check_finite_names_the_delta_where_the_inf_first_appears(output, t, on, monkeypatch):
    """An input of 1e300 at step t alone, w^2, w^3 of ones and w^4 of 1e10: the hidden states there are large
    but finite (3e300, 1.2e301), so u = 0 keeps the other steps finite, and the output a^{4,t} overflows.
    delta^{4,t} is then the first bad array in BPTT's order (the deepest layer, its last step first); with
    ``output="last"`` (t = tau) it is the one delta^4. The refusal names it; the parameters stay as they were.
    On the CuPy stand-in too, whose check reads each step's delta, a strided view of the (n, tau, B) sequence."""
    if on == "cupy":
        install_standin(monkeypatch, "main-first")
    sizes, tau, B = [3, 4, 5, 2], 5, 2
    with RNN(sizes, "relu", output=output, dtype="float64", seed=2, backend=on, recurrent_norm=0,
             output_activation="identity", check_finite=True) as net:
        weights = [np.ones((4, 3)), np.ones((5, 4)), np.full((2, 5), 1e10)]
        net.set_parameters(weights, net.recurrent, net.biases)
        before = host(net.weights + net.recurrent + net.biases)
        x = np.random.default_rng(0).uniform(0.1, 1.0, (tau, sizes[0], B))
        x[t - 1] = 1e300
        y = np.zeros((tau, sizes[-1], B) if output == "every" else (sizes[-1], B))
        with np.errstate(all="ignore"):
            net.sgd_step(x, y, 0.1, BPTT())
            with pytest.raises(FloatingPointError) as refused:
                net.synchronize()
        assert str(refused.value) == f"delta[4] at t = {t} holds NaN or Inf; update refused, parameters unchanged"
        assert all(np.array_equal(p, q) for p, q in zip(host(net.weights + net.recurrent + net.biases), before))
