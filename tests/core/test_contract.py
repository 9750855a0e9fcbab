"""The contract every network keeps, written once and run over ``MLP``, ``RNN`` and ``DagNet``: closing,
use after close, parameters in and out by one protocol (``{unit: {network_name: array}}``) and one checked path,
copies handed out that no later step writes, and the schedules a network cannot run refused by name."""

import copy
import pickle

import numpy as np
import pytest

from leapfrog_gpu import (BPTT, SGD, Adam, DagDoubling, DagJacobi, ForwardJacobi, Leapfrog, LevelSets, NaumovJacobi,
                          NaumovRNN, NaumovScan, Sequential, TimeScan, Wavefront)
from leapfrog_gpu.backends.host import NumpyBackend
from networks import UNITS, network, network_batch


TAKES = {
    "MLP": ("Sequential()", "Leapfrog(k)", "NaumovScan()", "NaumovJacobi()"),
    "RNN": ("Sequential()", "Leapfrog(k)", "BPTT()", "Wavefront()", "TimeScan()", "NaumovRNN()"),
    "DagNet": ("Sequential()", "Leapfrog(k)", "LevelSets()", "DagJacobi()", "DagDoubling()"),
}
"""What each network runs, as the issue's user reads it in a refusal; written here, not read from the code."""

EVERY_SCHEDULE = [Sequential(), Leapfrog(2), NaumovScan(), NaumovJacobi(), BPTT(), Wavefront(), TimeScan(),
                  NaumovRNN(), LevelSets(), DagJacobi(max_sweeps=1), DagDoubling()]


def flat(params):
    return {(unit, key): np.array(value) for unit, named in params.items() for key, value in named.items()}


def assert_equal(got, want):
    got, want = flat(got), flat(want)
    assert got.keys() == want.keys()
    for key in want:
        assert np.array_equal(got[key], want[key]), f"{key} changed"


def test_parameters_is_one_protocol_and_its_round_trip_is_bitwise(network_name):
    with network(network_name, "numpy") as net:
        params = net.parameters()
        assert list(params) == UNITS[network_name]
        assert all(set(named) >= ({"gamma", "beta"} if unit == "n" else {"w", "b"}) for unit, named in params.items())
        if network_name == "RNN":
            assert set(params[2]) == set(params[3]) == {"w", "u", "b"} and set(params[4]) == {"w", "b"}
        doubled = {unit: {key: 2 * value for key, value in named.items()} for unit, named in params.items()}
        net.set_parameters(doubled)
        assert_equal(net.parameters(), doubled)


def test_close_twice_and_use_after_close(network_name):
    net = network(network_name, "numpy")
    x, y = network_batch(network_name)
    net.sgd_step(x, y, 0.1)
    net.close()
    net.close()  # a second close does nothing
    assert net.backend.closed
    solved = [lambda: net.feedforward(x, solver=ForwardJacobi())] if network_name != "RNN" else []
    for use in (lambda: net.sgd_step(x, y, 0.1), lambda: net.backprop(x, y), lambda: net.parameters(),
                lambda: net.synchronize(), net.held_optimizer, net.__enter__, *solved):  # __enter__: with net
        with pytest.raises(RuntimeError, match=f"^this {network_name} is closed: build a new one$"):
            use()


def test_a_network_whose_given_backend_was_closed_says_so(network_name):
    """Not that the network is closed (it is not: its backend is), nor, through a solver, the backend's own words."""
    backend = NumpyBackend()
    net = network(network_name, backend)
    x, y = network_batch(network_name)
    backend.close()
    solved = [lambda: net.feedforward(x, solver=ForwardJacobi())] if network_name != "RNN" else []
    for use in (lambda: net.sgd_step(x, y, 0.1), lambda: net.feedforward(x), *solved):
        with pytest.raises(RuntimeError, match=f"^the backend of this {network_name} is closed: build a new network$"):
            use()
    net.close()


def test_a_closed_network_says_so_before_any_fault_of_what_it_is_given(network_name):
    """Closed after an Adam step, a step of another optimizer was refused as one that would mix their states (whose
    remedy, set_optimizer_state, then said it was closed), and an lr beyond float32, a bad optimizer, schedule, clip
    or epoch count as such: it says it is closed."""
    net = network(network_name, "numpy")
    x, y = network_batch(network_name)
    net.train_step(x, y, Adam(0.01))
    net.close()
    for use in (lambda: net.train_step(x, y, SGD(0.1)), lambda: net.train_step(x, y, Adam(1e300)),
                lambda: net.train_step(x, y, "adam"), lambda: net.train_step(x, y, SGD(0.1), "leapfrog"),
                lambda: net.train_step(x, y, SGD(0.1), clip=-1.0), lambda: net.set_optimizer_state("adam", {}),
                lambda: net.sgd_step(x, y, -1.0),
                lambda: net.fit(x, y, 1, 2, SGD(0.1), progress=False),
                lambda: net.fit(x, y, 0, 2, "adam", progress=False),
                lambda: net.set_optimizer_state(SGD(0.1), {"step": 0})):
        with pytest.raises(RuntimeError, match=f"^this {network_name} is closed: build a new one$"):
            use()


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy, pickle.dumps], ids=lambda f: f.__name__)
def test_a_network_is_neither_copied_nor_pickled_and_says_what_to_do(network_name, duplicate):
    """A shallow copy shared the original's buffers (a step of one wrote the other, closing one closed both); a deep
    copy or a pickle failed on a lock, in Python's words."""
    with network(network_name, "numpy") as net:
        before = net.parameters()
        with pytest.raises(TypeError, match=r"^an? \w+ cannot be copied or pickled \(a copy would share its buffers "
                                            r"and streams\): save\(\) it and load\(\) it, or build another and "
                                            r"set_parameters\(net.parameters\(\)\)$"):
            duplicate(net)
        assert_equal(net.parameters(), before)


def test_a_network_leaves_a_backend_it_was_given_open(network_name):
    with NumpyBackend() as backend:
        net = network(network_name, backend)
        net.close()
        net.close()
        assert not backend.closed
        with network(network_name, backend) as other:  # the backend still runs networks
            other.sgd_step(*network_batch(network_name), 0.1)
            other.synchronize()


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the batch whose gradients overflow
@pytest.mark.parametrize("given", [False, True], ids=["own backend", "given backend"])
def test_close_raises_what_synchronize_would_and_closes_all_the_same(network_name, given):
    """A refused update not yet reported is raised by ``close()`` (and by leaving ``with``), as ``synchronize()``
    would; the network is closed all the same (its own backend too, a given one stays open), and runs nothing
    more. An error already leaving the ``with`` block is not masked by it."""
    x, y = network_batch(network_name)
    with NumpyBackend() as backend:
        net = network(network_name, backend if given else "numpy", check_finite=True)
        net.train_step(x * 1e30, y, Adam(0.01))
        with pytest.raises(FloatingPointError, match="holds NaN or Inf; update refused"):
            net.close()
        assert net.backend.closed != given and not backend.closed
        for use in (lambda: net.train_step(x, y, Adam(0.01)), lambda: net.parameters(), lambda: net.synchronize()):
            with pytest.raises(RuntimeError, match=f"this {network_name} is closed"):
                use()
        net.close()  # reported once
        with pytest.raises(FloatingPointError, match="update refused"):
            with network(network_name, backend if given else "numpy", check_finite=True) as other:
                other.train_step(x * 1e30, y, Adam(0.01))
        with pytest.raises(KeyError, match="the block's own"):
            with network(network_name, backend if given else "numpy", check_finite=True) as other:
                other.train_step(x * 1e30, y, Adam(0.01))
                raise KeyError("the block's own")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e39], ids=["nan", "inf", "-inf", "beyond float32"])
def test_a_non_finite_parameter_is_refused_by_name_and_nothing_changes(network_name, bad):
    with network(network_name, "numpy") as net:
        before = net.parameters()
        given = {unit: {key: value + 1 for key, value in named.items()} for unit, named in before.items()}
        unit = list(given)[-1]
        given[unit]["w"] = given[unit]["w"].astype(np.float64)  # 1e39 is finite in float64 only
        given[unit]["w"][0, -1] = bad  # the last array checked, so every other one was read first
        with pytest.raises(ValueError, match=r"contains NaN or Inf \(as float32\)") as info:
            net.set_parameters(given)
        assert str(unit) in str(info.value)
        assert str(info.value).endswith("build the network with dtype='float64'") == (bad == 1e39)  # where it helps
        assert_equal(net.parameters(), before)


def test_a_wrong_shape_is_refused_by_name_and_nothing_changes(network_name):
    with network(network_name, "numpy") as net:
        before = net.parameters()
        given = {unit: {key: value + 1 for key, value in named.items()} for unit, named in before.items()}
        unit = list(given)[-1]
        given[unit]["w"] = given[unit]["w"][:, :-1]
        shape = before[unit]["w"].shape
        with pytest.raises(ValueError, match=rf"must have shape \({shape[0]}, {shape[1]}\); got \({shape[0]}, "
                                             rf"{shape[1] - 1}\)"):
            net.set_parameters(given)
        assert_equal(net.parameters(), before)


def test_unknown_units_and_names_are_refused_by_name_and_nothing_changes(network_name):
    with network(network_name, "numpy") as net:
        before = net.parameters()
        unit = list(before)[0]
        for given, word in (({"zz": {"w": before[unit]["w"]}}, "'zz'"), ({unit: {"q": before[unit]["b"]}}, "'q'")):
            with pytest.raises(ValueError, match=word):
                net.set_parameters({**{u: {k: v + 1 for k, v in named.items()} for u, named in before.items()},
                                    **given})
            assert_equal(net.parameters(), before)
        with pytest.raises(TypeError, match="dict"):
            net.set_parameters({unit: before[unit]["w"]})
        with pytest.raises(TypeError, match="real numbers"):
            net.set_parameters({unit: {"w": np.full(before[unit]["w"].shape, "a")}})
        assert_equal(net.parameters(), before)


def test_nested_lists_are_accepted(network_name):
    with network(network_name, "numpy", dtype="float64") as net:
        rng = np.random.default_rng(3)
        want = {unit: {key: rng.standard_normal(value.shape) for key, value in named.items()}
                for unit, named in net.parameters().items()}
        net.set_parameters({unit: {key: value.tolist() for key, value in named.items()} for unit, named in want.items()})
        assert_equal(net.parameters(), want)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")  # NumPy's, on making one
def test_a_numpy_matrix_is_read_as_its_array(network_name):
    """``np.matrix``, always 2-D, as the plain array it holds: an RNN's one sequence (tau, n_1) too, whose time axis
    the check adds (where it was refused with the very shape it named as allowed)."""
    with network(network_name, "numpy", dtype="float64") as net:
        x, y = network_batch(network_name, dtype=np.float64)
        if x.ndim == 3:  # one sequence of the RNN's batch, (tau, n_1), and its targets at every step
            x, y = x[..., 0], y[..., 0]
        assert_equal(net.gradients(np.matrix(x), np.matrix(y)), net.gradients(x, y))


def test_torch_tensors_are_read_as_numpy_reads_them(network_name):
    """A CPU tensor is read through ``numpy.asarray``, as lists are; one that cannot be (it requires grad) is a
    TypeError that names the argument, and nothing changes."""
    torch = pytest.importorskip("torch", reason="torch tensors as inputs", exc_type=ImportError)
    with network(network_name, "numpy", dtype="float64") as net:
        x, y = network_batch(network_name, dtype=np.float64)
        want = net.gradients(x, y)
        assert_equal(net.gradients(torch.from_numpy(x), torch.from_numpy(y)), want)
        before = net.parameters()
        with pytest.raises(TypeError, match=r"^x cannot be read as a NumPy array \(.*requires grad.*\); pass a NumPy "):
            net.sgd_step(torch.from_numpy(x).requires_grad_(), y, 0.5)
        assert_equal(net.parameters(), before)
        net.set_parameters({unit: {key: torch.from_numpy(value + 1) for key, value in named.items()}
                            for unit, named in before.items()})
        assert_equal(net.parameters(), {unit: {key: value + 1 for key, value in named.items()}
                                        for unit, named in before.items()})


def test_copies_handed_out_stay_valid_after_a_step(network_name):
    with network(network_name, "numpy") as net:
        x, y = network_batch(network_name)
        params = net.parameters()
        kept = copy.deepcopy(params)
        gradients = net.backprop(x, y)
        kept_gradients = copy.deepcopy(gradients)
        for step in range(3):
            net.sgd_step(*network_batch(network_name, seed=step + 1), 0.5)
        net.synchronize()
        assert_equal(params, kept)
        for got, want in zip(np.concatenate([np.ravel(a) for a in _arrays(gradients)]),
                             np.concatenate([np.ravel(a) for a in _arrays(kept_gradients)])):
            assert got == want
        assert any(not np.array_equal(flat(net.parameters())[key], value) for key, value in flat(kept).items())


def test_the_shape_it_hands_out_is_a_copy_whose_changes_reach_no_network(network_name):
    """``sizes`` (MLP, RNN) and ``order`` (DagNet), lists a caller may well change to build another network: the
    network's repr, passes and file stay its own."""
    with network(network_name, "numpy") as net:
        name = "order" if network_name == "DagNet" else "sizes"
        x, y = network_batch(network_name)
        shape, shown, out, cost = list(getattr(net, name)), repr(net), net.feedforward(x), net.evaluate(x, y)
        handed = getattr(net, name)
        handed.reverse()
        handed.append(handed[0])
        assert getattr(net, name) == shape and repr(net) == shown
        assert np.array_equal(net.feedforward(x), out) and net.evaluate(x, y) == cost


def _arrays(nested):
    if isinstance(nested, dict):
        return [a for value in nested.values() for a in _arrays(value)]
    if isinstance(nested, (list, tuple)):
        return [a for value in nested for a in _arrays(value)]
    return [nested]


@pytest.mark.parametrize("schedule", EVERY_SCHEDULE, ids=repr)
def test_a_schedule_the_network_cannot_run_is_refused_naming_those_it_can(network_name, schedule):
    takes = TAKES[network_name]
    runs = f"{type(schedule).__name__}()" in takes or (isinstance(schedule, Leapfrog) and "Leapfrog(k)" in takes)
    with network(network_name, "numpy") as net:
        x, y = network_batch(network_name, 2)
        before = net.parameters()
        for call in (lambda: net.backprop(x, y, schedule), lambda: net.sgd_step(x, y, 0.1, schedule)):
            if runs:
                call()
                continue
            with pytest.raises(TypeError) as info:
                call()
            message = str(info.value)
            article = "a" if network_name == "DagNet" else "an"
            assert message.startswith(f"{article} {network_name} cannot run {schedule!r}; it takes "), message
            assert all(choice in message for choice in takes), message
        if not runs:
            assert_equal(net.parameters(), before)


def test_what_is_not_a_schedule_is_refused_naming_the_choices(network_name):
    with network(network_name, "numpy") as net:
        with pytest.raises(TypeError, match="schedule must be a schedule object: ") as info:
            net.backprop(*network_batch(network_name), "leapfrog")
        assert all(choice in str(info.value) for choice in TAKES[network_name])
