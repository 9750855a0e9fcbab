"""Parameters out and in through PyTorch: ``MLP.to_torch`` computes ``feedforward``, ``MLP.from_torch``
reads a module back bitwise, neither leaves the network and a module sharing memory, a module it cannot
read is refused saying why, and without torch both name the extra to install.

Tolerance of the comparisons with ``feedforward``: 64 eps of the dtype, relative to 1 + |a^L|. Each layer
is a sum of at most 16 products and an activation, each rounded once, in another order than the
network's kernels; across 5 layers that bounds the difference by a few tens of eps (measured: 2 eps).
"""

import itertools
import sys

import numpy as np
import pytest

from helpers import to_numpy
from leapfrog_gpu import MLP, Leapfrog
from leapfrog_gpu.core.functions import ACTIVATIONS, COSTS, OUTPUT_ACTIVATIONS

NEEDS_TORCH = "the PyTorch conversions need torch: pip install 'leapfrog_gpu[torch]'"
KINDS = [(activation, output, cost) for activation, output, cost in itertools.product(
    ACTIVATIONS, OUTPUT_ACTIVATIONS, COSTS) if cost == "quadratic" or output == "sigmoid"]
"""Every hidden activation, output activation and cost a network accepts (cross-entropy: sigmoid only)."""
DTYPES = ["float32", "float64"]


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason=NEEDS_TORCH)


def random_network(seed, activation, output_activation, cost, dtype):
    """A network of 2 to 5 layers of random widths 1..16, trained one step so that its parameters are
    no longer the initial ones."""
    rng = np.random.default_rng(seed)
    sizes = [int(n) for n in rng.integers(1, 17, rng.integers(2, 6))]
    net = MLP(sizes, activation=activation, cost=cost, dtype=dtype, seed=seed, backend="numpy",
              output_activation=output_activation)
    x, y = rng.random((sizes[0], 4)), rng.uniform(0.05, 0.95, (sizes[-1], 4))
    net.sgd_step(x, y, 0.5, Leapfrog(2))
    return net, rng.uniform(-1, 1, (sizes[0], 7)).astype(dtype)


def rows(torch, module, x):
    """``module`` applied to the columns of ``x`` (n_1, B), returned as columns (n_L, B)."""
    with torch.no_grad():
        return module(torch.from_numpy(np.ascontiguousarray(x.T))).numpy().T


def assert_close(got, want, dtype):
    tolerance = 64 * np.finfo(dtype).eps
    assert got.dtype == want.dtype == np.dtype(dtype)
    np.testing.assert_array_less(np.abs(got - want), tolerance * (1 + np.abs(want)))


def assert_bitwise(arrays, expected):
    assert len(arrays) == len(expected)
    for got, want in zip(arrays, expected):
        got, want = to_numpy(got), to_numpy(want)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def module_parameters(module):
    return [p.detach().numpy() for p in module.parameters()]


def network_parameters(net):
    """w^2, b^2, w^3, b^3, ...: the order of a module's ``parameters()``."""
    return [p for pair in zip(net.weights, net.biases) for p in pair]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation,output_activation,cost", KINDS, ids="-".join)
def test_to_torch_computes_feedforward(torch, activation, output_activation, cost, dtype):
    for seed in range(3):
        net, x = random_network(seed, activation, output_activation, cost, dtype)
        with net:
            module = net.to_torch()
            assert isinstance(module, torch.nn.Sequential)
            assert all(p.dtype == getattr(torch, dtype) and p.device.type == "cpu" for p in module.parameters())
            assert_bitwise(module_parameters(module), network_parameters(net))
            assert_close(rows(torch, module, x), net.feedforward(x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation,output_activation,cost", KINDS, ids="-".join)
def test_a_round_trip_gives_the_parameters_back_bitwise(torch, activation, output_activation, cost, dtype):
    for seed in range(3):
        net, x = random_network(seed, activation, output_activation, cost, dtype)
        with net, MLP.from_torch(net.to_torch(), cost=cost, backend="numpy") as back:
            assert (back.sizes, back.cost, back.dtype, back.output_activation) == (
                net.sizes, cost, dtype, output_activation)
            if net.L > 2:  # with no hidden layer there is no hidden activation to read
                assert back.activation == activation
            assert_bitwise(back.weights + back.biases, net.weights + net.biases)
            assert np.array_equal(back.feedforward(x), net.feedforward(x))


def test_the_module_is_a_copy_later_steps_do_not_change(torch):
    net, x = random_network(0, "sigmoid", "sigmoid", "quadratic", "float64")
    with net:
        module = net.to_torch()
        kept = [p.copy() for p in module_parameters(module)]
        net.sgd_step(x, np.full((net.sizes[-1], 7), 0.5), 1.0)
        assert not np.array_equal(net.weights[0], kept[0])
        assert_bitwise(module_parameters(module), kept)
        before = network_parameters(net)
        with torch.no_grad():
            for p in module.parameters():
                p.add_(1.0)  # what an optimizer's step does
        assert_bitwise(network_parameters(net), before)


def test_from_torch_copies_so_training_the_network_never_writes_the_module(torch):
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Sigmoid(), torch.nn.Linear(4, 2)).double()
    kept = [p.detach().clone() for p in module.parameters()]
    with MLP.from_torch(module, backend="numpy") as net:
        net.sgd_step(np.full((3, 5), 0.5), np.zeros((2, 5)), 1.0)
        assert not np.array_equal(net.weights[0], kept[0].numpy())
        assert all(torch.equal(p, q) for p, q in zip(module.parameters(), kept))
        trained = network_parameters(net)
        with torch.no_grad():
            module[0].weight.zero_()
        assert_bitwise(network_parameters(net), trained)


@pytest.mark.parametrize("dtype", DTYPES)
def test_from_torch_of_a_hand_made_module(torch, dtype):
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Identity(),
        torch.nn.Linear(8, 8, bias=False), torch.nn.ReLU(),
        torch.nn.Linear(8, 2),
    ).to(getattr(torch, dtype))
    x = np.random.default_rng(1).uniform(-1, 1, (5, 6)).astype(dtype)
    with MLP.from_torch(module, backend="numpy") as net:
        assert (net.sizes, net.activation, net.output_activation, net.dtype) == (
            [5, 8, 8, 2], "relu", "identity", dtype)
        assert_bitwise(net.biases[1:2], [np.zeros(8, dtype)])  # a Linear without a bias: zeros
        assert_close(net.feedforward(x), rows(torch, module, x), dtype)


def test_from_torch_of_a_classifier_with_a_sigmoid_output_and_cross_entropy(torch):
    torch.manual_seed(1)
    module = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3), torch.nn.Sigmoid())
    with MLP.from_torch(module, cost="cross_entropy", backend="numpy", seed=9) as net:
        assert (net.activation, net.output_activation, net.cost, net.dtype) == ("tanh", "sigmoid", "cross_entropy",
                                                                               "float32")
        x = np.random.default_rng(2).random((4, 3)).astype(np.float32)
        assert_close(net.feedforward(x), rows(torch, module, x), "float32")


def test_from_torch_converts_to_the_dtype_asked_for(torch):
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Sigmoid())  # float32
    with MLP.from_torch(module, backend="numpy", dtype="float64") as net:
        assert net.dtype == "float64" and net.activation == "sigmoid"
        assert_bitwise(net.weights, [module[0].weight.detach().double().numpy()])
    half = torch.nn.Sequential(torch.nn.Linear(3, 2)).to(torch.bfloat16)
    with MLP.from_torch(half, backend="numpy", dtype="float32") as net:
        assert net.output_activation == "identity"
        assert_bitwise(net.weights, [half[0].weight.detach().float().numpy()])
    with pytest.raises(ValueError, match="dtype must be one of 'float32', 'float64'; got 'bfloat16'"):
        MLP.from_torch(half, backend="numpy")


def test_the_conversions_share_memory_only_with_what_they_are_handed(torch):
    """DLPack in both directions on the CPU: no copy between a NumPy array and a CPU tensor."""
    from leapfrog_gpu.core.torch_io import as_arrays
    from leapfrog_gpu.mlp.torch_io import to_module

    w, b = np.ones((2, 3)), np.zeros(2)
    module = to_module([w], [b], "sigmoid", "identity")
    w[0, 0] = 7.0
    assert module[0].weight[0, 0].item() == 7.0
    (weights,), (biases,) = as_arrays(([module[0].weight.detach()], [module[0].bias.detach()]), np)
    assert np.shares_memory(weights, w) and np.shares_memory(biases, b)


def test_to_torch_and_from_torch_on_the_cupy_backend(torch, standin):
    """The stand-in's arrays have no DLPack: to_torch copies through the host and gives a CPU module."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    net, x = random_network(4, "tanh", "identity", "quadratic", "float64")
    with net, CupyBackend() as cuda, MLP.from_torch(net.to_torch(), backend=cuda) as there:
        assert_bitwise(there.weights + there.biases, net.weights + net.biases)
        module = there.to_torch()
        assert all(p.device.type == "cpu" for p in module.parameters())
        assert_bitwise(module_parameters(module), network_parameters(net))
        assert_close(rows(torch, module, x), net.feedforward(x), "float64")


def unreadable(torch):
    nn = torch.nn
    return [
        (nn.Linear(3, 2), TypeError, "from_torch reads a torch.nn.Sequential of Linear and activation modules; "
                                     "got Linear"),
        (nn.Sequential(nn.Linear(3, 4), nn.Dropout(), nn.Linear(4, 2)), TypeError,
         "module[1] is a Dropout: from_torch reads Linear, Sigmoid, Tanh, ReLU and Identity modules"),
        (nn.Sequential(nn.Linear(3, 4), nn.Softmax(dim=1)), TypeError, "module[1] is a Softmax"),
        (nn.Sequential(nn.Linear(3, 4), nn.Sequential(nn.Sigmoid())), TypeError, "module[1] is a Sequential"),
        (nn.Sequential(nn.Linear(3, 4), nn.Sigmoid(), nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2)), ValueError,
         "the hidden layers must share one activation; layer 2 has 'sigmoid', layer 3 'relu'"),
        (nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)), ValueError,
         "hidden layer 2 has no activation: a network's hidden layers take Sigmoid, Tanh, ReLU"),
        (nn.Sequential(nn.Linear(3, 4), nn.Sigmoid(), nn.Linear(5, 2)), ValueError,
         "the Linear of layer 3 takes 5 inputs but layer 2 has 4 units: the widths do not chain"),
        (nn.Sequential(nn.Sigmoid(), nn.Linear(3, 2)), ValueError,
         "module[0] (Sigmoid) must follow a Linear: from_torch reads Linear modules, each followed by at most one "
         "activation"),
        (nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Tanh()), ValueError, "module[2] (Tanh) must follow a Linear"),
        (nn.Sequential(), ValueError, "the module holds no Linear layer: from_torch needs at least one"),
        (nn.Sequential(nn.Identity()), ValueError, "the module holds no Linear layer"),
    ]


@pytest.mark.parametrize("case", range(11))
def test_a_module_from_torch_cannot_read_is_refused_saying_why(torch, case):
    module, error, message = unreadable(torch)[case]
    with pytest.raises(error) as info:
        MLP.from_torch(module, backend="numpy")
    assert message in str(info.value)


def test_from_torch_refuses_what_the_network_refuses(torch):
    regression = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match="cost 'cross_entropy' needs output_activation 'sigmoid'; got 'identity'"):
        MLP.from_torch(regression, cost="cross_entropy", backend="numpy")
    with torch.no_grad():
        regression[2].bias[1] = float("nan")
    with pytest.raises(ValueError, match=r"biases of layer 3 contains NaN or Inf \(as float32\)"):
        MLP.from_torch(regression, backend="numpy")


def test_without_torch_both_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    extra = "pip install 'leapfrog_gpu[torch]'"
    with MLP([3, 2], backend="numpy") as net:
        with pytest.raises(ImportError, match=r"PyTorch is not installed; it is an optional extra of leapfrog_gpu: "
                                              r"pip install 'leapfrog_gpu\[torch\]'"):
            net.to_torch()
    with pytest.raises(ImportError) as info:
        MLP.from_torch(object(), backend="numpy")
    assert extra in str(info.value)
