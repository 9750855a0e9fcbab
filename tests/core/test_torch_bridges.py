"""The RNN and the GraphNet to and from PyTorch: ``to_torch`` computes ``feedforward`` (the expected values
computed by torch itself), its parameters equal the network's bitwise and are copies that neither side's
training reaches, ``RNN.from_torch`` reads a module back bitwise and refuses what an RNN cannot compute
saying why, ``GraphNet.to_torch`` refuses a layer or a node name it cannot translate, and without torch
every one names the extra to install.

Tolerance of the comparisons with ``feedforward``: 64 eps of the dtype, relative to 1 + |a^L|, as
tests/core/test_torch_io.py. An RNN's output at step t is a chain of t steps of sums of at most 12 products and
an activation, rounded in another order than the network's; the contraction of u (spectral norm 0.9)
keeps the differences of early steps from growing with tau, but a sum of large terms that cancel leaves
its rounding in a small z: over 20 seeds of every case the worst is 14 eps (float32) and 26 eps
(float64), a relu RNN whose states reach hundreds before a tanh output. The DAGs' sums and LayerNorm are
rounded in another order too (worst: 1.4 eps).
"""

import re
import sys

import numpy as np
import pytest

from helpers import NETS
from leapfrog_gpu import RNN, Add, Concat, Dense, GraphNet, LayerNorm

NEEDS_TORCH = "the PyTorch conversions need torch: pip install 'leapfrog_gpu[torch]'"
KINDS = [(activation, output, cost) for activation in ("tanh", "relu")
         for output, cost in [("sigmoid", "quadratic"), ("sigmoid", "cross_entropy"), ("tanh", "quadratic"),
                              ("relu", "quadratic"), ("identity", "quadratic")]]
"""Every recurrent activation torch.nn.RNN has, every output activation and cost an RNN accepts."""
DTYPES = ["float32", "float64"]
OUTPUTS = ["last", "every"]


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason=NEEDS_TORCH)


def assert_close(got, want, dtype):
    tolerance = 64 * np.finfo(dtype).eps
    assert got.dtype == want.dtype == np.dtype(dtype) and got.shape == want.shape
    np.testing.assert_array_less(np.abs(got - want), tolerance * (1 + np.abs(want)))


def assert_bitwise(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def detached(tensors):
    return [tensor.detach().numpy().copy() for tensor in tensors]


# -- RNN ----------------------------------------------------------------------------------------------


def random_rnn(seed, activation, output_activation, cost, output, dtype):
    """An RNN of 3 to 5 layers of random widths 1..12, trained one step so that its parameters are no longer
    the initial ones, and a batch of tau in 1..9 sequences of B in 1..5 to run it on."""
    rng = np.random.default_rng(seed)
    sizes = [int(n) for n in rng.integers(1, 13, rng.integers(3, 6))]
    tau, B = int(rng.integers(1, 10)), int(rng.integers(1, 6))
    net = RNN(sizes, activation, cost, output, dtype, seed=seed, backend="numpy", output_activation=output_activation)
    y = rng.uniform(0.05, 0.95, (sizes[-1], B) if output == "last" else (tau, sizes[-1], B))
    net.sgd_step(rng.random((tau, sizes[0], B)), y, 0.5)
    return net, rng.uniform(-1, 1, (tau, sizes[0], B)).astype(dtype)


def run_rnn(torch, module, x, output):
    """``module`` on x (tau, n_1, B) in torch's layout (tau, B, n_1), its output in the network's."""
    with torch.no_grad():
        a = module(torch.from_numpy(x.transpose(0, 2, 1))).numpy()
    return a.T if output == "last" else a.transpose(0, 2, 1)


def rnn_parameters(net):
    """w^l, u^l, b^l, zeros for l = 2..L-1, then w^L and b^L: the order of ``to_torch``'s ``parameters()``."""
    recurrent = [(w, u, b, np.zeros_like(b)) for w, u, b in zip(net.weights, net.recurrent, net.biases)]
    return [p for layer in recurrent for p in layer] + [net.weights[-1], net.biases[-1]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("activation,output_activation,cost", KINDS, ids="-".join)
def test_rnn_to_torch_computes_feedforward(torch, activation, output_activation, cost, output, dtype):
    for seed in range(3):
        net, x = random_rnn(seed, activation, output_activation, cost, output, dtype)
        with net:
            module = net.to_torch()
            rnns = [m for m in module.modules() if isinstance(m, torch.nn.RNN)]
            assert len(rnns) == net.L - 2 and all(rnn.nonlinearity == activation for rnn in rnns)
            assert all(p.dtype == getattr(torch, dtype) and p.device.type == "cpu" for p in module.parameters())
            assert_bitwise(detached(module.parameters()), rnn_parameters(net))
            assert_close(run_rnn(torch, module, x, output), net.feedforward(x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("activation,output_activation,cost", KINDS, ids="-".join)
def test_an_rnn_round_trip_gives_the_parameters_back_bitwise(torch, activation, output_activation, cost, output,
                                                             dtype):
    for seed in range(3):
        net, x = random_rnn(seed, activation, output_activation, cost, output, dtype)
        with net, RNN.from_torch(net.to_torch(), cost=cost, output=output, backend="numpy") as back:
            assert (back.sizes, back.activation, back.output_activation, back.cost, back.output, back.dtype) == (
                net.sizes, activation, output_activation, cost, output, dtype)
            assert_bitwise(back.weights + back.recurrent + back.biases, net.weights + net.recurrent + net.biases)
            assert np.array_equal(back.feedforward(x), net.feedforward(x))


def hand_made(torch):
    """A module of one's own: a two-layer relu ``nn.RNN`` taking (B, tau, n_1), its output ``Linear`` at the
    last step, torch's own initial parameters (``bias_hh`` not zero)."""

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.RNN(4, 6, num_layers=2, nonlinearity="relu", batch_first=True)
            self.head = torch.nn.Linear(6, 3)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    torch.manual_seed(0)
    return Classifier()


@pytest.mark.parametrize("dtype", DTYPES)
def test_from_torch_of_a_module_of_ones_own_sums_the_two_biases(torch, dtype):
    module = hand_made(torch).to(getattr(torch, dtype))
    x = np.random.default_rng(1).uniform(-1, 1, (7, 4, 5)).astype(dtype)
    with RNN.from_torch(module, backend="numpy") as net, torch.no_grad():
        assert (net.sizes, net.activation, net.output_activation, net.output, net.dtype) == (
            [4, 6, 6, 3], "relu", "identity", "last", dtype)
        rnn = module.rnn
        assert_bitwise(net.biases[:2], detached([rnn.bias_ih_l0 + rnn.bias_hh_l0, rnn.bias_ih_l1 + rnn.bias_hh_l1]))
        assert_bitwise(net.recurrent, detached([rnn.weight_hh_l0, rnn.weight_hh_l1]))
        want = module(torch.from_numpy(x.transpose(2, 0, 1))).numpy().T  # batch_first: (B, tau, n_1)
        assert_close(net.feedforward(x), want, dtype)


def test_from_torch_of_modules_without_biases_and_of_every_step(torch):
    torch.manual_seed(2)
    module = torch.nn.Sequential(torch.nn.RNN(3, 5, bias=False), torch.nn.RNN(5, 4, nonlinearity="tanh"),
                                 torch.nn.Identity(), torch.nn.Linear(4, 2, bias=False), torch.nn.Sigmoid()).double()
    x = np.random.default_rng(3).uniform(-1, 1, (6, 3, 2))
    with RNN.from_torch(module, cost="cross_entropy", output="every", backend="numpy") as net, torch.no_grad():
        assert (net.sizes, net.activation, net.output_activation, net.output) == ([3, 5, 4, 2], "tanh", "sigmoid",
                                                                                "every")
        assert_bitwise([net.biases[0], net.biases[2]], [np.zeros(5), np.zeros(2)])
        a = torch.from_numpy(x.transpose(0, 2, 1))
        want = module[4](module[3](module[1](module[0](a)[0])[0])).numpy().transpose(0, 2, 1)
        assert_close(net.feedforward(x), want, "float64")


def test_to_torch_refuses_a_sigmoid_rnn(torch):
    with RNN([3, 4, 2], activation="sigmoid", backend="numpy") as net:
        with pytest.raises(ValueError, match=r"torch.nn.RNN has no sigmoid nonlinearity \(it has tanh and relu\): an "
                                             r"RNN with activation='sigmoid' cannot be written as torch.nn.RNN layers"):
            net.to_torch()


def unreadable(torch):
    nn, S = torch.nn, torch.nn.Sequential
    return [
        (object(), TypeError, "from_torch reads a torch.nn.Module of torch.nn.RNN, Linear and activation modules; "
                              "got object"),
        (S(nn.GRU(3, 4), nn.Linear(4, 2)), TypeError,
         "module.0 (GRU): from_torch reads torch.nn.RNN, Linear, Sigmoid, Tanh, ReLU and Identity modules: an RNN's "
         "layers have no gates"),
        (S(nn.LSTM(3, 4, proj_size=2), nn.Linear(2, 2)), TypeError, "module.0 (LSTM): from_torch reads"),
        (S(nn.RNN(3, 4), nn.Dropout(), nn.Linear(4, 2)), TypeError, "module.1 (Dropout): from_torch reads"),
        (S(nn.RNN(3, 4), nn.Linear(4, 2), nn.Softmax(dim=-1)), TypeError, "module.2 (Softmax): from_torch reads"),
        (S(nn.RNN(3, 4, bidirectional=True), nn.Linear(8, 2)), ValueError,
         "module.0 (RNN) is bidirectional: an RNN runs forward in time only; read a module with bidirectional=False"),
        (S(nn.RNN(3, 4, num_layers=2, dropout=0.5), nn.Linear(4, 2)), ValueError,
         "module.0 (RNN) drops out between its layers (dropout=0.5), which an RNN does not; set its dropout to 0"),
        (S(nn.RNN(3, 4), nn.RNN(4, 4, nonlinearity="relu"), nn.Linear(4, 2)), ValueError,
         "the recurrent layers must share one nonlinearity; module.0 (RNN) has 'tanh', module.1 (RNN) 'relu'"),
        (S(nn.Linear(3, 3), nn.RNN(3, 4), nn.Linear(4, 2)), ValueError,
         "module.0 (Linear) is not one output Linear after the recurrent layers: from_torch reads torch.nn.RNN "
         "modules, then one Linear, then at most one activation"),
        (S(nn.RNN(3, 4), nn.Linear(4, 4), nn.Linear(4, 2)), ValueError, "module.2 (Linear) is not one output Linear"),
        (S(nn.RNN(3, 4), nn.Linear(4, 4), nn.RNN(4, 2)), ValueError,
         "module.2 (RNN) comes after the output Linear: an RNN's recurrent layers come first"),
        (S(nn.RNN(3, 4), nn.Tanh(), nn.Linear(4, 2)), ValueError,
         "module.1 (Tanh) must follow the output Linear, alone: the recurrent layers' activation is their "
         "nonlinearity"),
        (S(nn.RNN(3, 4), nn.Linear(4, 2), nn.Tanh(), nn.Sigmoid()), ValueError, "module.3 (Sigmoid) must follow"),
        (nn.RNN(3, 4), ValueError, "the module holds no torch.nn.RNN followed by a Linear: from_torch needs both"),
        (S(nn.Linear(3, 2)), ValueError, "module.0 (Linear) is not one output Linear after the recurrent layers"),
        (S(nn.RNN(3, 4), nn.RNN(5, 4), nn.Linear(4, 2)), ValueError,
         "layer 3 takes 5 inputs but layer 2 has 4 units: the widths do not chain"),
        (S(nn.RNN(3, 4), nn.Linear(5, 2)), ValueError, "layer 3 takes 5 inputs but layer 2 has 4 units"),
    ]


@pytest.mark.parametrize("case", range(17))
def test_a_module_rnn_from_torch_cannot_read_is_refused_saying_why(torch, case):
    module, error, message = unreadable(torch)[case]
    with pytest.raises(error) as info:
        RNN.from_torch(module, backend="numpy")
    assert message in str(info.value)


def test_rnn_from_torch_refuses_what_the_network_refuses(torch):
    module = torch.nn.Sequential(torch.nn.RNN(3, 4), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match="output must be one of 'last', 'every'; got 'first'"):
        RNN.from_torch(module, output="first", backend="numpy")
    with pytest.raises(ValueError, match="cost 'cross_entropy' needs output_activation 'sigmoid'; got 'identity'"):
        RNN.from_torch(module, cost="cross_entropy", backend="numpy")
    with torch.no_grad():
        module[0].bias_hh_l0[1] = float("inf")
    with pytest.raises(ValueError, match=r"biases\[0\] \(b\^2\) contains NaN or Inf \(as float32\)"):
        RNN.from_torch(module, backend="numpy")


def test_the_rnn_module_is_a_copy_neither_side_s_training_reaches(torch):
    net, x = random_rnn(3, "tanh", "sigmoid", "quadratic", "every", "float64")  # tau = 8: u learns too
    with net:
        module = net.to_torch()
        kept = detached(module.parameters())
        net.sgd_step(x, np.full((x.shape[0], net.sizes[-1], x.shape[2]), 0.5), 1.0)
        assert not np.array_equal(net.recurrent[0], kept[1])
        assert_bitwise(detached(module.parameters()), kept)
        before = net.weights + net.recurrent + net.biases
        with torch.no_grad():
            for p in module.parameters():
                p.add_(1.0)  # what an optimizer's step does
        assert_bitwise(net.weights + net.recurrent + net.biases, before)
        with RNN.from_torch(module, output="every", backend="numpy") as back:
            back.sgd_step(x, np.zeros((x.shape[0], net.sizes[-1], x.shape[2])), 1.0)
            assert not np.array_equal(back.weights[0], kept[0] + 1.0)
            assert_bitwise(detached(module.parameters()), [p + 1.0 for p in kept])


# -- GraphNet -----------------------------------------------------------------------------------------


def three_way(backend, dtype="float64", seed=6):
    """Three Dense branches of the input summed by one Add, an identity output."""
    return GraphNet(3, [("a", Dense(4, "relu"), "x"), ("b", Dense(4, "tanh"), "x"), ("c", Dense(4), "x"),
                        ("s", Add(), ["a", "b", "c"]), ("out", Dense(2, "identity"), "s")],
                    dtype=dtype, seed=seed, backend=backend)


def joined(backend, dtype="float64", seed=7):
    """A Concat of the input and a LayerNorm, nodes named as torch names nothing."""
    return GraphNet(4, [("2", Dense(5, "sigmoid"), "x"), ("my norm", LayerNorm(eps=1e-3), "2"),
                        ("c-1", Concat(), ["x", "my norm"]), ("out", Dense(3, "tanh"), "c-1")],
                    dtype=dtype, seed=seed, backend=backend)


DAGS = {"residual": NETS["residual"], "densenet": NETS["densenet"], "three_way": three_way, "joined": joined}


def trained_dag(make, dtype):
    """The DAG of ``make``, trained one step, and a batch to run it on."""
    net = make("numpy", dtype=dtype)
    rng = np.random.default_rng(8)
    net.sgd_step(rng.random((net.n["x"], 6)), rng.uniform(0.05, 0.95, (net.n[net.output], 6)), 0.5)
    return net, rng.uniform(-1, 1, (net.n["x"], 9)).astype(dtype)


def dag_parameters(net):
    """The network's parameters by the names of the module's: ``<node>.0.weight`` for a Dense node's w, ..."""
    names = {"w": "0.weight", "b": "0.bias", "gamma": "weight", "beta": "bias"}
    return {f"{v}.{names[name]}": array for v, named in net.parameters().items() for name, array in named.items()}


def run_dag(torch, module, x):
    with torch.no_grad():
        return module(torch.from_numpy(x.T)).numpy().T


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", DAGS)
def test_graphnet_to_torch_computes_feedforward(torch, name, dtype):
    net, x = trained_dag(DAGS[name], dtype)
    with net:
        module = net.to_torch()
        params = {key: p.detach().numpy() for key, p in module.named_parameters()}
        want = dag_parameters(net)
        assert sorted(params) == sorted(want)
        assert_bitwise([params[key] for key in sorted(want)], [want[key] for key in sorted(want)])
        assert_close(run_dag(torch, module, x), net.feedforward(x), dtype)


def test_graphnet_to_torch_refuses_a_layer_it_cannot_translate(torch):
    with NETS["gate"]("numpy") as net:
        with pytest.raises(TypeError, match="node 'g' is a Gate, which to_torch cannot translate: it translates "
                                            "Dense, Add, Concat, LayerNorm layers"):
            net.to_torch()


@pytest.mark.parametrize("name", ["forward", "graph", "a.b", 'a"b', "class", "é"])
def test_graphnet_to_torch_refuses_a_node_name_torch_cannot_take(torch, name):
    with GraphNet(3, [(name, Dense(4), "x"), ("out", Dense(2), name)], backend="numpy") as net:
        with pytest.raises(ValueError) as info:
            net.to_torch()
    assert str(info.value).startswith(f"node {name!r} cannot name a torch module: to_torch names each Dense and "
                                      "LayerNorm node's module after the node")
    assert str(info.value).endswith("rename the node")


def test_the_graphnet_module_is_a_copy_neither_side_s_training_reaches(torch):
    net, x = trained_dag(NETS["residual"], "float64")
    with net:
        module = net.to_torch()
        kept = detached(module.parameters())
        net.sgd_step(x, np.full((net.n[net.output], x.shape[1]), 0.5), 1.0)
        assert_bitwise(detached(module.parameters()), kept)
        before = net.parameters()
        with torch.no_grad():
            for p in module.parameters():
                p.mul_(2.0)
        after = net.parameters()
        assert_bitwise([after[v][n] for v in before for n in before[v]], [before[v][n] for v in before for n in before[v]])


# -- without torch ----------------------------------------------------------------------------------


def test_without_torch_every_bridge_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    extra = re.escape("pip install 'leapfrog_gpu[torch]'")
    with RNN([3, 4, 2], backend="numpy") as rnn, three_way("numpy") as dag:
        for call in (rnn.to_torch, dag.to_torch, lambda: RNN.from_torch(object(), backend="numpy")):
            with pytest.raises(ImportError, match=f"PyTorch is not installed; it is an optional extra of "
                                                  f"leapfrog_gpu: {extra}"):
                call()
