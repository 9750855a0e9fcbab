"""The counters of each cell (Elman, GRU, LSTM): the flops of the forward pass and of the BPTT chain against the
matrix products of the float64 reference, counted as it runs, and the elementwise work of the cells' equations
written out here; the memory the scans and TimeNewton report against the bytes their buffers take once a pass has
run, and the memory check of an LSTM's (h, c) state at its exact threshold."""

import types
import warnings

import numpy as np
import pytest

from helpers import batch
from leapfrog_gpu import RNN, BPTT, NaumovRNN, TimeNewton, TimeScan, Wavefront
from leapfrog_gpu.rnn import gated_reference, reference
from leapfrog_gpu.rnn.schedules import bptt_counters, forward_flops, gradient_flops

SIZES, TAU, B = [3, 5, 4, 2], 4, 3
CELLS = ("elman", "gru", "lstm")

# The elementwise flops per unit and step, one an operation, σ and tanh one each, from the equations of
# leapfrog_gpu/rnn/cells.py:
FORWARD = {
    "elman": 2 + 1 + 2,  # z = w x + b + u a (2 adds); σ; σ' = 1 - a² (2)
    "gru": 3 + 2 * 2 + 1 + 3 + 3,  # 3 biases; r, z = σ(· + u h); hn = u h + b_hn; n = tanh(z_n + r hn); (h - n) z + n
    "lstm": 4 + 4 + 4 + 3 + 2,  # 4 biases; + u h (4); σ σ tanh σ; c = f c + i g; h = o tanh c
}
BACKWARD = {  # at every step, the deltas from dh^t
    "elman": 1,  # sigma' * (.)
    "gru": 5 + 5 + 4 + 1,  # dh (1 - z)(1 - n²); dh (h - n) z (1 - z); delta_n hn r (1 - r); r delta_n
    "lstm": 1 + 5 + 4 * 4 + 1,  # tanh c; dc += dh o (1 - tanh² c); the four deltas; dc f
}
CARRIED = {  # at t > 1, into step t - 1 beside (u^l)^T delta's product: its add, and the GRU's dh^{t-1} += z dh
    "elman": 1,
    "gru": 1 + 2,
    "lstm": 1,
}


class Counted(np.ndarray):
    """A float64 parameter of a reference pass that logs each matrix product it is the left operand of: its
    name, whether transposed, the multiply-adds, and whether the right operand is all zero (no work)."""

    def __array_finalize__(self, obj):
        self.name = getattr(obj, "name", None)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [x.view(np.ndarray) if isinstance(x, Counted) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, Counted) else x for x in kwargs["out"])
        if ufunc is np.matmul and getattr(inputs[0], "name", None):
            left, right = plain
            transposed = left.strides[0] < left.strides[1]
            self.log.append((inputs[0].name, transposed, left.shape[0] * left.shape[1] * right.shape[1],
                             not np.any(right)))
        return getattr(ufunc, method)(*plain, **kwargs)


def counted_reference_pass(monkeypatch, cell, net, x, y):
    """The float64 reference's backprop of ``net``'s parameters, each w^l and u^l ``Counted``: its log of products."""
    log = []
    monkeypatch.setattr(Counted, "log", log, raising=False)
    params = net.parameters()
    tagged = {}
    for l, named in params.items():
        for name in ("w", "u"):
            if name in named:
                tagged[name, l] = np.asarray(named[name], dtype=np.float64).view(Counted)
                tagged[name, l].name = f"{name}{l}"
    weights = [tagged["w", l] for l in range(2, net.L + 1)]
    recurrent = [tagged["u", l] for l in net.hidden]
    biases = [params[l]["b"] for l in range(2, net.L + 1)]
    keep = types.SimpleNamespace(**{**vars(np), "asarray": np.asanyarray})  # the parameters stay Counted
    if cell == "elman":
        monkeypatch.setattr(reference, "np", keep)
        reference.backprop(weights, recurrent, biases, x, y, net.activation, net.cost, net.output_activation, "every")
    else:
        monkeypatch.setattr(gated_reference, "np", keep)
        b_hn = [params[l]["b_hn"] for l in net.hidden] if cell == "gru" else None
        gated_reference.backprop(cell, weights, recurrent, biases, b_hn, x, y, output="every")
    return log


@pytest.mark.parametrize("cell", CELLS)
def test_forward_and_chain_flops_are_the_references_products_and_the_equations_elementwise_work(monkeypatch, cell):
    """The products the float64 reference runs, from its parameters' own shapes (G·n_l rows): forward, w^l and u^l
    of the recurrent layers on nonzero states; the chain, every transposed product that feeds a delta. The gated
    reference also computes (w^2)^T delta^2 (layer 1 has no delta) and (u^l)^T delta_u^{l,1} (into dh^0, which
    nothing reads): left out."""
    x, y = batch(SIZES, B, 0, tau=TAU, output="every")
    with RNN(SIZES, cell=cell, activation="tanh", output="every", dtype="float64", backend="numpy", seed=2) as net:
        log = counted_reference_pass(monkeypatch, cell, net, x, y)
        units = sum(net.n[l] for l in net.hidden)
    recurrent = {f"{name}{l}" for name in "wu" for l in range(2, len(SIZES))}
    forward = sum(madds for name, transposed, madds, zero in log if name in recurrent and not transposed and not zero)
    chain = [(name, madds) for name, transposed, madds, zero in log if transposed and not zero and name != "w2"]
    if cell != "elman":
        for l in range(2, len(SIZES)):
            last = max(i for i, (name, _) in enumerate(chain) if name == f"u{l}")
            chain.pop(last)
    assert forward_flops(SIZES, TAU, B, cell=cell) == 2 * forward + FORWARD[cell] * units * TAU * B
    elementwise = (BACKWARD[cell] * TAU + CARRIED[cell] * (TAU - 1)) * units * B
    counted = bptt_counters(SIZES, TAU, B, 8, cell=cell)
    assert counted["flops"] == counted["sequential_flops"] == 2 * sum(madds for _, madds in chain) + elementwise


@pytest.mark.parametrize("cell", CELLS)
def test_gradient_flops_are_the_products_and_sums_of_the_parameters_shapes(cell):
    """nabla_w^l and nabla_u^l: a multiply-add per element of w^l over tau·B columns, of u^l over (tau - 1)·B (a^{l,0}
    = 0); nabla_b^l (and a GRU's nabla_b_hn^l) an add per element over tau·B; the output layer over its outputs."""
    with RNN(SIZES, cell=cell, output="every", dtype="float64", backend="numpy") as net:
        params = net.parameters()
    L, want = len(SIZES), 0
    for outputs in (TAU, 1):
        want = 0
        for l, named in params.items():
            steps = outputs if l == L else TAU
            want += 2 * named["w"].size * steps * B + named["b"].size * steps * B
            want += 2 * named["u"].size * (TAU - 1) * B if "u" in named else 0
            want += named["b_hn"].size * TAU * B if "b_hn" in named else 0
        assert gradient_flops(SIZES, TAU, B, outputs, cell=cell) == want


@pytest.mark.parametrize("cell", CELLS)
def test_each_pass_reports_the_counters_of_its_cell(cell):
    """``stats`` of a pass are ``counters(..., cell=net.cell)``; a GRU's and an LSTM's differ from the Elman's."""
    x, y = batch(SIZES, B, 0, tau=TAU, output="every")
    with RNN(SIZES, cell=cell, output="every", dtype="float64", backend="numpy") as net:
        for schedule in (BPTT(), Wavefront(), TimeScan(scan="doubling"), TimeScan(scan="reduction")):
            net.gradients(x, y, schedule)
            want = schedule.counters(SIZES, TAU, B, 8, "numpy", cell=cell)
            assert {key: schedule.stats[key] for key in want} == want, repr(schedule)
            elman = schedule.counters(SIZES, TAU, B, 8, "numpy")
            assert (want == elman) == (cell == "elman"), repr(schedule)
            assert schedule.stats["rounds"] == type(schedule).rounds_formula(
                len(SIZES) - 2, TAU, **({"scan": schedule.scan} if isinstance(schedule, TimeScan) else {}))


def cached_bytes(net):
    """The bytes of every buffer a schedule or solver has made in the plan (``plan.cache``)."""
    total = 0
    for value in net.plan(TAU, B).cache.values():
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, (list, tuple)):
                stack.extend(item)
            else:
                total += item.nbytes
    return total


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("made", [TimeScan(scan="doubling"), TimeScan(scan="reduction"), Wavefront(),
                                  TimeNewton(), TimeNewton(quasi=True)], ids=repr)
def test_memory_needed_is_what_the_buffers_take(cell, made):
    x, y = batch(SIZES, B, 0, tau=TAU, output="every")
    with RNN(SIZES, cell=cell, output="every", dtype="float64", backend="numpy") as net:
        if isinstance(made, TimeNewton):
            net.feedforward(x, solver=made)
            reported = made.stats["memory_bytes"]
        else:
            net.gradients(x, y, made)
            reported = made.stats["memory_bytes"]
        held = cached_bytes(net)
    assert made.memory_needed(SIZES, TAU, B, 8, cell=cell) == reported == held
    assert held > 0 or isinstance(made, Wavefront)  # a gated Wavefront runs on the pass's own buffers


@pytest.mark.parametrize("made", [TimeScan(), TimeNewton()], ids=repr)
def test_an_lstm_is_refused_one_byte_below_its_2n_state_and_runs_at_it(made):
    """N = 5: the LSTM's state is (h, c), S = 10 wide, its Jacobians (S, S): TimeScan holds 2·tau·B·(S^2 + S) values,
    TimeNewton 2·tau·B·4N (w x + b and u h) + 4·tau·B·S + 2·tau·B·S^2."""
    N, S = max(SIZES[1:-1]), 2 * max(SIZES[1:-1])
    need = 8 * TAU * B * (2 * S * S + 2 * S if isinstance(made, TimeScan) else 8 * N + 4 * S + 2 * S * S)
    assert made.memory_needed(SIZES, TAU, B, 8, cell="lstm") == need
    assert made.memory_needed(SIZES, TAU, B, 8) < need  # the Elman cell's n^2 Jacobians
    x, y = batch(SIZES, B, 0, tau=TAU, output="every")
    with RNN(SIZES, cell="lstm", output="every", dtype="float64", backend="numpy") as net:
        for limit in (need - 1, need):
            made.memory_limit = limit
            run = (lambda: net.feedforward(x, solver=made)) if isinstance(made, TimeNewton) else (
                lambda: net.gradients(x, y, made))
            if limit < need:
                with pytest.raises(ValueError, match=rf"needs {need} bytes .*\(LSTM\).* over memory_limit={limit}"):
                    run()
                if isinstance(made, TimeScan):  # refused before the pass's own buffers
                    assert not net._plans
                else:  # refused before the solver's, once the pass's plan is made
                    assert all(not plan.cache for plan in net._plans.values())
            else:
                run()
                assert cached_bytes(net) == need


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("quasi", [False, True])
def test_one_more_newton_iteration_of_a_gated_layer_costs_the_predicted_flops(cell, quasi):
    x, _ = batch(SIZES, B, 0, tau=8, output="every")
    flops = {}
    for m in (1, 2):
        with RNN(SIZES, cell=cell, output="every", dtype="float64", backend="numpy", recurrent_norm=2.0) as net, \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # stopped early, as asked
            solver = TimeNewton(quasi=quasi, max_iterations=m)
            net.feedforward(x, solver=solver)
        assert solver.stats["iterations_per_layer"] == [m, m]
        flops[m] = solver.stats["flops"]
    assert flops[2] - flops[1] == solver.iteration_flops(SIZES, 8, B, cell=cell) > solver.iteration_flops(SIZES, 8, B)
    assert solver.stats["sequential_flops"] == forward_flops(SIZES, 8, B, cell=cell)


def test_a_cell_the_counters_do_not_know_is_refused_by_name():
    for call in (lambda: BPTT().counters(SIZES, TAU, B, 8, cell="rnn"), lambda: forward_flops(SIZES, TAU, B, "rnn"),
                 lambda: TimeScan().memory_needed(SIZES, TAU, B, 8, cell="rnn"),
                 lambda: TimeNewton().iteration_flops(SIZES, TAU, B, cell="rnn")):
        with pytest.raises(ValueError, match="cell must be one of 'elman', 'gru', 'lstm'; got 'rnn'"):
            call()
    with pytest.raises(ValueError, match="NaumovRNN builds the Elman cell's layer operators .* GRU cell"):
        NaumovRNN().counters(SIZES, TAU, B, 8, cell="gru")
