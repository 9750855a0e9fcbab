"""``DagNet.from_torch``: hand-written torch modules read as DAGs compute what torch computes (outputs within
1e-12 and gradients within 1e-10 of torch's autograd, relative to 1 + |torch|, in float64), both round trips
give parameters and outputs back bit for bit, and what a DagNet cannot compute is refused on one line that
names the node and its op.

Tolerances: an output is a chain of at most 6 layers of sums of at most 13 products, activations and
LayerNorms, rounded in another order than torch's, which bounds the difference by a few tens of eps (2.2e-16);
the gradients add the backward chain and the sum over 7 samples. Over 20 seeds of every module the worst seen
is 1.0e-15 for the outputs and 6.0e-15 for the gradients (a LayerNorm's): the bounds leave room, and a wrong
eps, bias, activation or order of the inputs misses them by far.
"""

import re
import sys

import numpy as np
import pytest

from leapfrog_gpu.core.torch_io import INSTALL

torch = pytest.importorskip("torch", reason=f"DagNet.from_torch reads torch modules: {INSTALL}", exc_type=ImportError)

from helpers import NETS, to_numpy
from leapfrog_gpu import Add, Concat, DagNet, Dense, LayerNorm

nn, F = torch.nn, torch.nn.functional


def randomized(module, seed):
    """``module`` in float64, every parameter drawn from U(-1, 1) (LayerNorm's ones and zeros included)."""
    generator = torch.Generator().manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand(p.shape, generator=generator, dtype=p.dtype) * 2 - 1)
    return module


class Residual(nn.Module):
    """A residual MLP: a relu layer, a block (Linear, Tanh, Linear) added to its input, a sigmoid output."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(5, 8)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        h = h + self.block(h)
        return torch.sigmoid(self.out(h))


class Branches(nn.Module):
    """Two branches of the input and the input itself, concatenated; one ReLU module serves both branches."""

    def __init__(self):
        super().__init__()
        self.left, self.right = nn.Linear(4, 6), nn.Linear(4, 3, bias=False)
        self.act, self.out = nn.ReLU(), nn.Linear(13, 2)

    def forward(self, x):
        return self.out(torch.cat((self.act(self.left(x)), x, self.act(self.right(x))), dim=1))


class Normed(nn.Module):
    """LayerNorms with and without their affine parameters, a sum by torch.add, tanh as a method."""

    def __init__(self):
        super().__init__()
        self.lin, self.norm = nn.Linear(6, 7), nn.LayerNorm(7, eps=1e-3)
        self.plain, self.out = nn.LayerNorm(7, elementwise_affine=False), nn.Linear(7, 4)

    def forward(self, x):
        h = F.relu(self.lin(x), inplace=True)
        return self.out(torch.add(self.norm(h), self.plain(h))).tanh()


class Mixed(nn.Module):
    """Activations as functionals, methods, torch functions and modules, an Identity, and a sum of three."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.d, self.e = (nn.Linear(n, m) for n, m in [(3, 5), (5, 5), (5, 5), (5, 5), (5, 2)])
        self.skip, self.sigmoid = nn.Identity(), nn.Sigmoid()

    def forward(self, x):
        h = F.sigmoid(self.a(x))
        h = self.b(h).relu()
        h = self.skip(torch.tanh(self.c(h)))
        return self.e(h + self.sigmoid(self.d(h)) + h)


class Doubled(nn.Module):
    """A sum read twice by the next sum, which is not one sum of three (its first term read twice), beside a Linear
    called ``add`` (the sum's own fx name): nodes "a", "b", "add", "add_2" (the Linear), "add_3" and "out"."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.add, self.out = (nn.Linear(n, m) for n, m in [(3, 4), (3, 4), (3, 4), (4, 2)])

    def forward(self, x):
        h = self.a(x) + self.b(x)
        return self.out(h + h + self.add(x))


class Keywords(nn.Module):
    """Tensors given by keyword: ``input=`` to modules (an Identity passed over among them) and activations (torch's
    and functional ones), ``other=`` and ``alpha=1`` to sums (torch.add and the method)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(n, m) for n, m in [(3, 4), (4, 4), (4, 4), (4, 2)])
        self.skip = nn.Identity()

    def forward(self, x):
        h = torch.sigmoid(input=self.a(input=x))
        h = torch.add(F.relu(input=self.b(h), inplace=False), other=h, alpha=1)
        return self.d(input=h.add(other=torch.tanh(input=self.skip(input=self.c(h)))))


def sequential():
    """A torch.nn.Sequential, traced as it is: nodes "0", "2", "4" and "5"."""
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 6), nn.Tanh(), nn.LayerNorm(6), nn.Linear(6, 3))


CASES = {
    "residual": (Residual, {"inp": "inp", "block_0": "block.0", "block_2": "block.2", "out": "out"}),
    "branches": (Branches, {"left": "left", "right": "right", "out": "out"}),
    "normed": (Normed, {"lin": "lin", "norm": "norm", "plain": "plain", "out": "out"}),
    "mixed": (Mixed, {v: v for v in "abcde"}),
    "sequential": (sequential, {"0": "0", "2": "2", "4": "4", "5": "5"}),
    "doubled": (Doubled, {"a": "a", "b": "b", "add_2": "add", "out": "out"}),
    "keywords": (Keywords, {v: v for v in "abcd"}),
}
"""Each hand-written module and where each of its network's nodes with parameters sits in it."""


def case(name, seed=0):
    """The module of ``CASES[name]``, randomized, where its nodes sit, and a batch of 7 columns for it."""
    make, paths = CASES[name]
    module = randomized(make(), seed)
    x = np.random.default_rng(seed).uniform(-1, 1, (next(module.parameters()).shape[1], 7))
    return module, paths, x


def rows(module, x):
    """``module`` applied to the columns of ``x`` (n_1, B), returned as columns."""
    with torch.no_grad():
        return module(torch.from_numpy(np.ascontiguousarray(x.T))).numpy().T


NAMES = {nn.Linear: {"weight": "w", "bias": "b"}, nn.LayerNorm: {"weight": "gamma", "bias": "beta"}}
"""The network's name of each parameter of a Linear and of a LayerNorm."""


def module_tensors(part):
    """``{name: array}`` of the Linear or LayerNorm ``part`` (a Sequential's Linear), as the network names them,
    with what the network holds where the module has none: zeros for a bias, ones for a LayerNorm's weight."""
    if isinstance(part, nn.Sequential):
        part = part[0]
    n = part.out_features if isinstance(part, nn.Linear) else part.normalized_shape[0]
    held = {"weight": np.ones(n), "bias": np.zeros(n)}
    return {NAMES[type(part)][key]: held[key] if p is None else p.detach().numpy()
            for key, p in (("weight", part.weight), ("bias", part.bias))}


def assert_bitwise(got, want):
    got, want = to_numpy(got), to_numpy(want)
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def worst(got, want):
    return float(np.max(np.abs(got - want) / (1 + np.abs(want))))


@pytest.mark.parametrize("name", CASES)
def test_from_torch_computes_the_module(name):
    module, paths, x = case(name)
    want = rows(module, x)
    with DagNet.from_torch(module, backend="numpy") as net:
        assert net.dtype == "float64" and net.nodes == list(paths)
        assert worst(net.feedforward(x), want) < 1e-12


@pytest.mark.parametrize("name", CASES)
def test_from_torch_gradients_are_torch_autograd_s(name):
    """C = 1/2 sum over the batch of |a - y|^2, whose gradients the network sums over the batch."""
    module, paths, x = case(name, seed=1)
    with DagNet.from_torch(module, backend="numpy") as net:
        y = np.random.default_rng(2).uniform(0.05, 0.95, (net.n[net.output], x.shape[1]))
        cost = 0.5 * ((module(torch.from_numpy(np.ascontiguousarray(x.T))) - torch.from_numpy(y.T)) ** 2).sum()
        cost.backward()
        got = net.gradients(x, y)
    for v, path in paths.items():
        part = module.get_submodule(path)
        for key, p in part.named_parameters():
            assert worst(got[v][NAMES[type(part)][key]], p.grad.numpy()) < 1e-10, (v, key)


@pytest.mark.parametrize("name", CASES)
def test_from_torch_then_to_torch_gives_the_module_back_bitwise(name):
    module, paths, x = case(name, seed=3)
    with DagNet.from_torch(module, backend="numpy") as net:
        back = net.to_torch()
    for v, path in paths.items():
        want, got = module_tensors(module.get_submodule(path)), module_tensors(back.get_submodule(v))
        assert sorted(got) == sorted(want)
        for key in want:
            assert_bitwise(got[key], want[key])
    assert_bitwise(rows(back, x), rows(module, x))


def input_through_joins(backend, dtype="float64", seed=9):
    """The input read by Concats and an Add, and by no Linear or LayerNorm alone: its width is found through them
    (from the Linear that reads its concatenation with itself)."""
    return DagNet(4, [("twice", Concat(), ["x", "x"]), ("h", Dense(4, "tanh"), "twice"), ("s", Add(), ["x", "h"]),
                      ("c", Concat(), ["x", "s", "x"]), ("norm", LayerNorm(), "c"), ("out", Dense(2), "norm")],
                  dtype=dtype, seed=seed, backend=backend)


def layer_norm_dag(backend, dtype="float64", seed=9):
    """A three-way sum and a LayerNorm of eps 1e-3."""
    return DagNet(4, [("a", Dense(5, "relu"), "x"), ("b", Dense(5, "tanh"), "x"), ("c", Dense(5), "x"),
                      ("s", Add(), ["a", "b", "c"]), ("norm", LayerNorm(eps=1e-3), "s"),
                      ("out", Dense(2, "sigmoid"), "norm")], dtype=dtype, seed=seed, backend=backend)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make", [NETS["residual"], NETS["densenet"], layer_norm_dag, input_through_joins],
                         ids=["residual", "densenet", "layer_norm", "input_through_joins"])
def test_to_torch_then_from_torch_gives_the_network_back_bitwise(make, dtype):
    rng = np.random.default_rng(4)
    with make("numpy", dtype=dtype) as net:
        x = rng.uniform(-1, 1, (net.n["x"], 6)).astype(dtype)
        net.sgd_step(x, rng.uniform(0.05, 0.95, (net.n[net.output], 6)).astype(dtype), 0.5)
        with DagNet.from_torch(net.to_torch(), backend="numpy") as back:
            assert back.dtype == dtype
            assert [(v, repr(back.layer[v]), back.inputs[v]) for v in back.order] == \
                [(v, repr(net.layer[v]), net.inputs[v]) for v in net.order]
            want, got = net.parameters(), back.parameters()
            assert sorted(got) == sorted(want)
            for v in want:
                for key in want[v]:
                    assert_bitwise(got[v][key], want[v][key])
            assert_bitwise(back.feedforward(x), net.feedforward(x))


def awkward_names(backend):
    """Names fx would change or that its code reads, where to_torch names modules after them ("self", "2",
    "a-b", "Self"), an Add named "add" after a sum of three (whose inner sum fx would call "add"), an Add
    named "_2" (fx's name for module "2") and a Concat named "module"."""
    return DagNet(3, [("self", Dense(4, "tanh"), "x"), ("2", Dense(4, "relu"), "self"), ("a-b", Dense(4), "x"),
                      ("add", Add(), ["2", "self", "a-b"]), ("_2", Add(), ["self", "add"]),
                      ("Self", Dense(4, "sigmoid"), "_2"), ("module", Concat(), ["Self", "x"]),
                      ("out", Dense(2, "tanh"), "module")], dtype="float64", seed=5, backend=backend)


def test_to_torch_then_from_torch_gives_back_nodes_whose_names_fx_would_change():
    x = np.random.default_rng(6).uniform(-1, 1, (3, 5))
    with awkward_names("numpy") as net:
        module = net.to_torch()
        assert worst(rows(module, x), net.feedforward(x)) < 1e-12
        with DagNet.from_torch(module, backend="numpy") as back:
            assert [(v, repr(back.layer[v]), back.inputs[v]) for v in back.order] == \
                [(v, repr(net.layer[v]), net.inputs[v]) for v in net.order]
            assert_bitwise(back.feedforward(x), net.feedforward(x))


@pytest.mark.parametrize("layer", [Add(), Concat()], ids=repr)
@pytest.mark.parametrize("name", ["self", "class", "1", "a-b", "é", "torch", "getattr"])
def test_to_torch_refuses_an_add_or_concat_name_fx_would_change(layer, name):
    """The forward's own argument, a keyword, a leading digit, a character no identifier has, a letter outside
    ASCII, a name fx reserves for its code, a builtin: each refused, naming the node, before a module is made."""
    with DagNet(3, [("h", Dense(3), "x"), (name, layer, ["h", "x"]), ("out", Dense(2), name)],
                backend="numpy") as net:
        with pytest.raises(ValueError) as info:
            net.to_torch()
    assert str(info.value) == (f"node {name!r} cannot name a torch.fx node: to_torch names each Add and Concat "
                               "node's fx node after the node, which needs an ASCII Python identifier, not a keyword, "
                               "a builtin, 'self' nor a name fx reserves such as 'torch'; rename the node")


class SubmoduleX(nn.Module):
    """A Linear registered as ``x``, the input named ``inp``: fx names the Linear's call ``"x"``."""

    def __init__(self):
        super().__init__()
        self.x, self.out = nn.Linear(3, 3), nn.Linear(3, 2)

    def forward(self, inp):
        return self.out(torch.tanh(self.x(inp)))


class SubmoduleXOfInputX(SubmoduleX):
    """The same, the input named ``x``: fx names the Linear's call ``"x_1"``."""

    def forward(self, x):
        return self.out(torch.tanh(self.x(x)))


def test_from_torch_refuses_a_submodule_x_whose_node_would_be_the_input():
    with pytest.raises(ValueError, match=r"^node 'x' \(call_module x: Linear\) would be the node 'x', the name a "
                                         "DagNet keeps for its input: rename the submodule$"):
        DagNet.from_torch(SubmoduleX(), backend="numpy")
    module = randomized(SubmoduleXOfInputX(), 7)
    x = np.random.default_rng(7).uniform(-1, 1, (3, 4))
    with DagNet.from_torch(module, backend="numpy") as net:
        assert net.order == ["x_1", "out"] and worst(net.feedforward(x), rows(module, x)) < 1e-12


def test_from_torch_passes_over_an_identity_between_a_linear_and_its_activation():
    """``Identity`` modules are passed over there too (they were refused: the activation's operand was the Identity's
    output, not the Linear's); one that something else reads is not."""
    module = nn.Sequential(nn.Linear(3, 4), nn.Identity(), nn.ReLU(), nn.Linear(4, 2)).double()
    x = np.random.default_rng(2).uniform(-1, 1, (3, 5))
    with DagNet.from_torch(module, backend="numpy") as net:
        assert [(v, repr(net.layer[v])) for v in net.order] == [("0", "Dense(4, 'relu')"),
                                                                ("3", "Dense(2, 'identity')")]
        assert worst(net.feedforward(x), rows(module, x)) < 1e-15
    read_twice = Calls(lambda m, x: m.out(torch.relu(h := m.i(m.lin(x))) + h), lin=nn.Linear(3, 3), i=nn.Identity(),
                       out=nn.Linear(3, 2))
    with pytest.raises(ValueError, match="^node 'relu' \\(call_function torch.relu\\) applies relu to node 'i'"):
        DagNet.from_torch(read_twice, backend="numpy")


def test_from_torch_names_the_nodes_and_joins_a_sum_of_sums():
    module, _, _ = case("mixed")
    with DagNet.from_torch(module, backend="numpy") as net:
        assert [(v, repr(net.layer[v]), net.inputs[v]) for v in net.order] == [
            ("a", "Dense(5, 'sigmoid')", ["x"]), ("b", "Dense(5, 'relu')", ["a"]), ("c", "Dense(5, 'tanh')", ["b"]),
            ("d", "Dense(5, 'sigmoid')", ["c"]), ("add_1", "Add()", ["c", "d", "c"]),
            ("e", "Dense(2, 'identity')", ["add_1"])]


def test_from_torch_takes_the_module_s_dtype_or_converts_to_the_one_asked_for():
    module = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))  # float32
    with DagNet.from_torch(module, backend="numpy") as net:
        assert net.dtype == "float32"
        assert_bitwise(net.parameters()["0"]["w"], module[0].weight.detach().numpy())
    with DagNet.from_torch(module, dtype="float64", backend="numpy") as net:
        assert net.dtype == "float64"
        assert_bitwise(net.parameters()["2"]["b"], module[2].bias.detach().numpy().astype(np.float64))


def test_from_torch_copies_so_training_the_network_never_writes_the_module():
    module, _, x = case("normed")
    kept = [p.detach().clone() for p in module.parameters()]
    with DagNet.from_torch(module, backend="numpy") as net:
        net.sgd_step(x, np.full((net.n[net.output], x.shape[1]), 0.5), 1.0)
        assert not np.array_equal(net.parameters()["lin"]["w"], kept[0].numpy())
    assert all(torch.equal(p, q) for p, q in zip(module.parameters(), kept))


def test_from_torch_on_the_cupy_backend(standin):
    """The stand-in's arrays have no DLPack: the tensors cross through the host, bit for bit."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    module, paths, x = case("normed")
    with CupyBackend() as cuda, DagNet.from_torch(module, backend=cuda) as net:
        got = net.parameters()
        for v, path in paths.items():
            want = module_tensors(module.get_submodule(path))
            for key in want:
                assert_bitwise(got[v][key], want[key])
        assert worst(to_numpy(net.feedforward(x)), rows(module, x)) < 1e-12


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.out = nn.Conv1d(1, 1, 3), nn.Linear(2, 2)

    def forward(self, x):
        return self.out(self.conv(x))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, y):
        return self.lin(x) + y


class Calls(nn.Module):
    """``forward`` given as a function of the module and x: one module for each refusal."""

    def __init__(self, forward, **parts):
        super().__init__()
        self.call = forward
        for name, part in parts.items():
            self.add_module(name, part)

    def forward(self, x):
        return self.call(self, x)


def calls(forward, **parts):
    return Calls(forward, lin=nn.Linear(3, 3), out=nn.Linear(3, 2), **parts)


def sequential_with(*parts):
    """``to_torch``'s module of a two-layer DAG with node "h" replaced by a Sequential of ``parts``."""
    with DagNet(3, [("h", Dense(3), "x"), ("out", Dense(2), "h")], backend="numpy") as net:
        module = net.to_torch()
    module.h = nn.Sequential(*parts)
    return module


REFUSALS = {
    "conv": (Conv(), "node 'conv' (call_module conv: Conv1d) is not one from_torch reads"),
    "dropout": (calls(lambda m, x: m.out(m.drop(m.lin(x))), drop=nn.Dropout()),
                "node 'drop' (call_module drop: Dropout) is not one from_torch reads"),
    "gelu": (calls(lambda m, x: m.out(F.gelu(m.lin(x)))),
             "node 'gelu' (call_function torch._C._nn.gelu) is not one from_torch reads"),
    "exp": (calls(lambda m, x: m.out(m.lin(x).exp())), "node 'exp' (call_method exp) is not one from_torch reads"),
    "cat along the batch": (calls(lambda m, x: m.out(torch.cat([m.lin(x), x]))),
                            "node 'cat' (call_function torch.cat) concatenates along dim 0, the batch"),
    "cat along dim 2": (calls(lambda m, x: m.out(torch.cat([m.lin(x), x], 2))),
                        "node 'cat' (call_function torch.cat) concatenates along dim 2:"),
    "two inputs": (TwoInputs(), "node 'y' (placeholder y) is a second input: a DagNet has one input"),
    "layer norm of two dims": (calls(lambda m, x: m.out(m.norm(m.lin(x))), norm=nn.LayerNorm((1, 3))),
                               "node 'norm' (call_module norm: LayerNorm) normalizes over 2 dimensions (1, 3)"),
    "activation of a sum": (calls(lambda m, x: m.out(torch.relu(m.lin(x) + x))),
                            "node 'relu' (call_function torch.relu) applies relu to node 'add': a DagNet applies an "
                            "activation only in a Dense node"),
    "activation of the input": (calls(lambda m, x: m.out(m.lin(torch.tanh(x)))),
                                "node 'tanh' (call_function torch.tanh) applies tanh to the input"),
    "activation of an output read elsewhere": (calls(lambda m, x: m.out(torch.relu(h := m.lin(x)) + h)),
                                               "node 'relu' (call_function torch.relu) applies relu to node 'lin': "
                                               "a DagNet applies an activation only in a Dense node, to the output "
                                               "of its Linear that nothing else reads"),
    "a parameter read as an attribute": (calls(lambda m, x: m.out(m.lin(x) @ m.lin.weight)),
                                         "node 'lin_weight' (get_attr lin.weight) is not one from_torch reads"),
    "two activations": (calls(lambda m, x: m.out(torch.tanh(torch.relu(m.lin(x))))),
                        "node 'tanh' (call_function torch.tanh) applies tanh to node 'relu'"),
    "a module called twice": (calls(lambda m, x: m.out(m.lin(x) + torch.relu(m.lin(x)))),
                              "node 'lin_1' (call_module lin: Linear) calls module 'lin' again (node 'lin' called it "
                              "first)"),
    "a sum with a number": (calls(lambda m, x: m.out(m.lin(x) + 1.0)),
                            "node 'add' (call_function operator.add) reads 1.0, not a tensor"),
    "a sum with alpha": (calls(lambda m, x: m.out(torch.add(m.lin(x), x, alpha=2))),
                         "node 'add' (call_function torch.add) takes 2 arguments and keywords ['alpha']"),
    "an activation given out=": (calls(lambda m, x: m.out(torch.sigmoid(m.lin(x), out=None))),
                                 "node 'sigmoid' (call_function torch.sigmoid) takes 1 arguments and keywords ['out']: "
                                 "from_torch reads it called on one tensor alone"),
    "a method's tensor given twice": (calls(lambda m, x: m.out(m.lin(x).relu(input=x))),
                                      "node 'relu' (call_method relu) takes 1 arguments and keywords ['input']: "
                                      "from_torch reads it called on one tensor alone"),
    "a node that leads nowhere": (calls(lambda m, x: (m.lin(x), m.out(x))[1]),
                                  "node 'lin' (call_module lin: Linear) is read by no node and is not the output"),
    "a tuple": (calls(lambda m, x: (m.out(m.lin(x)), x)), "node 'output' (output output) returns a tuple"),
    "a sequential of a dropout": (sequential_with(nn.Linear(3, 3), nn.Dropout()),
                                  "node 'h' (call_module h: Sequential) holds ['Linear', 'Dropout']"),
}


@pytest.mark.parametrize("name", REFUSALS)
def test_what_a_dagnet_cannot_compute_is_refused_naming_the_node_and_its_op(name):
    module, message = REFUSALS[name]
    with pytest.raises(ValueError) as info:
        DagNet.from_torch(module, backend="numpy")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_what_is_not_one_graph_from_one_input_to_one_output_is_refused():
    with pytest.raises(TypeError, match="^from_torch reads a torch.nn.Module or a torch.fx.GraphModule; got list$"):
        DagNet.from_torch([nn.Linear(3, 2)], backend="numpy")
    for alone in (nn.Linear(3, 2), nn.LayerNorm(3)):  # fx traces into its functions; in a Sequential it is read
        with pytest.raises(ValueError, match=rf"^from_torch reads the modules a module calls, and a "
                                             rf"{type(alone).__name__} alone calls none: pass "
                                             r"torch.nn.Sequential\(module\)$"):
            DagNet.from_torch(alone, backend="numpy")
        module = nn.Sequential(alone).double()
        x = np.random.default_rng(3).uniform(-1, 1, (3, 5))
        with DagNet.from_torch(module, backend="numpy") as net:
            assert worst(net.feedforward(x), rows(module, x)) < 1e-12
    with pytest.raises(ValueError, match="^the module returns 'lin', which node 'out' reads: a DagNet's output is a "
                                         "node that no node reads$"):
        DagNet.from_torch(calls(lambda m, x: (h := m.lin(x), m.out(h))[0]), backend="numpy")
    with pytest.raises(ValueError, match="^the module returns its input: a DagNet's output is a node of its own$"):
        DagNet.from_torch(nn.Identity(), backend="numpy")
    with pytest.raises(ValueError, match="^the input's width is not known: from_torch reads it from a Linear or "
                                         "LayerNorm that reads the input, alone or through sums and concatenations$"):
        DagNet.from_torch(Calls(lambda m, x: x + x), backend="numpy")
    concatenated = Calls(lambda m, x: m.out(torch.cat([x, x], 1)), out=nn.Linear(6, 2))
    with DagNet.from_torch(concatenated, backend="numpy") as net:
        assert net.n["x"] == 3  # through the concatenation, which the Linear reads: 2 n = 6


@pytest.mark.parametrize("forward,message", [
    (lambda m, x: m.out(torch.cat([x, x], 1)),
     "node 'out' (call_module out: Linear) reads an input of width 2n and takes 5"),  # 2n = 5: n = 2.5
    (lambda m, x: m.out(torch.cat([x, x, x], 1) + x),
     "node 'add' (call_function operator.add) adds terms of widths 3n and n"),  # 3n = n: n = 0
], ids=["2n=5", "3n=n"])
def test_widths_that_no_input_width_gives_are_refused_as_a_conflict(forward, message):
    """The input's width was "not known" (2n = 5), or 0, which DagNet refused as its n_input (3n = n)."""
    with pytest.raises(ValueError, match=f"^{re.escape(message)}: the widths conflict, no integer width n >= 1 of the "
                                         "input makes them one$"):
        DagNet.from_torch(Calls(forward, out=nn.Linear(5, 2)), backend="numpy")


def test_without_torch_from_torch_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    line = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    with pytest.raises(ImportError, match="PyTorch is not installed; it is an optional dependency of leapfrog_gpu: "
                                          + re.escape(line)):
        DagNet.from_torch(object(), backend="numpy")
