"""The optimizers of ``core.optimizers`` on every network, against torch.optim on the same module.

Each network (``networks.network``, float64) and its ``to_torch()`` module take 12 steps on the same batches:
``train_step`` by our optimizer, and ``torch.optim`` (``foreach=False``) on the batch-mean quadratic cost,
``0.5 * sum((a - y)^2) / B``. The trained functions then agree within 1e-10 (relative) on a fresh batch, under
``Sequential()`` (the RNN's ``BPTT()``), ``Leapfrog(2)`` and ``Leapfrog(2, fused=True)``. torch.optim takes
every parameter of the module, as a user would write it: torch.nn.RNN has two biases per layer, our RNN their sum
as one b, and ``to_torch()`` holds ``bias_hh_l0`` at zero (a GRU's trains its n rows alone, our b_hn).
The gated cells agree under every schedule they take, and the MLP's one-pass sweep too. Fused and unfused steps
agree to the bit on the host; bad hyper-parameters and another optimizer on a state that exists refuse in one line,
changing nothing, and lr alone may be set again; a first step refused takes back the state it made; graph steps
read lr and t from device memory.
"""

import contextlib
import copy
import inspect
import io
import pickle

import numpy as np
import pytest

from helpers import same_arrays, to_numpy
from networks import NAMES, arrays, network, network_batch
from leapfrog_gpu import (MLP, SGD, Adam, AdamW, DagJacobi, ForwardNewton, Leapfrog, NaumovJacobi, NaumovScan,
                          Sequential, TimeNewton, TimeScan, Wavefront, load)
from leapfrog_gpu.backends import NumpyBackend, ops_numpy, timing
from leapfrog_gpu.core import controls, optimizer_state, optimizers
from leapfrog_gpu.mlp import plan as mlp_plan

torch = pytest.importorskip("torch", reason="the comparisons with torch.optim need torch", exc_type=ImportError)

STEPS = 12
OPTIMIZERS = {
    "decay": (lambda: SGD(0.05, weight_decay=0.01),  # no momentum: not the plain update, which has no decay
              lambda p: torch.optim.SGD(p, lr=0.05, weight_decay=0.01, foreach=False)),
    "momentum": (lambda: SGD(0.05, momentum=0.9, dampening=0.1),
                 lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1, foreach=False)),
    "nesterov+decay": (lambda: SGD(0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
                       lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01,
                                                 foreach=False)),
    "adam": (lambda: Adam(0.01, weight_decay=0.01),
             lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.01, foreach=False)),
    "adamw": (lambda: AdamW(0.01, betas=(0.8, 0.99)),
              lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.8, 0.99), foreach=False)),
}
SCHEDULES = {"sequential": Sequential(), "leapfrog": Leapfrog(2), "fused": Leapfrog(2, fused=True)}


def module_output(name, module, x):
    """The module's output for our batch ``x``, in our layout."""
    x = torch.from_numpy(x)
    return module(x.permute(0, 2, 1)).permute(0, 2, 1) if name == "RNN" else module(x.T).T


def torch_training(name, net, make, clip=None, copied=None):
    """``net``'s module (or ``copied(module)``) and a function that takes one torch.optim step of ``make`` on a batch
    (x, y)."""
    module = net.to_torch() if copied is None else copied(net.to_torch())
    optimizer = make(list(module.parameters()))

    def step(x, y):
        loss = 0.5 * ((module_output(name, module, x) - torch.from_numpy(y)) ** 2).sum() / x.shape[-1]
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(module.parameters(), clip, foreach=False)
        optimizer.step()

    return module, step


def twelve_steps_agree(name, net, kind, schedule, copied=None):
    """``net`` (the network ``name``, float64) and its module (``copied``, if given, makes a copy of it) take 12 steps
    of ``kind``: the same function after."""
    ours, theirs = OPTIMIZERS[kind]
    optimizer = ours()
    start = net.feedforward(network_batch(name, 7, seed=99, dtype=np.float64)[0])
    module, torch_step = torch_training(name, net, theirs, copied=copied)
    for step in range(STEPS):
        x, y = network_batch(name, 5, seed=step, dtype=np.float64)
        net.train_step(x, y, optimizer, schedule)
        torch_step(x, y)
    x, _ = network_batch(name, 7, seed=99, dtype=np.float64)
    got = net.feedforward(x)
    with torch.no_grad():
        want = module_output(name, module, x).numpy()
    assert np.max(np.abs(got - start)) > 1e-3 * np.max(np.abs(start))  # training moved the function
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-300)
    assert net.optimizer_state()["step"] == STEPS


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("kind", list(OPTIMIZERS))
def test_twelve_steps_agree_with_torch_optim(network_name, kind, schedule):
    with network(network_name, "numpy", dtype="float64") as net:
        twelve_steps_agree(network_name, net, kind, SCHEDULES[schedule])


HALVED = [512, 512, 8]
"""An MLP whose w^2 the main stream and the worker update in halves under ``Leapfrog(1, fused=True)`` on the host
(``MLPPlan.halved``: 512 * 512 elements), w^3 on the worker whole."""


@pytest.mark.parametrize("kind", ["nesterov+decay", "adam", "adamw"])
def test_an_update_in_halves_agrees_with_torch_optim_and_with_the_whole_update_to_the_bit(kind, monkeypatch):
    """Twelve steps, the last six as a graph: against torch.optim within 1e-10, and bitwise the same schedule's
    steps with no layer halved (``mlp.plan.HALVED`` beyond every layer)."""
    ours, theirs = OPTIMIZERS[kind]
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((HALVED[0], 5)), rng.random((HALVED[-1], 5))) for _ in range(STEPS)]
    x = rng.standard_normal((HALVED[0], 7))
    got = []
    for least in (mlp_plan.HALVED, 1 << 40):
        monkeypatch.setattr(mlp_plan, "HALVED", least)
        with MLP(HALVED, dtype="float64", seed=1) as net:
            module, torch_step = torch_training("MLP", net, theirs)
            optimizer = ours()
            for step, (xs, ys) in enumerate(batches):
                net.train_step(xs, ys, optimizer, Leapfrog(1, fused=True), graph=step >= STEPS // 2)
                torch_step(xs, ys)
            got.append([np.array(a) for named in net.parameters().values() for a in named.values()])
            with torch.no_grad():
                np.testing.assert_allclose(net.feedforward(x), module_output("MLP", module, x).numpy(), rtol=1e-10)
    assert_bitwise(*got)


@pytest.mark.parametrize("schedule", [*SCHEDULES.values(), Wavefront(), TimeScan()], ids=repr)
@pytest.mark.parametrize("kind", ["nesterov+decay", "adam", "adamw"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_gated_cells_agree_with_torch_optim(cell, kind, schedule):
    """The GRU's and the LSTM's parameters (a GRU's b_hn among them) as torch.nn.GRU's and LSTM's, under every
    schedule a gated cell takes (``Sequential()`` is the RNN's BPTT)."""
    with network("RNN", "numpy", dtype="float64", cell=cell) as net:
        twelve_steps_agree("RNN", net, kind, schedule)


def saved_and_loaded(module):
    """``module`` through ``torch.save`` and ``torch.load`` (a whole module: not weights only)."""
    kept = io.BytesIO()
    torch.save(module, kept)
    kept.seek(0)
    return torch.load(kept, weights_only=False)


@pytest.mark.parametrize("copied", [copy.deepcopy, saved_and_loaded], ids=["deepcopy", "torch.save"])
def test_a_copy_of_a_gru_module_trains_as_the_network_does(copied):
    """torch drops a tensor's hooks as it copies the tensor; the GRU layers of ``to_torch()`` register b_hn's again
    as their state comes back, so that a copy's bias_hh still trains its n rows alone."""
    with network("RNN", "numpy", dtype="float64", cell="gru") as net:
        twelve_steps_agree("RNN", net, "adam", Sequential(), copied)


@pytest.mark.parametrize("schedule", ["sequential", "leapfrog"])
@pytest.mark.parametrize("kind", ["momentum", "adam"])
def test_clipped_steps_agree_with_torch_clip_grad_norm(network_name, kind, schedule):
    """clip=0.05 clips the steps: the norms of the batch-mean gradients start between 0.3 and 4."""
    ours, theirs = OPTIMIZERS[kind]
    optimizer = ours()
    with network(network_name, "numpy", dtype="float64") as net:
        module, torch_step = torch_training(network_name, net, theirs, clip=0.05)
        for step in range(STEPS):
            x, y = network_batch(network_name, 5, seed=step, dtype=np.float64)
            net.train_step(x, y, optimizer, SCHEDULES[schedule], clip=0.05)
            torch_step(x, y)
        x, _ = network_batch(network_name, 7, seed=99, dtype=np.float64)
        with torch.no_grad():
            want = module_output(network_name, module, x).numpy()
        np.testing.assert_allclose(net.feedforward(x), want, rtol=1e-10, atol=1e-300)


def test_clip_under_a_fused_schedule_or_of_a_bad_value_is_refused(network_name):
    with network(network_name, "numpy") as net:
        x, y = network_batch(network_name, 5)
        with pytest.raises(ValueError, match=r"clip needs every gradient before any update, and Leapfrog\(k=2, "
                                             r"fused=True\)"):
            net.train_step(x, y, Adam(), Leapfrog(2, fused=True), clip=1.0)
        for bad, shown in ((0, 0), (-1.0, -1.0), (float("nan"), "nan"), (10**400, "an integer of 401 digits")):
            with pytest.raises(ValueError, match=r"^clip \(the gradient's largest norm\) must be finite and > 0, or "
                                                 rf"inf; got {shown}$"):  # 10**400: no float holds it
                net.train_step(x, y, Adam(), Leapfrog(2), clip=bad)
        with pytest.raises(ValueError, match=r"^eta \(the learning rate\) must be a finite number >= 0; got an "
                                             r"integer of 401 digits$"):
            net.sgd_step(x, y, 10**400)
        for bad in ("1.0", True, [1.0]):
            with pytest.raises(TypeError, match=r"^clip .* must be a number > 0 or None; got .* \((str|bool|list)\)$"):
                net.train_step(x, y, Adam(), Leapfrog(2), clip=bad)
        assert net.optimizer_state() == {"step": 0}


@pytest.mark.parametrize("schedule, unfused", [
    (Leapfrog(2, fused=True), "fused=False"), (Sequential(one_pass=True), "one_pass=False"),
    (Leapfrog(2, fused=True, one_pass=True), "fused=False and one_pass=False")], ids=repr)
def test_what_clip_and_check_finite_refuse_says_which_argument_unfuses_it(schedule, unfused):
    """The one-pass sweep is fused whatever ``fused`` says: its refusals name ``one_pass``, and ``fused`` too where
    it was given (one of them alone would leave the step fused)."""
    with network("MLP", "numpy") as net, network("MLP", "numpy", check_finite=True) as checked:
        x, y = network_batch("MLP", 1)
        with pytest.raises(ValueError, match=rf"^clip needs every .*: pass {unfused}$"):
            net.train_step(x, y, Adam(), schedule, clip=1.0)
        with pytest.raises(ValueError, match=rf"^check_finite needs an unfused .*; pass {unfused} or check_finite"):
            checked.train_step(x, y, Adam(), schedule)


@pytest.mark.parametrize("graph", [False, True])
def test_clip_of_inf_scales_nothing_as_torchs(network_name, graph):
    """``clip=inf``, torch's way to measure the norm without clipping: the steps of no clip, to the bit."""
    def run(clip):
        with network(network_name, "numpy") as net:
            for step in range(3):
                net.train_step(*network_batch(network_name, 5, seed=step), Adam(0.01), graph=graph, clip=clip)
            return arrays(net.parameters())

    assert_bitwise(run(float("inf")), run(None))


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("target", [1e15, 1e19, 1e30])
def test_a_float32_gradient_whose_squares_pass_float32s_range_is_clipped_as_torch_clips_it(target, graph):
    """The batch's gradients summed reach 1e21 and more, whose square float32 cannot hold: the norm's squares summed
    in float64 clip the step to the norm, as torch clips it in float64 (it was inf, which clipped it to nothing)."""
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    y = np.full((2, 64), target, np.float32)
    with MLP([3, 2], activation="tanh", output_activation="identity", backend="numpy", seed=0) as net:
        module = net.to_torch().double()
        net.train_step(x, y, SGD(0.1), graph=graph, clip=1.0)
        got = arrays(net.parameters())
    step = torch.optim.SGD(module.parameters(), lr=0.1)
    x64, y64 = torch.from_numpy(x.T.astype(np.float64)), torch.from_numpy(y.astype(np.float64))
    (0.5 * ((module(x64).T - y64) ** 2).sum() / 64).backward()
    torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
    step.step()
    want = [module[0].weight.detach().numpy(), module[0].bias.detach().numpy()]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2, fused=True), Sequential(one_pass=True)], ids=repr)
def test_a_float32_gradient_whose_square_passes_float32s_range_steps_adam_as_torch_does(schedule):
    """A gradient of 1e20 (its square beyond float32's 3.4e38), then ordinary ones: (g * (1 - beta2)) * g, torch's
    order, keeps v finite and the parameter moving, as torch.optim.Adam in float32 (g * g first made v inf, and the
    parameter froze for good)."""
    x = np.array([[0.5], [-1.0], [2.0]], np.float32)
    with MLP([3, 2], activation="tanh", output_activation="identity", backend="numpy", seed=0) as net:
        module = net.to_torch()
        step = torch.optim.Adam(module.parameters(), lr=0.01, foreach=False)
        for y in [np.array([[1e20], [-3e19]], np.float32)] + [np.zeros((2, 1), np.float32)] * 3:
            net.train_step(x, y, Adam(0.01), schedule)
            step.zero_grad()
            (0.5 * ((module(torch.from_numpy(x.T)).T - torch.from_numpy(y)) ** 2).sum()).backward()
            step.step()
        got, state = arrays(net.parameters()), net.optimizer_state()
    want = [module[0].weight.detach().numpy(), module[0].bias.detach().numpy()]
    assert all(np.isfinite(a).all() for a in arrays(state["exp_avg_sq"]))
    for a, b in zip(got + arrays(state["exp_avg_sq"]), want + [step.state[p]["exp_avg_sq"].numpy() for p in
                                                                module.parameters()]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def trained(name, optimizer, schedule, steps=4, dtype="float32", graph=False, rates=None, batch=5):
    """The parameters and optimizer state of ``name`` after ``steps`` steps, as host arrays in order."""
    with network(name, "numpy", dtype=dtype) as net:
        for step in range(steps):
            x, y = network_batch(name, batch, seed=step)
            net.train_step(x, y, optimizer if rates is None else at_rate(optimizer, rates[step]), schedule,
                           graph=graph)
        state = net.optimizer_state()
        return [np.array(a) for named in net.parameters().values() for a in named.values()] + \
            [np.array(a) for slot in optimizer.SLOTS for named in state[slot].values() for a in named.values()]


def at_rate(optimizer, lr):
    """``optimizer`` with the learning rate ``lr``: the same rule, so the same state and captured graph."""
    return type(optimizer)(**{**optimizer.hyper(), "lr": lr})


def assert_bitwise(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("kind", list(OPTIMIZERS))
@pytest.mark.parametrize("batch", [1, 5])
def test_fused_and_unfused_steps_agree_to_the_bit(network_name, kind, batch):
    """Parameters and state after 4 float32 steps, the same bits under every schedule (at B = 1 the MLP's fused
    update forms nabla_w = delta a^T element by element inside its compiled pass)."""
    make = OPTIMIZERS[kind][0]
    want = trained(network_name, make(), Sequential(), batch=batch)
    for schedule in (Leapfrog(2), Leapfrog(3, fused=True), Sequential(fused=True)):
        assert_bitwise(trained(network_name, make(), schedule, batch=batch), want)


def test_sgd_of_eta_is_sgd_step_to_the_bit(network_name):
    with network(network_name, "numpy") as a, network(network_name, "numpy") as b:
        for step in range(3):
            x, y = network_batch(network_name, 5, seed=step)
            a.train_step(x, y, SGD(0.3), Leapfrog(2, fused=True))
            b.sgd_step(x, y, 0.3, Leapfrog(2, fused=True))
        assert_bitwise([np.array(p) for n in a.parameters().values() for p in n.values()],
                       [np.array(p) for n in b.parameters().values() for p in n.values()])
        assert a.optimizer_state() == {"step": 0}


@pytest.mark.parametrize("make, words", [
    (lambda: SGD(-0.1), "lr must be a finite number >= 0"),
    (lambda: SGD(0.1, momentum=-1), "momentum must be"),
    (lambda: SGD(0.1, nesterov=True), "nesterov=True needs momentum > 0 and dampening 0"),
    (lambda: SGD(0.1, momentum=0.9, dampening=0.5, nesterov=True), "nesterov=True needs"),
    (lambda: SGD(float("nan")), "lr must be"),
    (lambda: Adam(betas=(0.9, 1.0)), r"betas must lie in \[0, 1\)"),
    (lambda: Adam(betas=(-0.1, 0.9)), r"betas must lie in \[0, 1\); got \(-0.1, 0.9\)"),
    (lambda: Adam(betas=(0.9, float("nan"))), r"betas must lie in \[0, 1\)"),
    (lambda: Adam(betas=(0.9, 10 ** 400)), r"betas must lie in \[0, 1\); got \(0.9, an integer of 401 digits\)$"),
    (lambda: Adam(betas=(0.9, 0.99, 0.999)), r"betas must be a pair of numbers \(beta1, beta2\)"),
    (lambda: Adam(eps=0), "eps must be > 0"),
    (lambda: Adam(eps=float("inf")), "eps must be > 0 and finite; got inf"),
    (lambda: AdamW(weight_decay=-1e-2), "weight_decay must be"),
    (lambda: SGD(10**400), "lr must be a finite number >= 0; got an integer of 401 digits$"),  # no float holds it
    (lambda: SGD(0.1, momentum=10**400), "momentum must be a finite number >= 0"),
    (lambda: Adam(eps=10**400), "eps must be > 0 and finite"),
    (lambda: setattr(Adam(), "lr", 10**400), "lr must be a finite number >= 0"),
    (lambda: SGD(-10**40), "lr must be a finite number >= 0; got a negative integer of 41 digits$"),
])
def test_bad_hyper_parameters_raise_one_line(make, words):
    with pytest.raises(ValueError, match=words) as raised:
        make()
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("make, words", [
    (lambda: SGD("0.1"), r"lr must be a finite number >= 0; got '0.1' \(str\)"),
    (lambda: SGD(True), r"lr must be a finite number >= 0; got True \(bool\)"),
    (lambda: SGD(0.1, momentum=None), r"momentum must be .*; got None \(NoneType\)"),
    (lambda: SGD(0.1, momentum=0.9, nesterov=1), "nesterov must be True or False; got 1"),
    (lambda: Adam(betas=0.9), r"betas must be a pair of numbers \(beta1, beta2\); got 0.9"),
    (lambda: Adam(betas=(0.9, "0.999")), "betas must be a pair of numbers"),
    (lambda: Adam(eps=True), r"eps must be > 0 and finite; got True \(bool\)"),
    (lambda: AdamW(weight_decay="0.01"), "weight_decay must be a finite number >= 0"),
    (lambda: SGD(np.zeros((2, 2))), r"lr must be .*; got array\(\[\[0., 0.\], \[0., 0.\]\]\) \(ndarray\)$"),
    (lambda: Adam(betas=np.zeros((2, 2))), r"betas must be a pair of numbers \(beta1, beta2\); got array\("),
    (lambda: optimizers.check(np.zeros((40, 40))), r"optimizer must be .*; got array\(\[\[0\., 0\., .*\.\.\.$"),
])
def test_hyper_parameters_of_the_wrong_type_raise_a_type_error(make, words):
    with pytest.raises(TypeError, match=words) as raised:
        make()
    assert "\n" not in str(raised.value)


def test_another_optimizer_on_a_state_that_exists_is_refused_and_changes_nothing(network_name):
    with network(network_name, "numpy") as net:
        x, y = network_batch(network_name, 5)
        net.train_step(x, y, Adam(0.01), Leapfrog(2))
        before, state = net.parameters(), net.optimizer_state()
        for other in (AdamW(0.01), Adam(0.01, betas=(0.8, 0.999)), SGD(0.1), SGD(0.1, momentum=0.9)):
            with pytest.raises(ValueError, match="holds the state of Adam") as raised:
                net.train_step(x, y, other, Leapfrog(2))
            assert "\n" not in str(raised.value)
            assert str(raised.value).endswith("to go on with it, net.set_optimizer_state(optimizer, {'step': 0}) first "
                                              "(its state starts anew)")
        with pytest.raises(ValueError, match="holds the state of Adam"):
            net.sgd_step(x, y, 0.1)
        after = net.parameters()
        assert all(np.array_equal(after[u][n], before[u][n]) for u in before for n in before[u])
        assert net.optimizer_state()["step"] == state["step"] == 1
        net.train_step(x, y, Adam(0.002), Leapfrog(2))  # another lr is the same rule: a schedule of the rate
        assert net.optimizer_state()["step"] == 2


def test_lr_alone_may_be_set_again_and_a_step_keeps_the_optimizer_as_it_came():
    """lr may change between steps, checked as it is set; every other hyper-parameter is fixed once made (a
    momentum set on a plain SGD would run the momentum rule with no buffer); ``held_optimizer()`` is a copy of the
    optimizer as the last step had it, whatever is set after, on the optimizer given or on that copy."""
    optimizer, sgd = Adam(0.01), SGD(0.1)
    for bad, error in ((None, TypeError), ("0.1", TypeError), (-0.1, ValueError), (float("nan"), ValueError)):
        with pytest.raises(error, match="^lr must be a finite number >= 0"):
            optimizer.lr = bad
    for name, value in (("betas", (0.5, 0.5)), ("eps", 1.0), ("weight_decay", 0.1)):
        with pytest.raises(AttributeError, match=rf"^{name} of Adam\(.*\) is fixed once made \(only lr may change"):
            setattr(optimizer, name, value)
    with pytest.raises(AttributeError, match=r"^momentum of SGD\(lr=0.1, .*\) is fixed once made"):
        sgd.momentum = 0.9
    with pytest.raises(AttributeError, match=r"^momentum of SGD\(lr=0.1, .*\) cannot be deleted: make another SGD"):
        del sgd.momentum  # and then set again, unchecked
    for name, value in (("DECOUPLED", True), ("SLOTS", ())):  # the rule's own: AdamW's update, under Adam's name
        with pytest.raises(AttributeError, match=rf"^{name} of Adam\(.*\) is fixed once made"):
            setattr(optimizer, name, value)
    with pytest.raises(AttributeError, match=r"^SLOTS of SGD\(.*\) is fixed once made"):
        sgd.SLOTS = ("momentum_buffer",)
    assert optimizer.hyper() == Adam(0.01).hyper() and sgd.plain and not optimizer.DECOUPLED and not sgd.SLOTS
    assert SGD(0.1, momentum=0.9).SLOTS == ("momentum_buffer",) and optimizer.SLOTS == ("exp_avg", "exp_avg_sq")
    with MLP([3, 4, 2], seed=1, backend="numpy") as net:
        net.train_step(*network_batch("MLP", 5), optimizer)
        optimizer.lr = 0.5
        assert net.held_optimizer().hyper() == Adam(0.01).hyper()
        net.held_optimizer().lr = 0.5  # a copy: neither what the network reports nor what it saves changes
        assert net.held_optimizer().hyper() == Adam(0.01).hyper()


def test_a_subclass_sets_what_its_class_defaults_while_it_is_made_and_nothing_after():
    """Fixed once made means once the whole chain of ``__init__`` has returned: a subclass may set in its own what
    its class defaults (``SLOTS``, say); copies and pickles keep both the values and the rule."""
    class Defaulted(Adam):
        amsgrad = False

        def __init__(self, lr=1e-3, amsgrad=False):
            super().__init__(lr)
            self.amsgrad, self.SLOTS = amsgrad, ("exp_avg", "exp_avg_sq")

    made = Defaulted(amsgrad=True)
    for twin in (made, copy.copy(made), copy.deepcopy(made)):
        assert twin.amsgrad and twin.SLOTS == Adam.SLOTS
        with pytest.raises(AttributeError, match=r"^amsgrad of Defaulted\(.*\) is fixed once made"):
            twin.amsgrad = False
        twin.lr = 0.5
    momentum = pickle.loads(pickle.dumps(SGD(0.1, momentum=0.9)))
    assert momentum.SLOTS == ("momentum_buffer",) and SGD.SLOTS == ()
    with pytest.raises(AttributeError, match="^momentum of SGD"):
        momentum.momentum = 0.0


def test_a_momentum_buffer_is_taken_from_step_1_as_torch_takes_one_it_holds():
    """A state with a momentum buffer B at step 1 steps as torch.optim.SGD holding B does; at step 0, where the
    first step sets the buffer to its gradient, a buffer other than 0 is refused, changing nothing. The step count
    may be a NumPy integer."""
    x, y = network_batch("MLP", 5, dtype=np.float64)
    with network("MLP", "numpy", dtype="float64") as net:
        ones = {u: {n: np.ones_like(a) for n, a in named.items()} for u, named in net.parameters().items()}
        optimizer = SGD(0.1, momentum=0.9, dampening=0.2)
        with pytest.raises(ValueError, match=r"^momentum_buffer of .* is not 0 at step 0, where the first step sets"):
            net.set_optimizer_state(optimizer, {"step": 0, "momentum_buffer": ones})
        assert net.optimizer_state() == {"step": 0} and net.held_optimizer() is None
        module = net.to_torch()
        theirs = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9, dampening=0.2, foreach=False)
        for p in module.parameters():
            theirs.state[p]["momentum_buffer"] = torch.ones_like(p)
        net.set_optimizer_state(optimizer, {"step": np.int64(1), "momentum_buffer": ones})
        net.train_step(x, y, optimizer)
        loss = 0.5 * ((module_output("MLP", module, x) - torch.from_numpy(y)) ** 2).sum() / x.shape[-1]
        loss.backward()
        theirs.step()
        with torch.no_grad():
            want = module_output("MLP", module, x).numpy()
        np.testing.assert_allclose(net.feedforward(x), want, rtol=1e-10, atol=1e-300)
        assert net.optimizer_state()["step"] == 2


@pytest.mark.parametrize("make, words", [
    (lambda: SGD(1e39), r"^lr=1e\+39 is beyond float32's largest number, 3.403e\+38, in which this "),
    (lambda: SGD(0.1, momentum=0.9, weight_decay=1e300), r"^weight_decay=1e\+300 is beyond float32's largest number"),
    (lambda: AdamW(1e39), r"^lr=1e\+39 is beyond float32's largest number"),
    (lambda: Adam(eps=1e-40), r"^eps 1e-40 is below float32's smallest normal number, 1.175e-38, which a GPU flushes"),
    (lambda: SGD(1e-40), r"^the learning rate 1e-40 is below float32's smallest normal number, 1.175e-38, which a "
                         r"GPU flushes to 0: give the learning rate >= 1.175e-38 or 0$"),  # the host's is not 0
    (lambda: Adam(1e-300), r"^the learning rate 1e-300 is below float32's smallest normal number"),
])
def test_hyper_parameters_a_float32_network_cannot_hold_are_refused_and_change_nothing(network_name, make, words):
    """inf in float32, or an eps or lr a GPU flushes to 0: refused before the step (it would end in NaN, or update on
    the host and not on a GPU), nothing changed; a float64 network takes them (a sum of float64s)."""
    x, y = network_batch(network_name, 5)
    with network(network_name, "numpy") as net:
        before = net.parameters()
        with pytest.raises(ValueError, match=words):
            net.train_step(x, y, make())
        after = net.parameters()
        assert all(np.array_equal(after[u][n], before[u][n]) for u in before for n in before[u])
        assert net.optimizer_state() == {"step": 0} and net.held_optimizer() is None
    with network(network_name, "numpy", dtype="float64") as net:
        net.train_step(x, y, Adam(1e-320, eps=1e-320))
        assert net.optimizer_state()["step"] == 1


REFUSING = {"MLP": NaumovScan(memory_limit=1), "RNN": TimeScan(memory_limit=1), "DagNet": DagJacobi(memory_limit=1)}
"""A schedule each network refuses at a batch (its buffers exceed its memory limit)."""


def refusal(name, refused):
    """(schedule, solver, the refusal's words) of a step the network ``name`` refuses: by its schedule's memory
    check (``"memory"``), by graph mode (``"capture"``: the MLP's ``NaumovJacobi(warm_start=True)``, once its
    plan is made; the others' while a timeline stamps launches, ``stamped``), or by its forward solver's memory
    check (``"solver"``; an MLP's step takes no solver at all)."""
    if refused == "memory":
        return REFUSING[name], None, "needs .* over memory_limit"
    if refused == "capture":
        if name == "MLP":
            return NaumovJacobi(warm_start=True), None, "graph=True cannot capture"
        return Leapfrog(2), None, "graph=True while a timing.Timeline stamps"
    if name == "RNN":
        return TimeScan(), TimeNewton(memory_limit=1), "needs .* over memory_limit"
    words = "takes a forward solver in feedforward only" if name == "MLP" else "needs .* over memory"
    return None, ForwardNewton(memory_limit=1), words


def stamped(net, stamps):
    """A block in which a ``timing.Timeline`` stamps ``net``'s launches (if ``stamps`` and ``net`` is no MLP)."""
    if stamps and not isinstance(net, MLP):
        return timing.Timeline(net.backend).step()
    return contextlib.nullcontext()


@pytest.mark.parametrize("refused, graph", [("memory", False), ("memory", True), ("capture", True),
                                            ("solver", False)])
def test_a_step_its_schedule_or_solver_refuses_changes_no_state(network_name, refused, graph):
    """A step refused (``refusal``) leaves no state, no step count and no optimizer held: the next step, by
    another optimizer even, is a fresh network's to the bit."""
    x, y = network_batch(network_name, 5)
    schedule, solver, words = refusal(network_name, refused)
    with network(network_name, "numpy", dtype="float64") as net, \
            network(network_name, "numpy", dtype="float64") as fresh:
        before = net.parameters()
        with pytest.raises((ValueError, TypeError), match=words), stamped(net, refused == "capture"):
            net.train_step(x, y, Adam(0.01), schedule, graph=graph, solver=solver)
        assert net.optimizer_state() == {"step": 0} and net.held_optimizer() is None
        after = net.parameters()
        assert all(np.array_equal(after[u][n], before[u][n]) for u in before for n in before[u])
        for model in (net, fresh):
            model.train_step(x, y, SGD(0.05, momentum=0.9, dampening=0.5), Leapfrog(2), graph=graph)
        assert net.optimizer_state()["step"] == 1
        assert_bitwise(arrays(net.parameters()) + arrays(net.optimizer_state()["momentum_buffer"]),
                       arrays(fresh.parameters()) + arrays(fresh.optimizer_state()["momentum_buffer"]))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the batch that overflows
@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("make", [lambda: SGD(0.05, momentum=0.9, dampening=0.5), lambda: Adam(0.01)],
                         ids=["momentum", "adam"])
def test_updates_refused_by_check_finite_take_no_step(network_name, make, graph):
    """An update ``check_finite`` refuses (a batch whose gradients overflow), and the one enqueued behind it, are
    not steps: once ``synchronize()`` has raised, the step count is the one before them, and the steps after
    are those of a network that never met them, to the bit (t decides momentum's first buffer, Adam's bias
    corrections)."""
    good = [network_batch(network_name, 5, seed=step, dtype=np.float64) for step in range(3)]
    x, y = good[0]
    with network(network_name, "numpy", dtype="float64", check_finite=True) as net, \
            network(network_name, "numpy", dtype="float64") as unbroken:
        optimizer = make()
        for model in (net, unbroken):
            model.train_step(x, y, optimizer, graph=graph)
        net.train_step(x * 1e200, y, optimizer, graph=graph)
        net.train_step(x, y, optimizer, graph=graph)
        with pytest.raises(FloatingPointError, match="holds NaN or Inf; update refused"):
            net.synchronize()
        assert net.optimizer_state()["step"] == 1
        for x, y in good[1:]:
            for model in (net, unbroken):
                model.train_step(x, y, optimizer, graph=graph)
        got, want = net.optimizer_state(), unbroken.optimizer_state()
        assert got["step"] == want["step"] == 3
        slots = [slot for slot in want if slot != "step"]
        assert_bitwise(arrays(net.parameters()) + [a for slot in slots for a in arrays(got[slot])],
                       arrays(unbroken.parameters()) + [a for slot in slots for a in arrays(want[slot])])


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the batch that overflows
@pytest.mark.parametrize("setter", ["set_parameters", "set_optimizer_state"])
def test_a_refusal_pending_is_raised_by_a_setter_which_then_sets_nothing(network_name, setter):
    """A step ``check_finite`` refused, not yet waited for: setting the parameters or the optimizer state (the reset
    after a divergence) raises that refusal and changes nothing, as ``synchronize`` would; called again, it sets,
    and the next step is, to the bit, that of a network that made the same calls and never met the bad batch."""
    x, y = network_batch(network_name, 5, seed=0, dtype=np.float64)
    with network(network_name, "numpy", dtype="float64", check_finite=True) as net, \
            network(network_name, "numpy", dtype="float64") as unbroken:
        optimizer = Adam(0.01)
        for model in (net, unbroken):
            model.train_step(x, y, optimizer)
        kept = net.parameters()

        def set_(model):
            if setter == "set_parameters":
                model.set_parameters(kept)
            else:
                model.set_optimizer_state(optimizer, {"step": 0})

        net.train_step(x * 1e200, y, optimizer)
        with pytest.raises(FloatingPointError, match="holds NaN or Inf; update refused"):
            set_(net)
        assert_bitwise(arrays(net.parameters()), arrays(kept))
        assert net.optimizer_state()["step"] == 1
        for model in (net, unbroken):
            set_(model)
            model.train_step(x, y, optimizer)
        assert net.optimizer_state()["step"] == unbroken.optimizer_state()["step"] > 0
        assert_bitwise(arrays(net.parameters()), arrays(unbroken.parameters()))
        assert not same_arrays(arrays(net.parameters()), arrays(kept))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the batch that overflows
@pytest.mark.parametrize("rates", [1024, 2])
def test_the_held_optimizer_has_the_lr_of_the_last_step_that_updated(monkeypatch, tmp_path, network_name, rates):
    """``held_optimizer()`` (what ``save`` writes) gives the lr of the last step that updated: not that of a step
    ``check_finite`` refused, nor of steps enqueued behind it; and once a state is set, the lr of the optimizer that
    set it, of the same rule or another. ``rates=2``: the lrs noted between two reads of the count cut short."""
    monkeypatch.setattr(optimizer_state, "RATES", rates)
    x, y = network_batch(network_name, 5, dtype=np.float64)
    with network(network_name, "numpy", dtype="float64", check_finite=True) as net:
        for lr in (0.01, 0.02, 0.03):
            net.train_step(x, y, Adam(lr))
        net.train_step(x * 1e200, y, Adam(0.5))  # refused, and the step behind it does not run
        net.train_step(x, y, Adam(0.6))
        assert net.held_optimizer().lr == 0.6  # as enqueued
        assert len(net._rates) <= rates  # the lrs noted are read, and forgotten, every ``rates`` changes
        with pytest.raises(FloatingPointError, match="holds NaN or Inf; update refused"):
            net.synchronize()
        assert net.held_optimizer().hyper() == Adam(0.03).hyper() and net.optimizer_state()["step"] == 3
        net.set_optimizer_state(Adam(0.3), {"step": 0})
        assert net.held_optimizer().hyper() == Adam(0.3).hyper()
        net.set_optimizer_state(SGD(0.1, momentum=0.9), {"step": 0})
        net.set_optimizer_state(Adam(0.2), {"step": 0})
        assert net.held_optimizer().hyper() == Adam(0.2).hyper()
        net.train_step(x, y, Adam(0.25))
        net.save(tmp_path / "net.npz")
    with load(tmp_path / "net.npz", backend="numpy") as loaded:
        assert loaded.held_optimizer().hyper() == Adam(0.25).hyper()


@pytest.mark.parametrize("t", [1, 2, 2**23 - 1, 2**23, 2**23 + 2**22 - 1, 2**24 - 1, 2**24, 2**24 + 1, 2**40 + 3])
def test_the_device_holds_every_step_count_as_a_float32_tag_that_tells_steps_apart(t):
    """The tag of t is a float32 exactly, 1 at the first step alone, apart from the previous step's, and read back
    as t by a host that enqueued up to a few thousand steps more."""
    tags = [controls.tag(s) for s in range(max(1, t - 3), t + 4)]
    assert all(float(np.float32(value)) == value for value in tags)
    assert all(a != b for a, b in zip(tags, tags[1:]))
    assert (controls.tag(t) == 1) == (t == 1)
    for enqueued in (t, t + 1, t + 4000):
        assert controls.untag(int(np.float32(controls.tag(t))), enqueued) == t


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the batch that overflows
def test_a_refusal_is_read_before_the_steps_behind_it_wrap_the_tags(monkeypatch):
    """Tags past ``TAGS`` cycle over ``TAGS // 2`` counts, so the network reads its count every ``TAGS // 4`` steps
    (here 16, 8 and 4): a refused step, and every step behind it until then, is raised within 4 steps, the count
    right (read after 8 or more such steps, it came back as a later one's)."""
    monkeypatch.setattr(controls, "TAGS", 16)
    x, y = network_batch("MLP", 5, dtype=np.float64)
    with network("MLP", "numpy", dtype="float64", check_finite=True) as net:
        optimizer = Adam(0.01)
        for _ in range(20):
            net.train_step(x, y, optimizer)
        net.synchronize()
        net.train_step(x * 1e200, y, optimizer)
        with pytest.raises(FloatingPointError, match="holds NaN or Inf; update refused"):
            for _ in range(12):
                net.train_step(x, y, optimizer)
        assert net.optimizer_state()["step"] == 20


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the batch that overflows
@pytest.mark.parametrize("make", [lambda: Adam(0.01), lambda: SGD(0.1, momentum=0.9)], ids=["adam", "momentum"])
def test_a_float32_network_counts_steps_past_two_to_the_24(make):
    """A run past 2^24 steps (float32 holds no integer beyond it and the next apart): its steps are counted, a
    refused one is not, and each updates as the same steps at 2^20 do (Adam's bias corrections are 1 at either;
    momentum's first step is step 1 alone)."""
    x, y = network_batch("MLP", 5, dtype=np.float32)
    with network("MLP", "numpy", check_finite=True) as far, network("MLP", "numpy") as near:
        optimizer = make()
        for model in (far, near):
            model.train_step(x, y, optimizer)
        state = far.optimizer_state()
        for model, steps in ((far, 2**24), (near, 2**20)):
            model.set_optimizer_state(optimizer, {**state, "step": steps})
        far.train_step(x * 1e30, y, optimizer)
        with pytest.raises(FloatingPointError, match="holds NaN or Inf; update refused"):
            far.synchronize()
        assert far.optimizer_state()["step"] == 2**24
        for _ in range(3):
            for model in (far, near):
                model.train_step(x, y, optimizer)
        got, want = far.optimizer_state(), near.optimizer_state()
        assert (got.pop("step"), want.pop("step")) == (2**24 + 3, 2**20 + 3)
        assert_bitwise(arrays(far.parameters()) + [a for slot in got for a in arrays(got[slot])],
                       arrays(near.parameters()) + [a for slot in want for a in arrays(want[slot])])


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the batch that overflows
@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("then", ["adam", "adamw", "momentum"])
def test_a_refused_first_step_takes_back_the_state_it_made(network_name, then, graph):
    """An Adam first step that ``check_finite`` refuses leaves no state and no optimizer held, as a network that
    never met it: the next steps, by Adam again (whose graph the refused step captured), by AdamW or by SGD with
    momentum, are a fresh network's to the bit."""
    x, y = network_batch(network_name, 5, dtype=np.float64)
    with network(network_name, "numpy", dtype="float64", check_finite=True) as net, \
            network(network_name, "numpy", dtype="float64") as fresh:
        net.train_step(x * 1e200, y, OPTIMIZERS["adam"][0](), graph=graph)
        with pytest.raises(FloatingPointError, match="holds NaN or Inf; update refused"):
            net.synchronize()
        assert net.optimizer_state() == {"step": 0} and net.held_optimizer() is None
        optimizer = OPTIMIZERS[then][0]()
        for step in range(2):
            for model in (net, fresh):
                model.train_step(*network_batch(network_name, 5, seed=step, dtype=np.float64), optimizer, graph=graph)
        got, want = net.optimizer_state(), fresh.optimizer_state()
        assert got["step"] == want["step"] == 2 and set(got) == set(want)
        slots = [slot for slot in want if slot != "step"]
        assert_bitwise(arrays(net.parameters()) + [a for slot in slots for a in arrays(got[slot])],
                       arrays(fresh.parameters()) + [a for slot in slots for a in arrays(want[slot])])


@pytest.mark.parametrize("then", ["adam", "momentum"])
def test_a_refused_first_step_after_plain_sgd_dropped_a_state_counts_from_0(network_name, then):
    """Five Adam steps, their state dropped by ``set_optimizer_state(SGD(0.1), {"step": 0})``, then a first step
    ``check_finite`` refuses: the count is 0 and the state goes, and the next steps are a fresh network's, given the
    same parameters, to the bit (the device kept the Adam steps' count, 5, which the refusal took back to)."""
    x, y = network_batch(network_name, 5, dtype=np.float64)
    with network(network_name, "numpy", dtype="float64", check_finite=True) as net, \
            network(network_name, "numpy", dtype="float64") as fresh:
        for step in range(5):
            net.train_step(*network_batch(network_name, 5, seed=step, dtype=np.float64), Adam(0.01))
        net.set_optimizer_state(SGD(0.1), {"step": 0})
        net.train_step(x * 1e200, y, OPTIMIZERS[then][0]())
        with pytest.raises(FloatingPointError, match="holds NaN or Inf; update refused"):
            net.synchronize()
        assert net.optimizer_state() == {"step": 0} and net.held_optimizer() is None
        fresh.set_parameters(net.parameters())
        for step in range(3):
            for model in (net, fresh):
                model.train_step(*network_batch(network_name, 5, seed=step, dtype=np.float64), OPTIMIZERS[then][0]())
        got, want = net.optimizer_state(), fresh.optimizer_state()
        assert got["step"] == want["step"] == 3
        slots = [slot for slot in want if slot != "step"]
        assert_bitwise(arrays(net.parameters()) + [a for slot in slots for a in arrays(got[slot])],
                       arrays(fresh.parameters()) + [a for slot in slots for a in arrays(want[slot])])


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the batch that overflows
def test_a_state_set_before_a_refused_first_step_is_kept(network_name):
    """A state the caller set is the caller's: a first step refused after it takes back the step, not the state
    (here set on a network whose earlier state a step made)."""
    x, y = network_batch(network_name, 5, dtype=np.float64)
    with network(network_name, "numpy", dtype="float64", check_finite=True) as net:
        net.train_step(x, y, Adam(0.01))
        halves = {u: {n: np.full_like(a, 0.5) for n, a in named.items()} for u, named in net.parameters().items()}
        moments = {"exp_avg": halves, "exp_avg_sq": halves}
        net.set_optimizer_state(Adam(0.01), {"step": 0, **moments})
        net.train_step(x * 1e200, y, Adam(0.01))
        with pytest.raises(FloatingPointError, match="update refused"):
            net.synchronize()
        state = net.optimizer_state()
        assert state["step"] == 0 and net.held_optimizer() is not None
        assert all((a == 0.5).all() for slot in moments for a in arrays(state[slot]))


def raising(monkeypatch, name):
    """Keyword arguments of ``train_step`` for a step of the network ``name`` that raises as it runs: a strict
    forward solver stopped short of tol=0 after one iteration (RNN, DagNet); the MLP's forward op, planted to
    raise (the MLP takes no solver)."""
    if name == "RNN":
        return {"schedule": TimeScan(), "solver": TimeNewton(tol=0.0, max_iterations=1, strict=True)}
    if name == "DagNet":
        return {"solver": ForwardNewton(tol=0.0, max_iterations=1, strict=True)}

    def forward(*args):
        raise RuntimeError("planted: the forward pass fails")

    monkeypatch.setattr(ops_numpy, "forward", forward)  # read as the step is enqueued
    return {}


@pytest.mark.parametrize("mode", ["threads", "serial"])
def test_a_step_that_fails_as_it_runs_takes_no_step(monkeypatch, network_name, mode):
    """A step that raises on a stream (``raising``) is not a step, nor is one enqueued behind it (nothing runs
    after a failure): once the error is raised, by ``synchronize()`` or, in the serial mode, by the step itself,
    the step count is that of the last step that updated, and the steps after are those of a network that never
    met the failure, to the bit (t decides Adam's bias corrections)."""
    good = [network_batch(network_name, 5, seed=step, dtype=np.float64) for step in range(3)]
    with NumpyBackend(mode=mode) as backend, network(network_name, backend, dtype="float64") as net, \
            network(network_name, "numpy", dtype="float64") as unbroken:
        for model in (net, unbroken):
            model.train_step(*good[0], Adam(0.01))
        with monkeypatch.context() as patch, pytest.raises(RuntimeError, match="stopped after|planted"):
            net.train_step(*good[0], Adam(0.02), **raising(patch, network_name))
            net.train_step(*good[0], Adam(0.03))
            net.synchronize()
        assert net.held_optimizer().lr == 0.01 and net.optimizer_state()["step"] == 1  # the lr of the step that ran
        for x, y in good[1:]:
            for model in (net, unbroken):
                model.train_step(x, y, Adam(0.01))
        got, want = net.optimizer_state(), unbroken.optimizer_state()
        assert got["step"] == want["step"] == 3
        assert_bitwise(arrays(net.parameters()) + arrays(got["exp_avg"]) + arrays(got["exp_avg_sq"]),
                       arrays(unbroken.parameters()) + arrays(want["exp_avg"]) + arrays(want["exp_avg_sq"]))


def test_steps_a_failure_on_a_shared_backend_stopped_are_said_and_not_counted(monkeypatch, network_name):
    """Two networks on one backend: one's step fails as it runs (``raising``), which stops every operation queued
    behind it, the other's step too. The first to synchronize raises the failure; the other then says that its
    step did not run, and goes on as a network that never took it, to the bit."""
    good = [network_batch(network_name, 5, seed=step, dtype=np.float64) for step in range(2)]
    with NumpyBackend() as backend, network(network_name, backend, dtype="float64") as failing, \
            network(network_name, backend, dtype="float64", seed=2) as other, \
            network(network_name, "numpy", dtype="float64", seed=2) as unbroken:
        for model in (failing, other, unbroken):  # the failing one's schedule makes its buffers here
            model.train_step(*good[0], Adam(0.01), TimeScan() if model is failing and network_name == "RNN" else None)
            model.synchronize()
        with monkeypatch.context() as patch:
            failing.train_step(*good[0], Adam(0.01), **raising(patch, network_name))
        other.train_step(*good[1], Adam(0.02))
        with pytest.raises(RuntimeError, match="stopped after|planted"):
            failing.synchronize()
        with pytest.raises(RuntimeError, match=r"^1 step\(s\) of this \w+ did not run: a failure on the backend"):
            other.synchronize()
        other.synchronize()  # said once
        assert other.held_optimizer().lr == 0.01  # not the lr of the step that did not run
        assert failing.optimizer_state()["step"] == other.optimizer_state()["step"] == 1
        for model in (other, unbroken):
            model.train_step(*good[1], Adam(0.01))
        got, want = other.optimizer_state(), unbroken.optimizer_state()
        assert got["step"] == want["step"] == 2
        assert_bitwise(arrays(other.parameters()) + arrays(got["exp_avg"]),
                       arrays(unbroken.parameters()) + arrays(want["exp_avg"]))


def test_the_state_is_shaped_as_the_parameters_and_resumes_bitwise(network_name):
    """optimizer_state() after 2 steps, taken into a fresh network with its parameters, continues as the
    network that took 4 steps in a row does."""
    want = trained(network_name, Adam(0.01), Leapfrog(2), steps=4)
    with network(network_name, "numpy") as net, network(network_name, "numpy") as resumed:
        for step in range(2):
            net.train_step(*network_batch(network_name, 5, seed=step), Adam(0.01), Leapfrog(2))
        state = net.optimizer_state()
        params = net.parameters()
        assert set(state) == {"step", "exp_avg", "exp_avg_sq"} and state["step"] == 2
        for slot in ("exp_avg", "exp_avg_sq"):
            assert {u: {n: a.shape for n, a in named.items()} for u, named in state[slot].items()} == \
                {u: {n: a.shape for n, a in named.items()} for u, named in params.items()}
        resumed.set_parameters(params)
        resumed.set_optimizer_state(Adam(0.01), state)
        for step in range(2, 4):
            resumed.train_step(*network_batch(network_name, 5, seed=step), Adam(0.01), Leapfrog(2))
        got = [np.array(a) for named in resumed.parameters().values() for a in named.values()]
        final = resumed.optimizer_state()
        got += [np.array(a) for slot in ("exp_avg", "exp_avg_sq") for named in final[slot].values()
                for a in named.values()]
        assert_bitwise(got, want)


@pytest.mark.parametrize("make", [lambda: Adam(0.01), lambda: SGD(0.05, momentum=0.9)], ids=["adam", "momentum"])
def test_the_state_before_any_step_taken_back_in_is_a_fresh_networks(network_name, make):
    """``{"step": 0}``, what ``optimizer_state()`` gives before any step, set on a network that has taken steps:
    its slots are 0 again, and the next step is a fresh network's from the same parameters, to the bit."""
    with network(network_name, "numpy") as net, network(network_name, "numpy") as fresh:
        for step in range(2):
            net.train_step(*network_batch(network_name, 5, seed=step), make())
        net.set_optimizer_state(make(), {"step": 0})
        fresh.set_parameters(net.parameters())
        for model in (net, fresh):
            model.train_step(*network_batch(network_name, 5, seed=7), make())
        got, want = net.optimizer_state(), fresh.optimizer_state()
        slots = [slot for slot in want if slot != "step"]
        assert got["step"] == want["step"] == 1 and set(got) == set(want)
        assert_bitwise(arrays(net.parameters()) + [a for slot in slots for a in arrays(got[slot])],
                       arrays(fresh.parameters()) + [a for slot in slots for a in arrays(want[slot])])


@pytest.mark.parametrize("then", [lambda: SGD(0.1, momentum=0.9, nesterov=True), lambda: AdamW(0.01),
                                  lambda: Adam(0.01, betas=(0.8, 0.99)), lambda: SGD(0.1)],
                         ids=["nesterov", "adamw", "other-betas", "plain"])
def test_another_optimizers_state_at_step_0_switches_to_it(network_name, then):
    """Pretrained by Adam (its steps still queued: a deferred backend runs them when waited for), then
    ``set_optimizer_state(other, {"step": 0})``: the Adam steps run on their state, which then goes, and the steps
    by ``other`` are those of a fresh network given the parameters of the same Adam steps, to the bit (a step by it
    was refused for good)."""
    with NumpyBackend(mode="deferred") as deferred, network(network_name, deferred) as net, \
            network(network_name, "numpy") as pretrained, network(network_name, "numpy") as fresh:
        for model in (net, pretrained):
            for step in range(4):
                model.train_step(*network_batch(network_name, 5, seed=step), Adam(0.01), Leapfrog(2))
                if step == 1:
                    model.synchronize()  # two steps have made the state; two are queued on it
        net.set_optimizer_state(then(), {"step": 0})
        fresh.set_parameters(pretrained.parameters())
        for model in (net, fresh):
            for step in range(3):
                model.train_step(*network_batch(network_name, 5, seed=9 + step), then())
        got, want = net.optimizer_state(), fresh.optimizer_state()
        assert set(got) == set(want) and got["step"] == want["step"] == (0 if then().plain else 3)
        slots = [slot for slot in want if slot != "step"]
        assert_bitwise(arrays(net.parameters()) + [a for slot in slots for a in arrays(got[slot])],
                       arrays(fresh.parameters()) + [a for slot in slots for a in arrays(want[slot])])
        assert repr(net.held_optimizer()) == repr(fresh.held_optimizer())
        if then().plain:
            assert not net._controls.state  # the Adam state goes


@pytest.mark.parametrize("steps", [0, 3])
def test_a_slot_that_lacks_a_parameter_is_refused_and_changes_nothing(network_name, steps):
    """A slot given for some parameters only would leave the others' as they were (another step's moments under this
    count's bias corrections): refused, naming the first it lacks."""
    with network(network_name, "numpy") as net:
        for step in range(2):
            net.train_step(*network_batch(network_name, 5, seed=step), Adam(0.01))
        before = net.optimizer_state()
        unit, names = next(iter(before["exp_avg"].items()))
        name, value = next(iter(names.items()))
        part = {unit: {name: np.zeros_like(value)}}
        with pytest.raises(ValueError, match=r"^exp_avg holds no (?!.*\n).*: a slot holds every parameter's, as "
                                             r"optimizer_state\(\) gives it$"):
            net.set_optimizer_state(Adam(0.01), {"step": steps, "exp_avg": part, "exp_avg_sq": part})
        after = net.optimizer_state()
        assert after["step"] == before["step"]
        assert_bitwise([a for slot in ("exp_avg", "exp_avg_sq") for a in arrays(after[slot])],
                       [a for slot in ("exp_avg", "exp_avg_sq") for a in arrays(before[slot])])


def test_a_bad_state_is_refused_and_changes_nothing():
    with MLP([3, 4, 2], seed=1, backend="numpy") as net:
        state = {"step": 3, "exp_avg": {2: {"w": np.zeros((4, 3))}}, "exp_avg_sq": {2: {"w": np.zeros((4, 2))}}}
        with pytest.raises(ValueError, match=r"exp_avg_sq of .* must have shape \(4, 3\)"):
            net.set_optimizer_state(Adam(), state)
        with pytest.raises(ValueError, match="holds 'step' and"):
            net.set_optimizer_state(SGD(0.1, momentum=0.9), state)
        state["exp_avg_sq"] = {2: {"w": np.zeros((4, 3))}, 3: {"b": np.full(2, -1e-30)}}
        with pytest.raises(ValueError, match=r"^exp_avg_sq of .*3.* holds a negative number; Adam's second moment"):
            net.set_optimizer_state(Adam(), state)
        for steps in (2 ** 63, 2 ** 1024):  # 1 - beta1 ** t overflowed past 2**1024, in every step after it
            with pytest.raises(ValueError, match=r"^an optimizer state is a dict with 'step', an int from 0 to 2\*\*63"):
                net.set_optimizer_state(Adam(), {"step": steps})
        state["step"] = 1.0  # the state's arrays are not quoted: their reprs run over lines
        for bad, got in ((state, "an int from 0 to 2\\*\\*63 - 1; got 'step' 1.0$"), ({"step": "3"}, "got 'step' '3'$"),
                         ([state], "as optimizer_state\\(\\) gives it; got list$"), (3, "gives it; got int$")):
            with pytest.raises(TypeError, match=r"^an optimizer state is a dict with 'step', .*" + got):
                net.set_optimizer_state(Adam(), bad)
        with pytest.raises(ValueError, match=r"^an optimizer state is a dict with 'step', as optimizer_state\(\) gives "
                                             r"it; got one without it \(\['exp_avg', 'exp_avg_sq'\]\)$"):
            net.set_optimizer_state(Adam(), {"exp_avg": {}, "exp_avg_sq": {}})
        with pytest.raises(TypeError, match=r"^exp_avg must be a dict \{unit: \{name: array\}\} as parameters\(\) "
                                            "gives; got int$"):
            net.set_optimizer_state(Adam(), {"step": 1, "exp_avg": 3, "exp_avg_sq": 3})
        assert net.optimizer_state() == {"step": 0}


def test_a_count_of_steps_for_plain_sgd_is_refused_and_changes_nothing(network_name):
    """Plain SGD keeps no state, and its count stays 0: a count given for it was taken, then dropped, and the Adam
    state held went."""
    with network(network_name, "numpy", dtype="float64") as net:
        net.train_step(*network_batch(network_name, 5), Adam(0.01))
        before = net.optimizer_state()
        with pytest.raises(ValueError, match=r"^SGD\(lr=0.1, .*\) keeps no state, whose count of steps stays 0 .*; got "
                                             r"'step' 7: give \{'step': 0\}$"):
            net.set_optimizer_state(SGD(0.1), {"step": 7})
        after = net.optimizer_state()
        assert after["step"] == before["step"] == 1
        assert_bitwise(arrays(after["exp_avg"]), arrays(before["exp_avg"]))


def test_a_step_past_the_last_count_a_state_takes_is_refused_and_changes_nothing(tmp_path):
    """At step 2**63 - 1, the last count ``set_optimizer_state`` and a file take, a step is refused in one line: it made
    a state of step 2**63, which the network saved and its load then refused."""
    x, y = network_batch("MLP", 3, seed=0, dtype=np.float64)
    with network("MLP", "numpy", dtype="float64") as net:
        zeros = {unit: {name: np.zeros(a.shape) for name, a in named.items()} for unit, named in net.parameters().items()}
        net.set_optimizer_state(Adam(0.01), {"step": 2 ** 63 - 1, "exp_avg": zeros, "exp_avg_sq": zeros})
        before = arrays(net.parameters())
        with pytest.raises(ValueError, match=r"^this MLP's optimizer state is at step 2\*\*63 - 1, the last a state "
                                             r"counts \(and a file holds\): set_optimizer_state\(optimizer, "):
            net.train_step(x, y, Adam(0.01))
        assert net.optimizer_state()["step"] == 2 ** 63 - 1
        assert_bitwise(arrays(net.parameters()), before)
        with load(net.save(tmp_path / "net"), backend="numpy") as loaded:
            assert loaded.optimizer_state()["step"] == 2 ** 63 - 1


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("schedule", [Sequential(one_pass=True), Leapfrog(2, one_pass=True)], ids=repr)
@pytest.mark.parametrize("kind", list(OPTIMIZERS))
def test_the_one_pass_sweep_agrees_with_torch_optim(monkeypatch, kind, schedule, batch):
    """The MLP's sweep updating each weight matrix by the optimizer block by block (a scratch of 16 elements: a
    block of two rows or fewer) as it reads the block for (5): 12 steps as torch.optim's within 1e-10."""
    monkeypatch.setattr(ops_numpy, "SCRATCH", 16)
    ours, theirs = OPTIMIZERS[kind]
    optimizer = ours()
    with network("MLP", "numpy", dtype="float64") as net:
        module, torch_step = torch_training("MLP", net, theirs)
        for step in range(STEPS):
            x, y = network_batch("MLP", batch, seed=step, dtype=np.float64)
            net.train_step(x, y, optimizer, schedule)
            torch_step(x, y)
        assert net.plan(batch).sweep_scratch.size < max(w.size for w in net.weights)  # several blocks a matrix
        x, _ = network_batch("MLP", 7, seed=99, dtype=np.float64)
        with torch.no_grad():
            want = module_output("MLP", module, x).numpy()
        np.testing.assert_allclose(net.feedforward(x), want, rtol=1e-10, atol=1e-300)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["momentum", "adam"])
def test_graph_steps_follow_a_schedule_of_the_rate_without_a_new_capture(name, kind):
    """Graph steps on host streams with lr changing every step: bitwise the eager steps, one capture."""
    rates = [0.05 / (1 + step) for step in range(5)]
    make = OPTIMIZERS[kind][0]
    eager = trained(name, make(), Leapfrog(2, fused=True), steps=5, rates=rates)
    assert_bitwise(trained(name, make(), Leapfrog(2, fused=True), steps=5, graph=True, rates=rates), eager)
    with network(name, "numpy") as net:
        for step in range(3):
            net.train_step(*network_batch(name, 5, seed=step), at_rate(make(), rates[step]), Leapfrog(2), graph=True)
        assert sum(len(plan.captured) for plan in net._plans.values()) == 1


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("kind", ["momentum", "adam"])
def test_one_pass_graph_steps_follow_a_schedule_of_the_rate(kind, batch):
    """The MLP's sweep as a graph, lr changing every step: bitwise its eager steps (the compiled pass at B = 1
    reads lr and t when it runs)."""
    rates = [0.05 / (1 + step) for step in range(4)]
    make, schedule = OPTIMIZERS[kind][0], Leapfrog(2, one_pass=True)
    eager = trained("MLP", make(), schedule, rates=rates, batch=batch)
    assert_bitwise(trained("MLP", make(), schedule, graph=True, rates=rates, batch=batch), eager)
    assert not all(a.tobytes() == b.tobytes() for a, b in zip(eager, trained("MLP", make(), schedule, batch=batch)))


def test_graph_steps_on_the_cupy_stand_in_are_the_eager_steps(standin):
    """The CuPy backend's kernels (on the CPU harness) under the stand-in's capture: Adam with a changing
    rate, graph steps bitwise the eager ones and within rounding of the host's twins."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    rates = [0.01, 0.02, 0.005, 0.01]
    results = []
    for graph in (False, True):
        with CupyBackend() as backend, MLP([3, 6, 4, 2], seed=1, backend=backend) as net:
            for step, rate in enumerate(rates):
                net.train_step(*network_batch("MLP", 5, seed=step), Adam(rate), Leapfrog(2, fused=True), graph=graph)
            results.append([to_numpy(a) for named in net.parameters().values() for a in named.values()])
    assert_bitwise(results[1], results[0])
    with MLP([3, 6, 4, 2], seed=1, backend="numpy") as host:
        for step, rate in enumerate(rates):
            host.train_step(*network_batch("MLP", 5, seed=step), Adam(rate), Leapfrog(2, fused=True))
        for got, want in zip(results[0], [np.array(a) for n in host.parameters().values() for a in n.values()]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_each_optimizer_shows_the_signature_of_its_construction():
    """``help(Adam)`` and an editor read ``inspect.signature``, which the class's ``__call__`` made
    ``(*args, **kwargs)``."""
    assert str(inspect.signature(SGD)) == "(lr, momentum=0, dampening=0, nesterov=False, weight_decay=0)"
    assert str(inspect.signature(Adam)) == "(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0)"
    assert str(inspect.signature(AdamW)) == "(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01)"
