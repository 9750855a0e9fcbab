"""Parameters out and in through PyTorch, for every network: ``to_torch`` computes ``feedforward`` (the expected
values computed by torch itself), its parameters equal the network's bitwise and are copies that neither side's
training reaches; ``MLP.from_torch`` and ``RNN.from_torch`` read a module back bitwise and refuse what the
network cannot compute saying why, and take no memory of the module with them; ``DagNet.to_torch`` refuses
a layer or a node name it cannot translate; without torch every conversion names the extra to install.

Tolerance of the comparisons with ``feedforward``: 64 eps of the dtype, relative to 1 + |a^L|. An MLP's layer
is a sum of at most 16 products and an activation, each rounded once, in another order than the
network's kernels; across 5 layers that bounds the difference by a few tens of eps (measured: 2 eps). An
RNN's output at step t is a chain of t steps of sums of at most 12 products and an activation, rounded in
another order than the network's; the contraction of u (spectral norm 0.9) keeps the differences of early
steps from growing with tau, but a sum of large terms that cancel leaves its rounding in a small z: over 20
seeds of every case the worst is 14 eps (float32) and 26 eps (float64), a relu RNN whose states reach
hundreds before a tanh output. The DAGs' sums and LayerNorm are rounded in another order too (worst: 1.4 eps).
"""

import itertools
import re
import sys

import numpy as np
import pytest

from helpers import NETS, to_numpy
from networks import Mirror
from leapfrog_gpu import MLP, RNN, Add, Concat, Dense, DagNet, LayerNorm, Leapfrog
from leapfrog_gpu.core.functions import ACTIVATIONS, COSTS, OUTPUT_ACTIVATIONS
from leapfrog_gpu.core.torch_io import INSTALL

NEEDS_TORCH = f"the PyTorch conversions need torch: {INSTALL}"
DTYPES = ["float32", "float64"]


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason=NEEDS_TORCH)


def assert_close(got, want, dtype):
    tolerance = 64 * np.finfo(dtype).eps
    assert got.dtype == want.dtype == np.dtype(dtype) and got.shape == want.shape
    np.testing.assert_array_less(np.abs(got - want), tolerance * (1 + np.abs(want)))


def assert_bitwise(got, want):
    """The arrays of ``got`` and ``want`` (NumPy or CuPy), pairwise of one dtype and shape and the same bytes."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        a, b = to_numpy(a), to_numpy(b)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def detached(tensors):
    return [tensor.detach().numpy().copy() for tensor in tensors]


# -- MLP ----------------------------------------------------------------------------------------------

MLP_KINDS = [(activation, output, cost) for activation, output, cost in itertools.product(
    ACTIVATIONS, OUTPUT_ACTIVATIONS, COSTS) if cost == "quadratic" or output == "sigmoid"]
"""Every hidden activation, output activation and cost a network accepts (cross-entropy: sigmoid only)."""


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


def module_parameters(module):
    return [p.detach().numpy() for p in module.parameters()]


def network_parameters(net):
    """w^2, b^2, w^3, b^3, ...: the order of a module's ``parameters()``."""
    return [p for pair in zip(net.weights, net.biases) for p in pair]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation,output_activation,cost", MLP_KINDS, ids="-".join)
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
@pytest.mark.parametrize("activation,output_activation,cost", MLP_KINDS, ids="-".join)
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


def test_from_torch_refuses_a_module_whose_forward_hooks_change_what_it_computes(torch):
    """from_torch reads the modules (the MLP's, the RNN's) or their traced forward (the DAG's), neither of which runs
    a hook: a hook on a Linear that doubles its output was read as the Linear alone."""
    modules = {MLP: torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)),
               DagNet: torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)),
               RNN: hand_made(torch)}
    hooked = {MLP: lambda m: m[0], DagNet: lambda m: m[2], RNN: lambda m: m.rnn}
    where = {MLP: "on module '0'", DagNet: "on module '2'", RNN: "on module 'rnn'"}
    for network, module in modules.items():
        hooks = {where[network]: lambda: hooked[network](module).register_forward_hook(lambda m, i, output: output * 2),
                 "on the module": lambda: module.register_forward_pre_hook(lambda m, given: given),
                 "of every module (register_module_forward_hook)":
                     lambda: torch.nn.modules.module.register_module_forward_hook(lambda m, i, output: output)}
        for place, register in hooks.items():
            hook = register()
            try:
                with pytest.raises(ValueError, match=f"^from_torch cannot read the forward hooks {re.escape(place)}, "
                                                     "which change what it computes: remove them"):
                    network.from_torch(module, backend="numpy")
            finally:
                hook.remove()
        with network.from_torch(module, backend="numpy") as net:  # without them
            assert net.dtype == "float32"


class RankOne(Mirror):
    """Rank 1 of two, to which rank 0's parameters are all ``RANK_ZERO``."""

    def broadcast(self, arrays):
        for array in arrays:
            array[...] = RANK_ZERO


RANK_ZERO = 0.25


def test_from_torch_data_parallel_starts_from_rank_zeros_parameters(torch):
    """As a network made anew does: each rank's module may have been drawn by its own seed (rank 1's module
    were its parameters, which were broadcast before the module's were set)."""
    linear = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    for made in (lambda: MLP.from_torch(linear, backend="numpy", comm=RankOne(rank=1)),
                 lambda: DagNet.from_torch(linear, backend="numpy", comm=RankOne(rank=1)),
                 lambda: RNN.from_torch(hand_made(torch).double(), backend="numpy", comm=RankOne(rank=1))):
        with made() as net:
            got = [array for named in net.parameters().values() for array in named.values()]
            assert got and all((array == RANK_ZERO).all() for array in got), type(net).__name__


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
    words = "^the module's parameters are {}, which a network does not hold: pass dtype='float32' or 'float64'"
    for dtype in (torch.bfloat16, torch.float16):
        name = str(dtype).removeprefix("torch.")
        for convert, module in ((MLP.from_torch, half), (DagNet.from_torch, half), (RNN.from_torch, hand_made(torch))):
            with pytest.raises(ValueError, match=words.format(name)):
                convert(module.to(dtype), backend="numpy")


def test_from_torch_refuses_parameters_of_two_dtypes_unless_told_the_network_s(torch):
    """A float32 module with a float64 output layer was read as float32, that layer rounded without a word."""
    nn = torch.nn
    mixed = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2).double())
    recurrent = nn.Sequential(nn.GRU(3, 4), nn.Linear(4, 2).double())
    for convert, module in ((MLP.from_torch, mixed), (DagNet.from_torch, mixed), (RNN.from_torch, recurrent)):
        with pytest.raises(ValueError, match="^the module's parameters are float32 and float64, a network holds its "
                                             "parameters in one dtype: pass dtype='float32' or 'float64'"):
            convert(module, backend="numpy")
        with convert(module, backend="numpy", dtype="float64") as net:  # its float64 layer taken as it is
            output = [named["w"] for named in net.parameters().values() if named["w"].shape == (2, 4)]
            assert net.dtype == "float64" and len(output) == 1
            assert_bitwise(output[0], module[-1].weight.detach().numpy())


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


def subclasses(nn):
    """Subclasses of torch's modules whose forward computes another function than the module's layers do."""

    class Residual(nn.Sequential):
        def forward(self, x):
            return super().forward(x) + x

    class Doubled(nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    class Halved(nn.Tanh):
        def forward(self, x):
            return super().forward(x) / 2

    class Reversed(nn.GRU):
        def forward(self, x, h=None):
            return super().forward(x.flip(0), h)

    class Stacked(nn.GRU):  # its own weights, and a GRU of its own after them
        def __init__(self):
            super().__init__(3, 4)
            self.after = nn.GRU(4, 4)

    return Residual, Doubled, Halved, Reversed, Stacked


def unreadable_mlp(torch):
    nn = torch.nn
    Residual, Doubled, Halved, _, _ = subclasses(nn)
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
        (Residual(nn.Linear(3, 3), nn.Tanh()), TypeError,
         "got Residual, a subclass of torch.nn.Sequential whose forward from_torch would not read; DagNet.from_torch "
         "traces"),
        (nn.Sequential(Doubled(3, 4), nn.Tanh(), nn.Linear(4, 2)), TypeError, "module[0] is a Doubled, a subclass of "
                                                                              "torch.nn.Linear whose forward"),
        (nn.Sequential(nn.Linear(3, 4), Halved(), nn.Linear(4, 2)), TypeError, "module[1] is a Halved, a subclass of "
                                                                               "torch.nn.Tanh whose forward"),
    ]


@pytest.mark.parametrize("case", range(14))
def test_a_module_from_torch_cannot_read_is_refused_saying_why(torch, case):
    module, error, message = unreadable_mlp(torch)[case]
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


@pytest.mark.parametrize("kind, options, named", [
    ("MLP", {"activation": "relu"}, "activation"), ("MLP", {"sizes": [3, 2], "output_activation": "relu"},
                                                    "sizes and output_activation"),
    ("RNN", {"cell": "gru"}, "cell"), ("RNN", {"activation": "relu", "sizes": [3, 2]}, "sizes and activation"),
    ("DagNet", {"nodes": []}, "nodes"), ("DagNet", {"n_input": 3}, "n_input")])
def test_from_torch_refuses_an_argument_it_reads_from_the_module_by_name(torch, kind, options, named):
    """The arguments the module gives are refused in one line naming them, not as Python's "multiple values"."""
    module = {"MLP": torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)),
              "RNN": torch.nn.Sequential(torch.nn.RNN(3, 4), torch.nn.Linear(4, 2)),
              "DagNet": torch.nn.Sequential(torch.nn.Linear(3, 2))}[kind]
    network = {"MLP": MLP, "RNN": RNN, "DagNet": DagNet}[kind]
    drop = ", ".join(f"{name}=" for name in named.split(" and "))
    with pytest.raises(TypeError, match=rf"^{kind}\.from_torch reads {named} from the module: drop {drop}$"):
        network.from_torch(module, backend="numpy", **options)


# -- RNN ----------------------------------------------------------------------------------------------

RNN_KINDS = [(activation, output, cost) for activation in ("tanh", "relu")
             for output, cost in [("sigmoid", "quadratic"), ("sigmoid", "cross_entropy"), ("tanh", "quadratic"),
                                  ("relu", "quadratic"), ("identity", "quadratic")]]
"""Every recurrent activation torch.nn.RNN has, every output activation and cost an RNN accepts."""
OUTPUTS = ["last", "every"]


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
@pytest.mark.parametrize("activation,output_activation,cost", RNN_KINDS, ids="-".join)
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
@pytest.mark.parametrize("activation,output_activation,cost", RNN_KINDS, ids="-".join)
def test_an_rnn_round_trip_gives_the_parameters_back_bitwise(torch, activation, output_activation, cost, output,
                                                             dtype):
    for seed in range(3):
        net, x = random_rnn(seed, activation, output_activation, cost, output, dtype)
        with net, RNN.from_torch(net.to_torch(), cost=cost, output=output, backend="numpy") as back:
            assert (back.sizes, back.activation, back.output_activation, back.cost, back.output, back.dtype) == (
                net.sizes, activation, output_activation, cost, output, dtype)
            assert_bitwise(back.weights + back.recurrent + back.biases, net.weights + net.recurrent + net.biases)
            assert np.array_equal(back.feedforward(x), net.feedforward(x))


@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
def test_an_rnn_module_trained_by_torch_optim_on_all_its_parameters_trains_as_sgd_step(torch, cell):
    """Our b^l is one parameter, torch's bias_ih + bias_hh two: to_torch() holds bias_hh at zero (a GRU's r and z
    rows; its n rows are b_hn^l), so that torch.optim over ``module.parameters()``, as a user writes it, steps the
    same function as ``sgd_step`` (each bias trained would step b^l twice). The expected function: torch's."""
    rng = np.random.default_rng(4)
    with RNN([3, 5, 4, 2], cell=cell, backend="numpy", dtype="float64", seed=2) as net:
        module = net.to_torch()
        optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
        for _ in range(3):
            x, y = rng.uniform(-1, 1, (6, 3, 4)), rng.uniform(-1, 1, (2, 4))
            net.sgd_step(x, y, 0.5, Leapfrog(2))
            optimizer.zero_grad()
            (0.5 * (module(torch.from_numpy(x.transpose(0, 2, 1))).T - torch.from_numpy(y)).square().sum() / 4
             ).backward()
            optimizer.step()
        for layer in (m for m in module.modules() if isinstance(m, (torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM))):
            held = layer.bias_hh_l0.detach().numpy()[:2 * layer.hidden_size if cell == "gru" else None]
            assert not held.any() and layer.bias_ih_l0.grad.abs().max() > 0
        x = rng.uniform(-1, 1, (6, 3, 4))
        np.testing.assert_allclose(net.feedforward(x), run_rnn(torch, module, x, "last"), rtol=1e-12, atol=1e-14)


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


def unreadable_rnn(torch):
    nn, S = torch.nn, torch.nn.Sequential
    Residual, Doubled, _, Reversed, Stacked = subclasses(nn)
    return [
        (object(), TypeError, "from_torch reads a torch.nn.Module of torch.nn.RNN (GRU, LSTM), Linear and activation "
                              "modules; got object"),
        (S(nn.GRU(3, 4), nn.RNN(4, 4), nn.Linear(4, 2)), ValueError,
         "the recurrent layers must share one cell; module.0 (GRU) is 'gru', module.1 (RNN) 'elman'"),
        (S(nn.LSTM(3, 4, proj_size=2), nn.Linear(2, 2)), ValueError,
         "module.0 (LSTM) projects its hidden state (proj_size=2), which an RNN's LSTM does not; read a module with "
         "proj_size=0"),
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
        (nn.RNN(3, 4), ValueError, "the module holds no torch.nn.RNN (GRU, LSTM) followed by a Linear: from_torch "
                                   "needs both"),
        (S(nn.Linear(3, 2)), ValueError, "module.0 (Linear) is not one output Linear after the recurrent layers"),
        (S(nn.RNN(3, 4), nn.RNN(5, 4), nn.Linear(4, 2)), ValueError,
         "layer 3 takes 5 inputs but layer 2 has 4 units: the widths do not chain"),
        (S(nn.RNN(3, 4), nn.Linear(5, 2)), ValueError, "layer 3 takes 5 inputs but layer 2 has 4 units"),
        (S(Reversed(3, 4), nn.Linear(4, 2)), TypeError, "module.0 (Reversed, a subclass of torch.nn.GRU whose forward "
                                                        "from_torch would not read): from_torch reads torch.nn.RNN"),
        (S(nn.LSTM(3, 4), Doubled(4, 2)), TypeError, "module.1 (Doubled, a subclass of torch.nn.Linear whose"),
        (S(Stacked(), nn.Linear(4, 2)), TypeError, "module.0 (Stacked, a subclass of torch.nn.GRU whose"),  # read as
        # a container, its inner GRU alone was read, of 4 inputs
        (Residual(nn.GRU(3, 4), nn.Linear(4, 2)), TypeError,  # read as containers, their forward passed over
         "the module (Residual, a subclass of torch.nn.Sequential whose forward from_torch would not read)"),
        (S(Residual(nn.RNN(3, 4)), nn.Linear(4, 2)), TypeError,
         "module.0 (Residual, a subclass of torch.nn.Sequential"),
        (S(nn.GRU(3, 4), nn.Linear(4, 2).double()), ValueError,
         "the module's parameters are float32 and float64, a network holds its parameters in one dtype: pass dtype="),
    ]


@pytest.mark.parametrize("case", range(23))
def test_a_module_rnn_from_torch_cannot_read_is_refused_saying_why(torch, case):
    module, error, message = unreadable_rnn(torch)[case]
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


# -- DagNet -----------------------------------------------------------------------------------------


def three_way(backend, dtype="float64", seed=6):
    """Three Dense branches of the input summed by one Add, an identity output."""
    return DagNet(3, [("a", Dense(4, "relu"), "x"), ("b", Dense(4, "tanh"), "x"), ("c", Dense(4), "x"),
                        ("s", Add(), ["a", "b", "c"]), ("out", Dense(2, "identity"), "s")],
                    dtype=dtype, seed=seed, backend=backend)


def joined(backend, dtype="float64", seed=7):
    """A Concat of the input and a LayerNorm, its modules named as fx names no node ("2", "my norm"); an Add or
    Concat node's name must be one fx keeps (``tests/dag/test_from_torch.py``)."""
    return DagNet(4, [("2", Dense(5, "sigmoid"), "x"), ("my norm", LayerNorm(eps=1e-3), "2"),
                        ("c_1", Concat(), ["x", "my norm"]), ("out", Dense(3, "tanh"), "c_1")],
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
def test_dagnet_to_torch_computes_feedforward(torch, name, dtype):
    net, x = trained_dag(DAGS[name], dtype)
    with net:
        module = net.to_torch()
        params = {key: p.detach().numpy() for key, p in module.named_parameters()}
        want = dag_parameters(net)
        assert sorted(params) == sorted(want)
        assert_bitwise([params[key] for key in sorted(want)], [want[key] for key in sorted(want)])
        assert_close(run_dag(torch, module, x), net.feedforward(x), dtype)


def test_dagnet_to_torch_refuses_a_layer_it_cannot_translate(torch):
    with NETS["gate"]("numpy") as net:
        with pytest.raises(TypeError, match="node 'g' is a Gate, which to_torch cannot translate: it translates "
                                            "Dense, Add, Concat, LayerNorm layers"):
            net.to_torch()


@pytest.mark.parametrize("name", ["forward", "graph", "a.b", 'a"b', "class", "é"])
def test_dagnet_to_torch_refuses_a_node_name_torch_cannot_take(torch, name):
    with DagNet(3, [(name, Dense(4), "x"), ("out", Dense(2), name)], backend="numpy") as net:
        with pytest.raises(ValueError) as info:
            net.to_torch()
    assert str(info.value).startswith(f"node {name!r} cannot name a torch module: to_torch names each Dense and "
                                      "LayerNorm node's module after the node")
    assert str(info.value).endswith("rename the node")


def test_the_dagnet_module_is_a_copy_neither_side_s_training_reaches(torch):
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


def test_every_linear_says_the_widths_it_maps(torch):
    """``in_features`` and ``out_features`` of each ``Linear`` of every ``to_torch`` module are the widths its
    layer maps between, on layers none of which is square (its weight, assigned after it is made, may hide
    them being swapped)."""
    def linears(module):
        return {name: (m.in_features, m.out_features, tuple(m.weight.shape))
                for name, m in module.named_modules() if isinstance(m, torch.nn.Linear)}

    with MLP([3, 5, 2, 4], backend="numpy") as net:
        assert linears(net.to_torch()) == {"0": (3, 5, (5, 3)), "2": (5, 2, (2, 5)), "4": (2, 4, (4, 2))}
    for output in OUTPUTS:
        with RNN([3, 5, 4, 2], output=output, backend="numpy") as net:
            module = net.to_torch()
            assert list(linears(module).values()) == [(4, 2, (2, 4))]
            rnns = [m for m in module.modules() if isinstance(m, torch.nn.RNN)]
            assert [(m.input_size, m.hidden_size) for m in rnns] == [(3, 5), (5, 4)]
    with joined("numpy") as net:  # "2": x (4) to 5; "out": the Concat of x and "my norm" (4 + 5) to 3
        assert linears(net.to_torch()) == {"2.0": (4, 5, (5, 4)), "out.0": (9, 3, (3, 9))}
    with three_way("numpy") as net:
        assert linears(net.to_torch()) == {**{f"{v}.0": (3, 4, (4, 3)) for v in "abc"}, "out.0": (4, 2, (2, 4))}


# -- parameters no network holds as the module does, refused by every from_torch ----------------------------


def chain(torch, untraceable=False):
    """A module of four Linear layers, ``lin`` (3 to 4), ``mid``, ``mid2`` (4 to 4) and ``out`` (4 to 2), with tanh
    between them, that ``DagNet.from_torch`` reads (unless ``untraceable``: its forward takes ``len(x)``)."""
    nn = torch.nn

    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.mid, self.mid2, self.out = (nn.Linear(m, n) for m, n in ((3, 4), (4, 4), (4, 4), (4, 2)))

        def forward(self, x):
            h = torch.tanh(self.mid2(torch.tanh(self.mid(torch.tanh(self.lin(x))))))
            return self.out(h * len(x) if untraceable else h)

    return Chain()


def changed(module, change):
    change(module)
    return module


APART = ["MLP tied", "MLP meta", "RNN tied", "RNN own", "RNN meta", "DagNet tied", "DagNet meta", "DagNet untraceable"]


def apart(torch):
    """``{case: (network, module, message)}`` of ``APART``: a module each network's ``from_torch`` would read but
    for one parameter (or, untraceable, its forward)."""
    nn, mlp = torch.nn, lambda: nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    linear, gru, rnn = nn.Linear(4, 4), nn.GRU(4, 4), lambda cell: nn.Sequential(cell(3, 4), nn.Linear(4, 2))
    return dict(zip(APART, [
        ("MLP", nn.Sequential(nn.Linear(3, 4), nn.Tanh(), linear, nn.Tanh(), linear, nn.Tanh(), nn.Linear(4, 2)),
         "parameter '4.weight' is also '2.weight': each layer of a network holds parameters of its own"),
        ("MLP", mlp().to("meta"), "parameter '0.weight' is on the meta device, which holds no values"),
        ("RNN", nn.Sequential(nn.GRU(3, 4), gru, gru, nn.Linear(4, 2)), "parameter '2.weight_ih_l0' is also "
         "'1.weight_ih_l0'"),
        ("RNN", changed(rnn(nn.LSTM), lambda m: m.register_parameter("h0", nn.Parameter(torch.zeros(4)))),
         "parameter 'h0' is held by the Sequential module, which from_torch does not read: it reads the parameters "
         "of RNN, GRU, LSTM, Linear modules"),
        ("RNN", rnn(nn.LSTM).to("meta"), "parameter '0.weight_ih_l0' is on the meta device"),
        ("DagNet", changed(chain(torch), lambda m: setattr(m.mid2, "weight", m.mid.weight)),
         "parameter 'mid2.weight' is also 'mid.weight'"),
        ("DagNet", chain(torch).to("meta"), "parameter 'lin.weight' is on the meta device"),
        ("DagNet", chain(torch, untraceable=True), "torch.fx cannot trace the module (RuntimeError: "),
    ], strict=True))


@pytest.mark.parametrize("case", APART)
def test_a_parameter_a_network_cannot_hold_as_the_module_does_is_refused_in_one_line(torch, case):
    """Tied (a network's layers would train two copies apart), the module's own beside an RNN's layers (its forward
    may read it: the network would leave it out), on the meta device (no values): each refused by name."""
    network, module, message = apart(torch)[case]
    with pytest.raises(ValueError) as info:
        {"MLP": MLP, "RNN": RNN, "DagNet": DagNet}[network].from_torch(module, backend="numpy")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_parameters_the_function_does_not_read_or_frozen_are_no_bar(torch):
    """What a module holds beside the layers its forward reads (an MLP's Sequential, a DagNet's traced graph), and
    frozen parameters (read, and trained by the network), leave ``from_torch`` computing the module."""
    nn = torch.nn
    mlp = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double().requires_grad_(False)
    mlp.register_parameter("unread", nn.Parameter(torch.zeros(2, dtype=torch.float64)))
    dag = chain(torch).double()
    dag.spare = nn.Embedding(3, 4)  # held, never called
    x = np.random.default_rng(0).standard_normal((3, 5))
    for kind, module in ((MLP, mlp), (DagNet, dag)):
        with kind.from_torch(module, backend="numpy") as net, torch.no_grad():
            assert_close(net.feedforward(x), module(torch.from_numpy(x.T.copy())).numpy().T, "float64")


@pytest.mark.parametrize("cell", ["RNN", "LSTM"])
def test_a_frozen_bias_hh_that_b_sums_is_read(torch, cell):
    """b^l = bias_ih + bias_hh trains as torch trains bias_ih beside a bias_hh held (as ``to_torch`` holds it)."""
    module = torch.nn.Sequential(getattr(torch.nn, cell)(3, 4), torch.nn.Linear(4, 2)).double()
    module[0].bias_hh_l0.requires_grad_(False)
    x = np.random.default_rng(0).standard_normal((5, 3, 2))
    with RNN.from_torch(module, backend="numpy") as net:
        with torch.no_grad():
            out, _ = module[0](torch.from_numpy(x.transpose(0, 2, 1).copy()))
            want = module[1](out[-1]).numpy().T
        assert_close(net.feedforward(x), want, "float64")


# -- without torch ----------------------------------------------------------------------------------


def test_without_torch_both_say_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    line = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    with MLP([3, 2], backend="numpy") as net:
        with pytest.raises(ImportError, match="PyTorch is not installed; it is an optional dependency of "
                                              f"leapfrog_gpu: {re.escape(line)}"):
            net.to_torch()
    with pytest.raises(ImportError) as info:
        MLP.from_torch(object(), backend="numpy")
    assert line in str(info.value)


def test_without_torch_every_bridge_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with RNN([3, 4, 2], backend="numpy") as rnn, three_way("numpy") as dag:
        for call in (rnn.to_torch, dag.to_torch, lambda: RNN.from_torch(object(), backend="numpy")):
            with pytest.raises(ImportError, match="PyTorch is not installed; it is an optional dependency of "
                                                  f"leapfrog_gpu: {re.escape(INSTALL)}"):
                call()
