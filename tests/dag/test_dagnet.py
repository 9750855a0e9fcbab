"""DagNet: a chain bitwise the MLP, DAGs against finite differences and PyTorch, the DAG schedules
against the sequential order with the rounds of their formulas, and validation that says what is wrong."""

import gc
import math
import re
import threading

import numpy as np
import pytest

from helpers import (NETS, ForgetsAnInput, Product, batch, central, cli, deep_chain, dense_net, flat, gate_net,
                     parameters)
from helpers import (Drawing, DrawsTooFew, DrawsWide, Gate, NamesTooFew, NoBias, ShortProduct, Sized,
                     SummedOverUnits, residual_net)
from helpers import dag_data as data
from helpers import same_arrays as same
from leapfrog_gpu.core import calibrate
from leapfrog_gpu import MLP, SGD, Adam, Leapfrog, Sequential
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core.handoff import Handoff
from leapfrog_gpu.dag import schedules as dag_schedules
from leapfrog_gpu.dag.schedules import DagDoubling, DagJacobi, LevelSets
from leapfrog_gpu.dag.forward import ForwardJacobi, ForwardNewton
from leapfrog_gpu.dag.network import DagNet, chain, residual
from leapfrog_gpu.dag.blocks import DenseBlock
from leapfrog_gpu.dag.layers import Add, Concat, Dense, Layer, LayerNorm
from leapfrog_gpu.core.torch_io import INSTALL

SIZES = [9, 17, 5, 13, 7, 3]
NARROW = [5, 9, 1, 6, 3]  # a hidden layer of width 1: the product (5) of the node above it has one row
ETA = 0.5


def chain_pair(backend, dtype="float32", cost="quadratic", sizes=SIZES):
    mlp = MLP(sizes, cost=cost, dtype=dtype, seed=11, backend=backend)
    net = chain(sizes, cost=cost, dtype=dtype, seed=11, backend=backend)
    return mlp, net


@pytest.mark.parametrize("cost", ["quadratic", "cross_entropy"])
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Leapfrog(3, fused=True)], ids=repr)
@pytest.mark.parametrize("size", [1, 7])
@pytest.mark.parametrize("sizes", [SIZES, NARROW], ids=["wide", "narrow"])
def test_a_chain_is_bitwise_the_mlp(sizes, schedule, size, cost):
    """A Dense node reading a layer of width 1 made its product (5) by NumPy's matmul, which sums a one-row product
    in another order than the MLP's BLAS call: its gradients differed from the MLP's in the last bit."""
    with NumpyBackend(mode="threads") as backend:
        mlp, net = chain_pair(backend, cost=cost, sizes=sizes)
        for step in range(30):
            x, y = batch(sizes, size, seed=step, dtype=np.float32)
            nabla_b, nabla_w = mlp.backprop(x, y, Sequential())
            grads = net.backprop(x, y, schedule)
            for l, (b, w) in enumerate(zip(nabla_b, nabla_w), start=2):
                assert np.array_equal(grads[str(l)]["b"], b) and np.array_equal(grads[str(l)]["w"], w), step
            mlp.sgd_step(x, y, ETA, Sequential())
            net.sgd_step(x, y, ETA, schedule)
        params = net.parameters()
        for l, (w, b) in enumerate(zip(mlp.weights, mlp.biases), start=2):
            assert np.array_equal(params[str(l)]["w"], w) and np.array_equal(params[str(l)]["b"], b)
        assert np.array_equal(net.feedforward(x), mlp.feedforward(x))


# -- DAGs -----------------------------------------------------------------------------------------


SCHEDULES = [Sequential(), Leapfrog(2), Leapfrog(3, fused=True), LevelSets(k=2), DagJacobi(k=3), DagDoubling(k=2)]


def total_cost(net, x, y):
    a = net.feedforward(x)
    if net.cost == "cross_entropy":
        return float(-np.sum(y * np.log(a) + (1 - y) * np.log(1 - a)))
    return float(0.5 * np.sum((a - y) ** 2))


def twice_net(backend):
    """A node that reads another twice: a = 2 + 2."""
    return DagNet(3, [("2", Dense(4, "tanh"), "x"), ("double", Add(), ["2", "2"]), ("out", Dense(2), "double")],
                    dtype="float64", seed=6, backend=backend)


@pytest.mark.parametrize("name", list(NETS) + ["twice"])
def test_dag_gradients_match_central_differences(name):
    with NumpyBackend(mode="serial") as backend:
        net = twice_net(backend) if name == "twice" else NETS[name](backend)
        x, y = data(net, 3)
        worst = assert_central_differences(net, x, y, net.backprop(x, y), rtol=1e-5, atol=1e-8)
        print(f"{name}: worst |backprop - central difference| = {worst:.2e}")


def assert_central_differences(net, x, y, grads, rtol, atol):
    """Each of ``grads`` (``{node: {name: array}}``) is the central differences of the cost of ``net`` on ``x``, ``y``
    in its parameter, within ``rtol`` and ``atol``; returns the largest difference."""
    worst, params = 0.0, net.parameters()
    for v in net.nodes:
        for name, param in params[v].items():
            def moved_cost():
                net.set_parameters({v: {name: param}})
                return total_cost(net, x, y)

            want = central(moved_cost, param)
            net.set_parameters({v: {name: param}})
            np.testing.assert_allclose(grads[v][name], want, rtol=rtol, atol=atol)
            worst = max(worst, float(np.max(np.abs(grads[v][name] - want))))
    return worst


@pytest.mark.parametrize("name", list(NETS))
@pytest.mark.parametrize("schedule", SCHEDULES, ids=repr)
def test_every_schedule_gives_the_sequential_gradients(name, schedule):
    with NumpyBackend(mode="threads") as backend:
        net = NETS[name](backend)
        x, y = data(net, 4)
        got, want = flat(net.backprop(x, y, schedule)), flat(net.backprop(x, y, Sequential()))
        assert same(got, want) or isinstance(schedule, (DagJacobi, DagDoubling))  # block products round otherwise
        np.testing.assert_allclose(np.concatenate([g.ravel() for g in got]), np.concatenate([g.ravel() for g in want]),
                                   rtol=1e-12, atol=1e-14)


def torch_gradients(net, x, y):
    torch = pytest.importorskip("torch", reason=f"the PyTorch comparison needs torch ({INSTALL})")
    params = {v: {k: torch.tensor(np.asarray(p), requires_grad=True) for k, p in named.items()}
              for v, named in net.parameters().items()}
    act = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu, "identity": lambda z: z}
    a = {"x": torch.tensor(x)}
    for v in net.order:
        layer, ins, p = net.layer[v], [a[u] for u in net.inputs[v]], params.get(v)
        if isinstance(layer, Dense):
            a[v] = act[layer.activation](p["w"] @ ins[0] + p["b"][:, None])
        elif isinstance(layer, Add):
            a[v] = sum(ins[1:], ins[0])
        elif isinstance(layer, Concat):
            a[v] = torch.cat(ins, dim=0)
        elif isinstance(layer, LayerNorm):
            mean, var = ins[0].mean(0, keepdim=True), ins[0].var(0, unbiased=False, keepdim=True)
            a[v] = p["gamma"][:, None] * (ins[0] - mean) / torch.sqrt(var + layer.eps) + p["beta"][:, None]
        else:
            a[v] = ins[0] * torch.tanh(p["v"])[:, None] + p["c"][:, None]
    out, target = a[net.output], torch.tensor(y)
    cost = (-(target * torch.log(out) + (1 - target) * torch.log(1 - out)).sum() if net.cost == "cross_entropy"
            else 0.5 * ((out - target) ** 2).sum())
    cost.backward()
    return {v: {k: t.grad.numpy() for k, t in params[v].items()} for v in net.nodes}


@pytest.mark.parametrize("name", list(NETS) + ["densenet-ce"])
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), DagDoubling()], ids=repr)
def test_dag_gradients_match_pytorch_autograd(name, schedule):
    with NumpyBackend(mode="threads") as backend:
        net = dense_net(backend, cost="cross_entropy") if name == "densenet-ce" else NETS[name](backend)
        x, y = data(net, 5)
        want = torch_gradients(net, x, y)
        got = net.backprop(x, y, schedule)
        worst = max(float(np.max(np.abs(got[v][k] - want[v][k]) / (1 + np.abs(want[v][k])))) for v in want
                    for k in want[v])
        print(f"{name} {schedule!r}: worst |DagNet - torch| / (1 + |torch|) = {worst:.2e}")
        assert worst < 1e-12


def test_a_user_defined_layer_trains_in_a_dag():
    rng = np.random.default_rng(0)
    x = rng.random((4, 64))
    y = np.stack([np.sin(3 * x[0]) + x[1], x[2] * x[3]])
    with NumpyBackend(mode="threads") as backend:
        net = gate_net(backend)
        before = total_cost(net, x, y)
        for _ in range(300):
            net.sgd_step(x, y, 0.05, Leapfrog(2))
        assert total_cost(net, x, y) < 0.2 * before


# -- the DAG schedules: rounds by their formulas ----------------------------------------------------


@pytest.mark.parametrize("D", [1, 2, 3, 5, 8, 9])
def test_rounds_are_their_formulas_on_chains(D):
    with NumpyBackend(mode="serial") as backend:
        net = deep_chain(D, backend)
        assert net.depth == D
        x, y = data(net, 2)
        want = flat(net.backprop(x, y))
        for schedule in (LevelSets(), DagJacobi(), DagDoubling()):
            got = flat(net.backprop(x, y, schedule))
            np.testing.assert_allclose(np.concatenate([g.ravel() for g in got]),
                                       np.concatenate([g.ravel() for g in want]), rtol=1e-12, atol=1e-15)
        assert net.stats["backward"]["sequential_rounds"] == D
        schedules = {"levels": LevelSets(), "jacobi": DagJacobi(), "doubling": DagDoubling()}
        for schedule in schedules.values():
            net.backprop(x, y, schedule)
        assert schedules["levels"].stats["rounds"] == D
        assert schedules["jacobi"].stats["sweeps"] == D
        assert schedules["doubling"].stats["rounds"] == (math.ceil(math.log2(D)) if D > 1 else 0)


def test_a_node_that_reads_another_twice_under_every_schedule():
    with NumpyBackend(mode="serial") as backend:
        net = twice_net(backend)
        x, y = data(net, 3)
        want = flat(net.backprop(x, y))
        for schedule in SCHEDULES:
            got = flat(net.backprop(x, y, schedule))
            np.testing.assert_allclose(np.concatenate([g.ravel() for g in got]),
                                       np.concatenate([g.ravel() for g in want]), rtol=1e-12, atol=1e-15)
        newton = flat(net.backprop(x, y, solver=ForwardNewton()))
        assert max(float(np.max(np.abs(g - w))) for g, w in zip(newton, want)) <= 1e-12


@pytest.mark.parametrize("name", list(NETS))
def test_rounds_are_their_formulas_on_dags(name):
    with NumpyBackend(mode="serial") as backend:
        net = NETS[name](backend)
        x, y = data(net, 2)
        levels, jacobi, doubling = LevelSets(), DagJacobi(), DagDoubling()
        for schedule in (levels, jacobi, doubling):
            net.backprop(x, y, schedule)
        depth = {"residual": 7, "densenet": 7, "gate": 4}[name]  # the longest path, counted by hand
        assert net.depth == depth
        assert levels.stats["rounds"] == depth and jacobi.stats["sweeps"] == depth
        assert doubling.stats["rounds"] == math.ceil(math.log2(depth))
        for stats in (levels.stats, jacobi.stats, doubling.stats):
            assert {"rounds", "flops", "bytes", "memory_bytes", "sequential_flops"} <= set(stats)


def test_jacobi_is_exact_after_d_sweeps_and_not_after_d_minus_1():
    with NumpyBackend(mode="serial") as backend:
        net = residual_net(backend)
        x, y = data(net, 3)
        want = np.concatenate([g.ravel() for g in flat(net.backprop(x, y))])
        for sweeps, converged in ((net.depth, True), (net.depth - 1, False), (None, True), (1, False)):
            schedule = DagJacobi(2) if sweeps is None else DagJacobi(max_sweeps=sweeps)  # DagJacobi(k), as its siblings
            sweeps = sweeps or net.depth
            got = np.concatenate([g.ravel() for g in flat(net.backprop(x, y, schedule))])
            error = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))  # the block products round otherwise
            assert error <= 1e-14 if converged else error > 1e-3, (sweeps, error)
            assert schedule.stats["converged"] is converged and schedule.stats["rounds"] == sweeps


@pytest.mark.parametrize("sweeps", [(None, 1), (1, None)], ids=("exact-then-one", "one-then-exact"))
def test_graph_steps_under_dag_jacobis_of_other_sweeps_are_each_their_own(sweeps):
    """A graph is kept by its schedule's repr, which says max_sweeps: two graph steps under one DagJacobi, then two
    under the other, are an eager twin's steps to the bit (the first's graph, replayed for the second, was not)."""
    with NumpyBackend() as backend:
        nets = [residual_net(backend), residual_net(backend)]
        for twin in nets[1:]:
            twin.set_parameters(nets[0].parameters())
        for max_sweeps in sweeps:
            for step in range(2):
                x, y = data(nets[0], 3, seed=step)
                for net, graph in zip(nets, (True, False)):
                    net.sgd_step(x, y, 0.5, DagJacobi(max_sweeps=max_sweeps), graph=graph)
        assert same(flat(nets[0].parameters()), flat(nets[1].parameters()))


@pytest.mark.parametrize("width", [4, 5])
def test_the_sequential_counters_are_their_formula(width):
    """Flops of the adjoint system, B = 2: 2 n n_u B per input node u and n B of a node with parameters (h and
    k read only the input), n_u B per input node of an Add, nothing for a Concat, its inputs of one width (4, 4)
    or not (4, 5)."""
    B, m = 2, 4 + width
    with DagNet(3, [("h", Dense(4, "tanh"), "x"), ("k", Dense(width, "tanh"), "x"), ("c", Concat(), ["h", "k"]),
                    ("s", Add(), ["c", "c"]), ("out", Dense(2), "s")], dtype="float64", backend="numpy") as net:
        net.gradients(np.ones((3, B)), np.full((2, B), 0.5), Sequential())
        want = 4 * B + width * B + 0 + 2 * m * B + (2 * 2 * m * B + 2 * B)
        assert net.stats["backward"]["sequential_flops"] == want


@pytest.mark.parametrize("cls", [DagJacobi, DagDoubling])
def test_a_block_schedule_checks_its_memory_before_allocating(cls, monkeypatch):
    with NumpyBackend(mode="serial") as backend:
        net = residual_net(backend)
        x, y = data(net, 3)
        needed = cls().memory_needed(net, 3)
        M = sum(net.n[v] for v in net.order)
        assert needed == {DagJacobi: M * M + 3 * M, DagDoubling: 2 * M * M + 2 * M}[cls] * 3 * 8
        with monkeypatch.context() as patch:
            patch.setattr(cls, "_solve", lambda *args: pytest.fail("allocated past the check"))
            patch.setattr(dag_schedules, "lay_out", lambda *args: pytest.fail("allocated past the check"))
            with pytest.raises(ValueError, match=rf"^{cls.__name__} needs {needed} bytes .* over memory_limit="
                                                 rf"{needed - 1} bytes \(.*\); pass a larger memory_limit or use "
                                                 r"Sequential\(\)"):
                net.backprop(x, y, cls(memory_limit=needed - 1))
        schedule = cls(memory_limit=needed)
        net.backprop(x, y, schedule)
        assert schedule.stats["memory_bytes"] == needed
        for bad, error in ((0, ValueError), (True, TypeError), (1.5, TypeError)):
            with pytest.raises(error, match="memory_limit must be an integer number of bytes >= 1"):
                cls(memory_limit=bad)


# -- streams: where gradients run, and the waits that make it right ---------------------------------


def deferred_params(order, schedule, seed=0):
    with NumpyBackend(mode="deferred", order=order, seed=seed) as backend:
        net = residual_net(backend, dtype="float32")
        for step in range(3):
            x, y = data(net, 4, seed=step)
            net.sgd_step(x, y, ETA, schedule)
        return flat(net.parameters()) + flat(net.backprop(x, y, schedule))


@pytest.mark.parametrize("order,seed", [("main-first", 0), ("workers-first", 0), ("random", 1), ("random", 2)])
def test_every_interleaving_matches_sequential(order, seed):
    """Bitwise the sequential order; DagJacobi bitwise its own main-first pass, the sequential within rounding."""
    want = deferred_params("main-first", Sequential())
    for schedule in (Leapfrog(2), Leapfrog(3, fused=True), LevelSets(k=2), LevelSets(k=3, fused=True)):
        assert same(deferred_params(order, schedule, seed), want), schedule
    for schedule in (DagJacobi(k=2), DagJacobi(k=2, fused=True)):
        own = deferred_params("main-first", schedule)
        assert same(deferred_params(order, schedule, seed), own), schedule
        for got, sequential in zip(own, want):
            np.testing.assert_allclose(got, sequential, rtol=1e-5, atol=1e-6, err_msg=repr(schedule))


def test_a_missing_wait_or_join_is_caught(monkeypatch):
    want = deferred_params("main-first", Sequential())
    monkeypatch.setattr(Handoff, "join", lambda self: None)
    with pytest.raises(KeyError):  # the update reads gradients not computed yet
        deferred_params("main-first", Leapfrog(2))
    monkeypatch.undo()
    monkeypatch.setattr(NumpyBackend, "wait", lambda self, stream, event: None)
    with pytest.raises(KeyError):  # a worker reads an error not computed yet
        deferred_params("workers-first", Leapfrog(2))
    monkeypatch.undo()
    assert same(deferred_params("workers-first", Leapfrog(2)), want)


def test_gradients_run_on_worker_index_mod_k():
    with NumpyBackend(mode="threads", trace=True) as backend:
        net = residual_net(backend)
        x, y = data(net, 2)
        backend.trace.clear()
        net.backprop(x, y, Leapfrog(3))
        starts = {name: stream for stream, what, name in backend.trace if what == "start"}
        owning = sorted({net.index[v] % 3 for v in net.nodes})  # the residues some node has: worker j owns the j-th
        for v in net.nodes:
            assert starts[f"gradients[{v}]"] == f"worker{owning.index(net.index[v] % 3)}"


# -- validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes,message", [
    ([("a", Dense(3), "b"), ("b", Dense(3), "a")], "cycle: (a -> b -> a|b -> a -> b)"),
    ([("a", Add(), ["x", "b"]), ("b", Dense(2), "a"), ("out", Dense(2), "b")], "the nodes form a cycle: a -> b -> a$"),
    ([("a", Dense(3), "nowhere")], "unknown nodes"),
    ([("a", Dense(3), "x"), ("b", Dense(3), "x")], "one output node"),
    ([("a", Dense(3), "x"), ("b", Dense(4), "x"), ("c", Add(), ["a", "b"])], "node 'c'.*one width"),
    ([("a", Dense(3), "x"), ("a", Dense(3), "a")], "given twice"),
    ([("x", Dense(3), "x")], "other than 'x'"),
    ([("a", Dense(3), [])], "no inputs"),
])
def test_bad_graphs_say_what_is_wrong(nodes, message):
    with pytest.raises(ValueError, match=message):
        DagNet(2, nodes, backend="numpy")


@pytest.mark.parametrize("nodes,message", [
    (None, "nodes must be a list of (name, layer, inputs) triples; got NoneType"),
    ({"a": (Dense(3), "x")}, "nodes must be a list of (name, layer, inputs) triples; got dict"),
    ([("a", Dense(3), 5)], "node 'a': its inputs must be a node's name or a list of names ('x' is the input); got 5"),
    ([("a", Dense(3), ["x", None])],
     "node 'a': its inputs must be a node's name or a list of names ('x' is the input); got ['x', None]"),
    ([(3, Dense(3), "x")], "node names must be non-empty strings other than 'x'; got 3"),
])
def test_nodes_of_the_wrong_type_say_what_is_expected(nodes, message):
    with pytest.raises(TypeError) as info:
        DagNet(2, nodes, backend="numpy")
    assert str(info.value) == message


@pytest.mark.parametrize("n_input,error", [("3", TypeError), (True, TypeError), (3.0, TypeError), (0, ValueError)])
def test_n_input_is_an_integer_width(n_input, error):
    """A value that is no integer is a TypeError, as MLP([5, 2.5]) is; one below 1 a ValueError."""
    with pytest.raises(error, match=f"^n_input must be an integer >= 1; got {re.escape(repr(n_input))}$"):
        DagNet(n_input, [("a", Dense(3), "x")], backend="numpy")


class ShortLayer(Layer):
    """Says its output is as wide as its input, returns one row less."""

    def size(self, sizes):
        return sizes[0]

    def forward(self, backend, params, inputs):
        return np.ascontiguousarray(inputs[0][:-1]), {}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [g]


@pytest.mark.parametrize("solver", [None, ForwardJacobi(), ForwardNewton()], ids=repr)
def test_a_layer_whose_output_is_not_its_size_is_refused_naming_the_node(solver):
    """Node "u" says 4 rows and gives 3: the Dense reading it would read past the end of its array. A feedforward
    raises, and a step raises at its synchronize with the parameters unchanged."""
    message = (r"^node 'u': ShortLayer\(\)\.forward returned an output of shape \(3, 2\), not \(n, B\) = \(4, 2\) "
               r"\(n: its size\(\)\): make forward return n rows of B columns$")
    with DagNet(4, [("a", Dense(4, "tanh"), "x"), ("u", ShortLayer(), "a"), ("out", Dense(2), "u")],
                dtype="float64", backend="numpy") as net:
        x, y = np.ones((4, 2)), np.full((2, 2), 0.5)
        with pytest.raises(ValueError, match=message):
            net.feedforward(x, solver=solver)
        before = flat(net.parameters())
        with pytest.raises(ValueError, match=message):
            net.sgd_step(x, y, ETA, solver=solver)
            net.synchronize()
        assert same(flat(net.parameters()), before)


def product_net(layer, output):
    """m = a * b of two Dense tanh nodes of the input, the output or below a skip s = m + b."""
    nodes = [("a", Dense(3, "tanh"), "x"), ("b", Dense(3, "tanh"), "x"), ("m", layer, ["a", "b"])]
    if not output:
        nodes += [("s", Add(), ["m", "b"]), ("out", Dense(1, "identity"), "s")]
    return DagNet(2, nodes, dtype="float64", seed=7, backend="numpy")


@pytest.mark.parametrize("output", [False, True], ids=["below", "output"])
@pytest.mark.parametrize("schedule", SCHEDULES, ids=repr)
def test_a_layer_that_hands_back_a_product_too_few_is_refused_naming_the_node(schedule, output):
    """With both products a two-input node's gradients are the central differences of the cost under every
    schedule; with one, every schedule refuses it, as ForwardNewton (whose Jacobian is built from them) does, where
    the chain's schedules trained on x_1's adjoint without it and the block schedules raised an IndexError."""
    with product_net(Product(), output) as net:
        x, y = data(net, 3)
        assert_central_differences(net, x, y, net.backprop(x, y, schedule), rtol=1e-6, atol=1e-9)
    message = (r"^node 'm': ForgetsAnInput\(\)\.vjp_inputs returned 1 product for 2 inputs: return a list of one "
               r"product \(n_i, B\) per input, in the inputs' order$")
    with product_net(ForgetsAnInput(), output) as net:
        with pytest.raises(ValueError, match=message):
            net.backprop(x, y, schedule)
        with pytest.raises(ValueError, match=message):
            net.feedforward(x, solver=ForwardNewton())


@pytest.mark.parametrize("layer,drawn,named", [(DrawsTooFew(), "['v']", "['c', 'v']"),
                                               (NamesTooFew(), "['c', 'v']", "['v']")],
                         ids=["draws-too-few", "names-too-few"])
def test_a_node_whose_init_draws_other_parameters_than_params_names_is_refused_naming_it(layer, drawn, named):
    """The network keeps the parameters ``params`` names: it raised a KeyError 'c' as it built them (c named, not
    drawn), or as forward read them (c drawn, not named)."""
    message = (f"node 'g': {layer!r}.init drew the parameters {drawn}, its params name {named}: make init draw "
               "every parameter that params names, and none other")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        DagNet(3, [("a", Dense(4, "tanh"), "x"), ("g", layer, "a"), ("out", Dense(2), "g")], backend="numpy")



def gate_between(layer, backend="numpy"):
    """x -> a = tanh(w_a x + b_a) -> g, ``layer`` (a ``Gate``) -> out = sigma(w_out g + b_out), in float64."""
    return DagNet(3, [("a", Dense(4, "tanh"), "x"), ("g", layer, "a"), ("out", Dense(2), "g")], dtype="float64",
                  backend=backend)


VJP_PARAMS_FAULTS = [
    (NoBias(), "node 'g': NoBias().vjp_params returned no gradient for 'c': return one, summed over the batch, for "
               "each parameter that params names ('v', 'c')"),
    (SummedOverUnits(), "node 'g': SummedOverUnits().vjp_params returned 'c' of shape (); the parameter's is (4,): "
                        "return dC/dc summed over the batch alone, shaped as c"),
]


@pytest.mark.parametrize("layer,message", VJP_PARAMS_FAULTS, ids=["left-out", "summed-over-units"])
@pytest.mark.parametrize("optimizer", [SGD(0.1), Adam(0.1)], ids=repr)
@pytest.mark.parametrize("schedule", [s for s in SCHEDULES if not s.fused], ids=repr)
def test_a_layer_whose_vjp_params_is_not_one_gradient_per_parameter_is_refused_before_any_update(schedule, optimizer,
                                                                                                  layer, message):
    """A gradient left out raised a bare KeyError 'c' in g's update, after a's (the updates run in node order), with
    the step count 0; one of another shape was broadcast into c's update, every unit moved by the same step. Both
    are refused as g's gradients are made, before any update: every parameter is as before, bit for bit."""
    x, y = np.random.default_rng(0).standard_normal((3, 2)), np.full((2, 2), 0.5)
    with gate_between(layer) as net:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            net.gradients(x, y, schedule)
        before = net.parameters()
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            net.train_step(x, y, optimizer, schedule)
            net.synchronize()
        after = net.parameters()
        assert all(np.array_equal(after[v][name], before[v][name]) for v in before for name in before[v])
        assert net.optimizer_state() == {"step": 0}


class ForgetsSaved(Gate):
    def forward(self, backend, params, inputs):
        return super().forward(backend, params, inputs)[0]


class NoBlock(Gate):
    def jacobian(self, backend, params, inputs, saved, i):
        return None


class OneSampleBlock(Gate):
    """diag(tanh v), right, but given once for the whole batch: (1, n, n)."""

    def jacobian(self, backend, params, inputs, saved, i):
        return DenseBlock(backend.xp, np.diag(saved["t"][:, 0])[None])


class WideBlock(Gate):
    """A matrix per sample, one column too many: (B, n, n + 1)."""

    def jacobian(self, backend, params, inputs, saved, i):
        n, batch = inputs[0].shape
        return DenseBlock(backend.xp, np.zeros((batch, n, n + 1)))


@pytest.mark.parametrize("layer, schedule, message", [
    (ForgetsSaved(), Sequential(), "ForgetsSaved().forward returned an array: return (a, saved), the output and what "
                                   "the products need (None, or {}, for nothing)"),
    (NoBlock(), DagJacobi(k=2), "NoBlock().jacobian returned None: return a block, DenseBlock (B, n, n_i), Diagonal, "
                                "Factored or Slice")], ids=["forward", "jacobian"])
def test_a_layer_that_returns_no_result_of_the_protocol_is_refused_naming_the_node(layer, schedule, message):
    """Python's "too many values to unpack" and an AttributeError of 'dense' named neither."""
    x, y = np.random.default_rng(0).standard_normal((3, 2)), np.full((2, 2), 0.5)
    with gate_between(layer) as net:
        with pytest.raises(TypeError, match=f"^{re.escape(f'node {chr(39)}g{chr(39)}: {message}')}$"):
            net.gradients(x, y, schedule)


@pytest.mark.parametrize("layer, given", [(OneSampleBlock(), (1, 4, 4)), (WideBlock(), (2, 4, 5))],
                         ids=["one-sample", "wide"])
def test_a_jacobian_block_not_shaped_as_the_nodes_is_refused_naming_the_node(layer, given):
    """A block of one sample was broadcast over the batch, as if every sample's Jacobian were the first's; one of
    another width failed in a NumPy broadcast as the block schedules laid it out, naming no node. Both are refused
    as the block is handed back, by the schedules and the forward solver that read blocks."""
    message = (f"node 'g': {layer!r}.jacobian of input 0 returned a block of (B, n, n_i) = {given}; this node's is "
               "(2, 4, 4): one (n, n_i) matrix per sample of the batch")
    x, y = np.random.default_rng(0).standard_normal((3, 2)), np.full((2, 2), 0.5)
    with gate_between(layer) as net:
        for solve in (lambda: net.gradients(x, y, DagJacobi(k=2)), lambda: net.gradients(x, y, DagDoubling(k=2)),
                      lambda: net.feedforward(x, solver=ForwardNewton())):
            with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
                solve()


def test_a_network_whose_layer_refuses_its_init_leaves_no_thread_behind():
    """Its backend's threads end as the constructor raises, not once the error, whose traceback holds the network,
    is dropped and collected."""
    gc.disable()
    try:
        with pytest.raises(ValueError, match="^node 'g': .*contains NaN or Inf") as refused:
            gate_between(Drawing(np.nan))
        assert refused.traceback and not [t for t in threading.enumerate() if t.name.startswith("leapfrog-")]
    finally:
        gc.enable()


class GivesLists(Gate):
    def vjp_params(self, backend, params, inputs, saved, g):
        return {name: grad.tolist() for name, grad in super().vjp_params(backend, params, inputs, saved, g).items()}


class GivesFloat32(Gate):
    def vjp_params(self, backend, params, inputs, saved, g):
        return {name: grad.astype(np.float32) for name, grad in super().vjp_params(backend, params, inputs, saved,
                                                                                    g).items()}


class GivesAFloat32Product(Gate):
    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [product.astype(np.float32) for product in super().vjp_inputs(backend, params, inputs, saved, g)]


@pytest.mark.parametrize("layer, message", [
    (GivesLists(), "vjp_params returned for 'v' a list: return an array of the backend's (backend.xp), a "
                   "numpy.ndarray"),
    (GivesFloat32(), "vjp_params returned for 'v' an array of dtype float32; the network's is float64: compute in "
                     "the dtype of its inputs and parameters"),
    (GivesAFloat32Product(), "vjp_inputs returned for input 0 an array of dtype float32; the network's is float64: "
                             "compute in the dtype of its inputs and parameters")], ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("schedule", [Sequential(), LevelSets(k=2)], ids=repr)
def test_a_product_that_is_no_array_of_the_networks_dtype_is_refused_naming_the_node_before_any_update(schedule,
                                                                                                     layer, message):
    """A list (or a float) of the right shape failed in the update, after the updates of the nodes before it, naming
    none; another dtype spread to the gradients of the nodes below."""
    x, y = np.random.default_rng(0).standard_normal((3, 2)), np.full((2, 2), 0.5)
    with gate_between(layer) as net:
        before = net.parameters()
        with pytest.raises(TypeError, match=f"^{re.escape(f'node {chr(39)}g{chr(39)}: {layer!r}.{message}')}$"):
            net.train_step(x, y, Adam(0.1), schedule)
            net.synchronize()
        after = net.parameters()
        assert all(np.array_equal(after[v][name], before[v][name]) for v in before for name in before[v])
        assert net.optimizer_state() == {"step": 0}


@pytest.mark.parametrize("layer,message", VJP_PARAMS_FAULTS, ids=["left-out", "summed-over-units"])
def test_a_fused_step_refuses_it_too_leaving_the_updates_of_the_nodes_done_before(layer, message):
    """A fused step updates each node as soon as its products are made: out's update may run before g's gradients
    (docs/optimizers.md: a failure between a fused step's updates leaves those that ran). g's and the step count
    are as before."""
    x, y = np.random.default_rng(0).standard_normal((3, 2)), np.full((2, 2), 0.5)
    with gate_between(layer) as net:
        before = net.parameters()
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            net.train_step(x, y, Adam(0.1), Leapfrog(2, fused=True))
            net.synchronize()
        assert all(np.array_equal(net.parameters()["g"][name], before["g"][name]) for name in before["g"])
        assert net.optimizer_state() == {"step": 0}


@pytest.mark.parametrize("schedule", SCHEDULES, ids=repr)
def test_a_layer_whose_product_is_not_shaped_as_its_input_is_refused_naming_the_node(schedule):
    """g's product for a (4, B) is (3, B): the chain's schedules failed in a NumPy broadcast as a's error read it, the
    block schedules as they laid out its Jacobian, naming no node. Every schedule, and ForwardNewton (which builds
    g's Jacobian from its products), refuses it as it is handed back, before any update of an unfused step."""
    message = ("node 'g': ShortProduct().vjp_inputs returned a product of shape (3, 2) for input 0, of shape (4, 2): "
               "return dC/d input_0, shaped as input 0 (n_0, B)")
    x, y = np.random.default_rng(0).standard_normal((3, 2)), np.full((2, 2), 0.5)
    with gate_between(ShortProduct()) as net:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            net.gradients(x, y, schedule)
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            net.feedforward(x, solver=ForwardNewton())
        before = net.parameters()
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            net.train_step(x, y, SGD(0.1), schedule)
            net.synchronize()
        if not schedule.fused:
            assert same(flat(net.parameters()), flat(before))


@pytest.mark.parametrize("width,error", [(3.5, TypeError), (None, TypeError), (True, TypeError), (0, ValueError)])
def test_a_layer_whose_size_is_no_width_is_refused_as_the_network_is_built(width, error):
    """int() cut 3.5 to 3, and the network trained; None raised int()'s TypeError, naming no node; 0 was taken, and
    refused only by the first pass's forward. A NumPy integer is a width."""
    message = f"node 'g': Sized({width!r}).size([4]) returned {width!r}: return the output width, an integer >= 1"
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        gate_between(Sized(width))
    for width in (np.int64(4), np.array(4)):  # what int() took, an integer: NumPy's, or a 0-d array of one
        with gate_between(Sized(width)) as net:
            assert net.n["g"] == 4 and type(net.n["g"]) is int


def test_an_error_of_a_layers_own_forward_names_the_node_and_keeps_its_own_traceback():
    """A TypeError of a layer's forward is raised again naming the node and the forward, as a ValueError is, caused
    by the layer's own error: its traceback, into the layer's code, is kept."""

    class Typo(Gate):
        def forward(self, backend, params, inputs):
            return inputs[0] + "1", {}

    x, y = batch([3, 2], 5)
    with gate_between(Typo()) as net, pytest.raises(TypeError, match=r"^node 'g': Typo\(\)\.forward failed on inputs "
                                                                      r"of shapes \[\(4, 5\)\] and parameters") as raised:
        net.train_step(x, y, SGD(0.1))
        net.synchronize()
    assert isinstance(raised.value.__cause__, TypeError) and raised.value.__cause__.__traceback__ is not None


@pytest.mark.parametrize("value,dtype,error,what", [
    (np.nan, "float64", ValueError, "contains NaN or Inf (as float64); every parameter must be finite"),
    (1e300, "float32", ValueError, "contains NaN or Inf (as float32); every parameter must be finite: a number "
                                   "beyond +-3.403e+38, which float64 holds; build the network with dtype='float64'"),
    (1j, "float64", TypeError, "must hold real numbers (a float or integer dtype); got dtype complex128"),
], ids=["nan", "beyond-float32", "complex"])
def test_a_node_whose_init_draws_what_set_parameters_refuses_is_refused_as_it_is_built(value, dtype, error, what):
    """The network took a NaN (its gradients NaN from the first pass), a value that is Inf in its dtype, and a
    complex number less its imaginary part; it refuses each as set_parameters does, in the same words."""
    nodes = [("a", Dense(4, "tanh"), "x"), ("g", Drawing(value), "a"), ("out", Dense(2), "g")]
    message = f"node 'g': Drawing({value!r}).init()['c'] {what}"
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        DagNet(3, nodes, dtype=dtype, backend="numpy")
    nodes[1] = ("g", Gate(), "a")
    with DagNet(3, nodes, dtype=dtype, backend="numpy") as net:
        with pytest.raises(error, match=f"^c of node 'g' {re.escape(what)}$"):
            net.set_parameters({"g": {"c": np.full(4, value)}})


@pytest.mark.parametrize("solver", [None, ForwardJacobi(), ForwardNewton()], ids=repr)
def test_a_node_whose_init_draws_another_shape_than_forward_reads_is_named_with_the_shapes(solver):
    """A shape init draws is known by what forward reads alone: its forward fails at the first pass, which raised
    NumPy's broadcast error, naming neither the node nor the parameters. It names both, with their shapes, and a
    step leaves every parameter as it was."""
    message = ("node 'g': DrawsWide().forward failed on inputs of shapes [(4, 2)] and parameters of shapes "
               "{'v': (5,), 'c': (5,)}, as init drew them: operands could not be broadcast together with shapes "
               "(4,2) (5,1)")
    x, y = np.random.default_rng(0).standard_normal((3, 2)), np.full((2, 2), 0.5)
    with gate_between(DrawsWide()) as net:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            net.feedforward(x, solver=solver)
        before = net.parameters()
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            net.train_step(x, y, Adam(0.1), Leapfrog(2, fused=True), solver=solver)
            net.synchronize()
        assert same(flat(net.parameters()), flat(before)) and net.optimizer_state() == {"step": 0}

class Halves(Layer):
    """a = x / 2, cast to ``dtype`` where one is given (else in its input's dtype)."""

    def __init__(self, dtype=None):
        self.dtype = dtype

    def __repr__(self):
        return f"Halves({self.dtype!r})"

    def size(self, sizes):
        return sizes[0]

    def forward(self, backend, params, inputs):
        return inputs[0] / 2 if self.dtype is None else (inputs[0] / 2).astype(self.dtype), {}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [g / 2]


@pytest.mark.parametrize("dtype,other", [("float64", "float32"), ("float32", "float64")])
@pytest.mark.parametrize("solver", [None, ForwardJacobi(), ForwardNewton()], ids=repr)
def test_a_layer_whose_output_is_not_of_the_networks_dtype_is_refused_naming_the_node(solver, dtype, other):
    """In its input's dtype the node computes sigma(w_o (tanh(w_a x + b_a) / 2) + b_o) with the node after it;
    cast to another, it is refused where the Dense node reading it raised in its kernels, naming no node."""
    nodes = [("a", Dense(4, "tanh"), "x"), ("h", Halves(), "a"), ("out", Dense(2), "h")]
    x = np.random.default_rng(0).standard_normal((3, 2))
    with DagNet(3, nodes, dtype=dtype, backend="numpy") as net:
        p = {v: {name: array.astype(np.float64) for name, array in params.items()}
             for v, params in net.parameters().items()}
        z = p["out"]["w"] @ (np.tanh(p["a"]["w"] @ x + p["a"]["b"][:, None]) / 2) + p["out"]["b"][:, None]
        np.testing.assert_allclose(net.feedforward(x, solver=solver), 1 / (1 + np.exp(-z)),
                                   rtol=1e-12 if dtype == "float64" else 1e-5)
    nodes[1] = ("h", Halves(other), "a")
    message = (f"node 'h': Halves('{other}').forward returned an output of dtype {other}, not the network's {dtype}: "
               "make forward compute in its inputs' dtype")
    with DagNet(3, nodes, dtype=dtype, backend="numpy") as net:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            net.feedforward(x, solver=solver)


def test_a_node_listed_before_one_of_its_inputs_is_placed_after_all_of_them():
    """``s`` reads ``a`` and the input and is listed first: it waits for ``a``, not only for the input that is
    ready, and computes ``sigma(w x + b) + x``."""
    with DagNet(3, [("s", Add(), ["a", "x"]), ("a", Dense(3), "x")], dtype="float64", seed=2,
                  backend="numpy") as net:
        assert net.order == ["a", "s"] and net.output == "s"
        x, _ = data(net, 4)
        w, b = net.parameters()["a"]["w"], net.parameters()["a"]["b"]
        want = 1 / (1 + np.exp(-(w @ x + b[:, None]))) + x
        np.testing.assert_allclose(net.feedforward(x), want, rtol=1e-15, atol=0)


def test_cross_entropy_needs_a_sigmoid_output_and_schedules_are_checked():
    with pytest.raises(ValueError, match="Dense sigmoid output"):
        DagNet(2, [("a", Dense(3, "tanh"), "x")], cost="cross_entropy", backend="numpy")
    with pytest.raises(TypeError, match="layer must implement"):
        DagNet(2, [("a", object(), "x")], backend="numpy")
    with pytest.raises(TypeError, match="backend must be"):
        DagNet(2, [("a", Dense(3), "x")], backend=3)
    from leapfrog_gpu import NaumovScan

    with residual_net("numpy") as net:
        x, y = data(net, 2)
        with pytest.raises(TypeError, match="NaumovScan"):
            net.backprop(x, y, NaumovScan())
        with pytest.raises(ValueError, match="one_pass"):
            net.backprop(x, y, Leapfrog(2, one_pass=True))


def test_leapfrog_auto_calibrates_a_dagnet_and_runs_what_it_chose_bitwise():
    """Leapfrog("auto") calibrates on the DagNet's plan as on the MLP's and the RNN's: it chooses Sequential()
    or a Leapfrog(k), once per plan, and its gradients are Sequential()'s bit for bit."""
    with residual_net("numpy") as net:
        x, y = data(net, 3)
        want = net.backprop(x, y, Sequential())
        got = net.backprop(x, y, Leapfrog("auto"))
        plan = net.plan(3)
        chosen = calibrate.chosen(plan)
        assert isinstance(chosen, (Sequential, Leapfrog)) and not chosen.auto
        assert all((got[v][name] == want[v][name]).all() for v in want for name in want[v])
        net.backprop(x, y, Leapfrog("auto"))
        assert calibrate.chosen(plan) is chosen


def test_residual_builder_adds_a_skip_every_skip_layers():
    with residual([8, 6, 6, 6, 6, 6, 3], skip=2, backend="numpy") as net:
        adds = [v for v in net.order if isinstance(net.layer[v], Add)]
        assert adds == ["s5"] and net.inputs["s5"] == ["5", "3"] and net.inputs["6"] == ["s5"]
    with residual([8, 6, 6, 6, 6, 6, 6, 3], skip=1, backend="numpy") as net:
        assert [v for v in net.order if isinstance(net.layer[v], Add)] == ["s3", "s4", "s5", "s6", "s7"]


# -- the CuPy backend, on the stand-in --------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # the stand-in probes 1 / x on zeros
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Leapfrog(2, fused=True), LevelSets(k=2),
                                      DagJacobi(k=2), DagDoubling(k=3)], ids=repr)
def test_dags_on_the_cupy_backend_match_numpy(standin, schedule):
    from leapfrog_gpu.backends.cuda import CupyBackend

    with NumpyBackend(mode="serial") as host:
        want_net = residual_net(host)
        x, y = data(want_net, 3)
        want = flat(want_net.backprop(x, y))
        for step in range(3):
            want_net.sgd_step(x, y, ETA, Sequential())
        want_params = flat(want_net.parameters())
    with CupyBackend() as backend:
        net = residual_net(backend)
        got = [g.get() for g in flat(net.backprop(x, y, schedule))]
        for step in range(3):
            net.sgd_step(x, y, ETA, schedule)
        params = [p.get() for p in flat(net.parameters())]
    for a, b in zip(got + params, want + want_params):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2, fused=True), DagJacobi(k=2)], ids=repr)
def test_a_layer_of_ones_own_trains_on_the_cupy_backend_as_on_numpy(standin, schedule):
    """``Gate``'s products and gradients are the stand-in's device arrays, which the checks of their shapes read
    (``np.shape`` of one raised a TypeError): three steps, then the parameters, as on the host."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    x, y = batch([3, 2], 5)
    with gate_between(Gate()) as host_net:
        start = host_net.parameters()
        for step in range(3):
            host_net.train_step(x, y, SGD(0.1), Sequential())
        want = flat(host_net.parameters())
    with CupyBackend() as backend, gate_between(Gate(), backend) as net:
        net.set_parameters(start)
        for step in range(3):
            net.train_step(x, y, SGD(0.1), schedule)
        got = [p.get() for p in flat(net.parameters())]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


# -- leapfrog-train --model resmlp ------------------------------------------------------------------


def test_leapfrog_train_resmlp_reaches_95_percent_on_digits(capsys):
    assert cli("--model", "resmlp", "--skip", 2, "--backend", "numpy", "--quiet") == 0
    done = capsys.readouterr().out.strip().splitlines()[-1]
    accuracy = float(done.split("test accuracy ")[1].split("%")[0])
    assert accuracy >= 95, done


def test_leapfrog_train_resmlp_resumes_bitwise(tmp_path, capsys):
    common = ["--model", "resmlp", "--skip", 1, "--hidden", "3x16", "--backend", "numpy", "--quiet"]
    assert cli(*common, "--epochs", 2, "--checkpoint-dir", tmp_path / "a") == 0
    assert cli(*common, "--epochs", 1, "--checkpoint-dir", tmp_path / "b") == 0
    assert cli("--resume", "--epochs", 2, "--checkpoint-dir", tmp_path / "b", "--quiet") == 0
    assert same(parameters(tmp_path / "a")[0], parameters(tmp_path / "b")[0])
    assert cli("--resume", "--model", "mlp", "--checkpoint-dir", tmp_path / "b", "--quiet") == 2
    assert "differs from the checkpoint's resmlp" in capsys.readouterr().err


def test_leapfrog_train_refuses_skip_without_model_resmlp(capsys):
    assert cli("--skip", 3, "--backend", "numpy", "--quiet") == 2
    assert capsys.readouterr().err == "leapfrog-train: error: --skip applies to --model resmlp only\n"


@pytest.mark.parametrize("module", ["leapfrog_gpu", "leapfrog_gpu.dag"])
def test_the_old_name_graphnet_still_imports_with_a_deprecation_warning(monkeypatch, module):
    """``GraphNet`` is ``DagNet`` for one release: the same class, and a DeprecationWarning naming the new name."""
    import importlib

    from leapfrog_gpu import DagNet

    package = importlib.import_module(module)
    monkeypatch.delitem(vars(package), "GraphNet", raising=False)  # kept once asked for: ask afresh
    with pytest.warns(DeprecationWarning, match=rf"{module}\.GraphNet is now DagNet"):
        assert getattr(package, "GraphNet") is DagNet
    with pytest.raises(AttributeError, match="GraphNets"):
        getattr(package, "GraphNets")


@pytest.mark.parametrize("optimizer", [Adam(), SGD(0.1, momentum=0.9)], ids=repr)
def test_a_dag_of_no_parameter_takes_its_optimizer_state_back(optimizer):
    """Its state after a step is the step count and each slot of the optimizer, of no parameter: what
    ``set_optimizer_state`` takes back (it refused the state ``optimizer_state()`` gave, naming the slots)."""
    with DagNet(3, [("c", Concat(), ["x", "x"]), ("out", Add(), ["c", "c"])], backend="numpy") as net:
        net.train_step(np.ones((3, 2)), np.zeros((6, 2)), optimizer)
        state = net.optimizer_state()
        assert state == {"step": 1, **{slot: {} for slot in optimizer.SLOTS}}
        net.set_optimizer_state(optimizer, state)
        assert net.optimizer_state() == state


def test_a_dag_of_no_parameters_steps_with_clipping_on_the_cupy_backend(standin, backend):
    """Add and Concat nodes alone hold no parameter: clipping has no gradient to scale (its norm is no array),
    and the step goes through, as on the host, its output the input twice."""
    x = np.array([[0.5, -2.0]])
    with DagNet(1, [("out", Concat(), ["x", "x"])], dtype="float64", backend=backend) as net:
        for _ in range(2):
            net.train_step(x, np.zeros((2, 2)), Adam(0.1), Sequential(), clip=1.0)
        net.synchronize()
        assert net.optimizer_state()["step"] == 2
        np.testing.assert_array_equal(net.feedforward(x).get(), np.vstack([x, x]))
