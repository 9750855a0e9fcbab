"""Bad input raises ValueError or TypeError naming the argument and what it accepts."""

import re

import numpy as np
import pytest

from networks import network, network_batch
from leapfrog_gpu import (MLP, RNN, SGD, Adam, AdamW, DagJacobi, DagNet, Dense, ForwardJacobi, ForwardNewton, LayerNorm,
                          Leapfrog, NaumovJacobi, Sequential, TimeNewton, get_backend)
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core import checks

SIZES = [4, 6, 3]


@pytest.fixture(scope="module")
def net():
    with MLP(SIZES, backend="numpy") as network:
        yield network


@pytest.mark.parametrize("kwargs,error,words", [
    (dict(sizes=[5]), ValueError, ["sizes", "at least 2"]),
    (dict(sizes=[]), ValueError, ["sizes", "at least 2"]),
    (dict(sizes=[5, 0, 3]), ValueError, ["sizes", ">= 1"]),
    (dict(sizes=[5, 2.5]), TypeError, ["sizes", "integers"]),
    (dict(sizes=5), TypeError, ["sizes"]),
    (dict(sizes=SIZES, activation="softmax"), ValueError, ["activation", "'sigmoid', 'tanh', 'relu'"]),
    (dict(sizes=SIZES, activation=None), TypeError, ["activation", "'sigmoid'"]),
    (dict(sizes=SIZES, cost="hinge"), ValueError, ["cost", "'quadratic', 'cross_entropy'"]),
    (dict(sizes=SIZES, dtype="int32"), ValueError, ["dtype", "'float32', 'float64'"]),
    (dict(sizes=SIZES, dtype="float16"), ValueError, ["dtype", "'float32', 'float64'"]),
    (dict(sizes=SIZES, backend="tpu"), ValueError, ["backend", "'auto', 'numpy', 'cupy'"]),
    (dict(sizes=SIZES, backend=3), TypeError, ["backend"]),
    (dict(sizes=SIZES, cost="cross_entropy", output_activation="relu"), ValueError, ["output_activation", "sigmoid"]),
    (dict(sizes=SIZES, output_activation="linear"), ValueError, ["output_activation", "'identity'"]),
])
def test_bad_network_arguments(kwargs, error, words):
    with pytest.raises(error) as info:
        MLP(**kwargs, **({} if "backend" in kwargs else {"backend": "numpy"}))
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("k,error", [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError),
                                     ("2", TypeError)])
def test_bad_k(k, error):
    with pytest.raises(error, match=r"k must be an integer >= 1"):
        Leapfrog(k)


GOOD_X, GOOD_Y = np.ones((4, 3)), np.zeros((3, 3))


@pytest.mark.parametrize("x,y,error,words", [
    (np.ones((5, 3)), GOOD_Y, ValueError, ["x must have shape (4, B) or (4,)", "(5, 3)"]),
    (np.ones((4, 3, 1)), GOOD_Y, ValueError, ["x must have shape"]),
    (GOOD_X, np.zeros((2, 3)), ValueError, ["y must have shape (3, B) or (3,)"]),
    (GOOD_X, np.zeros((3, 2)), ValueError, ["same number of samples", "3 and 2"]),
    (np.ones((4, 0)), np.zeros((3, 0)), ValueError, ["empty batch"]),
    (GOOD_X.astype(complex), GOOD_Y, TypeError, ["x must hold real numbers", "complex128"]),
    (GOOD_X.astype(object), GOOD_Y, TypeError, ["x must hold real numbers", "object"]),
    (GOOD_X, GOOD_Y.astype(bool), TypeError, ["y must hold real numbers", "bool"]),
    (np.full((4, 3), np.nan), GOOD_Y, ValueError, ["x contains NaN or Inf"]),
    (GOOD_X, np.full((3, 3), np.inf), ValueError, ["y contains NaN or Inf"]),
])
def test_bad_batches(net, x, y, error, words):
    with pytest.raises(error) as info:
        net.backprop(x, y)
    for word in words:
        assert word in str(info.value)


NETWORKS = {  # each network on the NumPy backend, in float32, and the shapes of its x and y
    "MLP": (lambda: MLP(SIZES, backend="numpy"), (4, 3), (3, 3)),
    "RNN": (lambda: RNN(SIZES, output="every", backend="numpy"), (2, 4, 3), (2, 3, 3)),
    "DagNet": (lambda: DagNet(4, [("h", Dense(6), "x"), ("out", Dense(3), "h")], backend="numpy"), (4, 3), (3, 3)),
}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("name", NETWORKS)
def test_a_batch_holding_nan_or_inf_is_refused_in_every_float_dtype(name, bad, dtype):
    """One non-finite element, the last of x (or of y), in a batch of any float dtype: feedforward, backprop
    and sgd_step refuse it by name before anything runs, and the parameters stay as they were."""
    make, x_shape, y_shape = NETWORKS[name]
    x, y = np.full(x_shape, 0.5, dtype=dtype), np.full(y_shape, 0.5, dtype=dtype)
    with make() as net:
        before = [np.array(a) for named in net.parameters().values() for a in named.values()]
        for which, good in (("x", x), ("y", y)):
            poisoned = good.copy()
            poisoned.reshape(-1)[-1] = bad
            given = (poisoned, y) if which == "x" else (x, poisoned)
            calls = {"backprop": lambda: net.backprop(*given), "sgd_step": lambda: net.sgd_step(*given, 0.1)}
            if which == "x":
                calls = {"feedforward": lambda: net.feedforward(poisoned), **calls}
            for call, run in calls.items():
                try:
                    run()
                except ValueError as error:
                    assert str(error) == f"{which} contains NaN or Inf; every input and target must be finite"
                else:
                    pytest.fail(f"{call} took a {dtype} {which} holding {bad} instead of refusing it")
        after = [np.array(a) for named in net.parameters().values() for a in named.values()]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))


@pytest.mark.parametrize("bad", [1e300, -1e39], ids=["1e300", "-1e39"])
@pytest.mark.parametrize("name", NETWORKS)
def test_a_float64_batch_beyond_float32s_range_is_refused_by_a_float32_network(name, bad):
    """Finite in float64, Inf once cast into the network's float32: every call that takes x (or y) refuses it
    by name, before the step changes a parameter or the optimizer's state; float32's largest number is taken."""
    make, x_shape, y_shape = NETWORKS[name]
    x, y = np.full(x_shape, 0.5), np.full(y_shape, 0.5)
    with make() as net:
        before = [np.array(a) for named in net.parameters().values() for a in named.values()]
        for which in ("x", "y"):
            poisoned = (x if which == "x" else y).copy()
            poisoned.reshape(-1)[0] = bad
            given = (poisoned, y) if which == "x" else (x, poisoned)
            calls = [lambda: net.backprop(*given), lambda: net.train_step(*given, Adam(0.1))]
            calls += [lambda: net.feedforward(poisoned)] if which == "x" else []
            for run in calls:
                with pytest.raises(ValueError, match=rf"^{which} contains NaN or Inf as float32, the network's dtype "
                                                     r"\(a number beyond \+-3.403e\+38\)"):
                    run()
        after = [np.array(a) for named in net.parameters().values() for a in named.values()]
        assert net.optimizer_state() == {"step": 0}
        largest = np.full(x_shape, 0.5)
        largest.reshape(-1)[0] = np.finfo(np.float32).max
        net.backprop(largest, y)
    assert all(np.array_equal(a, b) for a, b in zip(before, after))


@pytest.mark.parametrize("eta, error", [(-0.1, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
                                        ("0.1", TypeError), (None, TypeError), (True, TypeError)])
def test_bad_learning_rate(net, eta, error):
    """A learning rate of the wrong type is a TypeError, a number outside [0, inf) a ValueError, each one line."""
    with pytest.raises(error, match=r"^eta \(the learning rate\) must be a finite number >= 0; got [^\n]*$"):
        net.sgd_step(GOOD_X, GOOD_Y, eta)


def test_integer_and_strided_batches_are_accepted(net):
    """Integer inputs are converted; Fortran-ordered and strided arrays give the same gradients."""
    x = np.arange(12).reshape(4, 3) % 2
    want = net.backprop(x.astype(np.float32), GOOD_Y)
    for variant in (x, np.asfortranarray(x.astype(np.float64)), np.repeat(x, 2, axis=1)[:, ::2]):
        got = net.backprop(variant, GOOD_Y)
        assert all(np.array_equal(a, b) for a, b in zip(want[0] + want[1], got[0] + got[1]))


class Column:
    """What a pandas Series is to NumPy: a NumPy dtype and a conversion (``__array__``), none of NumPy's indexing or
    methods (``y[:, None]``, ``x.reshape`` raised pandas' or Python's own errors)."""

    def __init__(self, values):
        self._values = np.asarray(values)
        self.dtype, self.shape = self._values.dtype, self._values.shape

    def __array__(self, dtype=None, copy=None):
        return self._values if dtype is None else self._values.astype(dtype)

    def __len__(self):
        return len(self._values)


def test_arrays_of_other_libraries_are_read_through_numpy(net):
    x, labels = np.random.default_rng(5).uniform(-1, 1, (4, 6)), np.array([0, 1, 2, 2, 1, 0])
    want = net.gradients(x, labels)
    got = net.gradients(Column(x), Column(labels))
    assert all(np.array_equal(got[l][name], want[l][name]) for l in want for name in want[l])
    assert net.evaluate(Column(x), Column(labels)) == net.evaluate(x, labels)
    assert np.array_equal(net.predict(Column(x)), net.predict(x))
    assert len(net.fit(Column(x), Column(labels), 1, 3, SGD(0.0), progress=False)) == 1


def test_bad_schedule(net):
    with pytest.raises(TypeError, match=r"Sequential\(\), Leapfrog\(k\), NaumovScan\(\)"):
        net.backprop(GOOD_X, GOOD_Y, schedule=2)


@pytest.mark.parametrize("kwargs,words", [
    (dict(mode="gpu"), ["mode", "'threads', 'serial', 'deferred'"]),
    (dict(order="fifo"), ["order", "'main-first'"]),
    (dict(blas_threads=0), ["blas_threads", ">= 1"]),
])
def test_bad_backend_options(kwargs, words):
    with pytest.raises(ValueError) as info:
        NumpyBackend(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_unknown_backend_name():
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'numpy', 'cupy'"):
        get_backend("opencl")


def test_set_parameters_checks_shapes(net):
    with pytest.raises(ValueError, match=r"weights of layer 2 must have shape \(6, 4\); got \(4, 6\)"):
        net.set_parameters([np.zeros((4, 6)), np.zeros((3, 6))], [np.zeros(6), np.zeros(3)])
    with pytest.raises(ValueError, match="biases must list 2 arrays"):
        net.set_parameters(net.weights, [np.zeros(6)])


@pytest.mark.parametrize("flag", ["no", 1, None])
def test_check_finite_other_than_true_or_false_is_refused_by_every_network(flag):
    for make in (MLP, RNN):
        with pytest.raises(TypeError, match=rf"^check_finite must be True or False; got {flag!r}$"):
            make([3, 4, 2], check_finite=flag, backend="numpy")
    with pytest.raises(TypeError, match=rf"^check_finite must be True or False; got {flag!r}$"):
        DagNet(3, [("out", Dense(2), "x")], check_finite=flag, backend="numpy")


FLAGS = {
    "check_finite": lambda value: MLP(SIZES, check_finite=value, backend="numpy").close(),
    "fused": lambda value: Leapfrog(2, fused=value),
    "one_pass": lambda value: Sequential(one_pass=value),
    "nesterov": lambda value: SGD(0.1, momentum=0.9, nesterov=value),
    "warm_start": lambda value: NaumovJacobi(warm_start=value),
    "strict": lambda value: ForwardNewton(strict=value),
    "quasi": lambda value: TimeNewton(quasi=value),
    "shuffle": lambda value: fitted(shuffle=value),
    "progress": lambda value: fitted(progress=value),
}


def fitted(**flag):
    """``fit`` of one epoch with the option ``flag``, on an MLP that is closed after."""
    with MLP(SIZES, backend="numpy") as net:
        net.fit(np.ones((4, 2)), [0, 1], 1, 2, 0.1, **flag)


@pytest.mark.parametrize("name", FLAGS)
def test_every_flag_takes_python_or_numpy_booleans_and_nothing_else(name):
    for value in (True, False, np.True_, np.False_):
        FLAGS[name](value)
    for value in ("no", 1, None, np.array([True])):
        with pytest.raises(TypeError, match=rf"^{name} must be True or False; got {re.escape(repr(value))}$"):
            FLAGS[name](value)


NUMBERS = {
    "lr": lambda value: SGD(value), "momentum": lambda value: SGD(0.1, momentum=value),
    "dampening": lambda value: SGD(0.1, dampening=value), "weight_decay": lambda value: AdamW(weight_decay=value),
    "eps": lambda value: Adam(eps=value), "eta (the learning rate)": lambda value: stepped(value),
    "tol (the relative change where a warm start stops)": lambda value: NaumovJacobi(tol=value),
    "tol": lambda value: ForwardJacobi(tol=value), "damping": lambda value: ForwardNewton(damping=value),
    "LayerNorm's eps": lambda value: LayerNorm(eps=value),
    "recurrent_norm": lambda value: RNN([2, 3, 2], recurrent_norm=value, backend="numpy").close(),
}
"""Each real hyper-parameter, by the name its refusals give it."""

CAPS = {
    "max_sweeps": [lambda value: NaumovJacobi(max_sweeps=value), lambda value: DagJacobi(max_sweeps=value),
                   lambda value: ForwardJacobi(max_sweeps=value)],
    "max_iterations": [lambda value: ForwardNewton(max_iterations=value),
                       lambda value: TimeNewton(max_iterations=value)],
}
"""Each cap on a solver's sweeps or iterations: None or an integer >= 1."""


def stepped(eta):
    """An SGD step at ``eta`` of an MLP that is closed after."""
    with MLP(SIZES, backend="numpy") as net:
        net.sgd_step(np.ones(4), np.ones(3), eta)


@pytest.mark.parametrize("name", NUMBERS)
def test_every_real_hyper_parameter_refuses_what_is_no_number_as_a_type_and_the_rest_by_value(name):
    for value in ("0.1", True, [0.1], 1j):
        with pytest.raises(TypeError, match=rf"^{re.escape(name)} must be .*; got {re.escape(repr(value))} \("):
            NUMBERS[name](value)
    for value in (float("nan"), float("inf"), -1.0, 10**400):
        with pytest.raises(ValueError, match=rf"^{re.escape(name)} must be "):
            NUMBERS[name](value)


@pytest.mark.parametrize("name", CAPS)
def test_every_cap_on_sweeps_or_iterations_is_none_or_a_positive_integer(name):
    for make in CAPS[name]:
        make(None), make(1), make(np.int64(3))
        for value, error in (("2", TypeError), (2.0, TypeError), (True, TypeError), (0, ValueError), (-1, ValueError)):
            with pytest.raises(error, match=rf"^{name} must be None \(.*\) or an integer >= 1; got "):
                make(value)


def test_a_numpy_true_flag_is_the_python_one():
    assert Leapfrog(2, fused=np.True_).fused is True and SGD(0.1, momentum=0.9, nesterov=np.True_).nesterov is True


def test_a_step_or_a_score_without_targets_is_refused_and_changes_nothing(network_name):
    """``y=None`` (here after a batch whose targets the plan still holds, which a step would otherwise read) is
    refused by every call that needs targets, the network as it was."""
    x, y = network_batch(network_name, 4)
    with network(network_name, "numpy") as net:
        net.train_step(x, y, Adam(0.01))
        before, state = net.parameters(), net.optimizer_state()
        for call in (lambda: net.gradients(x, None), lambda: net.train_step(x, None, Adam(0.01)),
                     lambda: net.evaluate(x, None), lambda: net.fit(x, None, 1, 2, Adam(0.01), progress=False)):
            with pytest.raises(ValueError, match=r"^y \(the targets\) is required: pass the batch's targets"):
                call()
        after = net.parameters()
        assert all(np.array_equal(after[u][n], before[u][n]) for u in before for n in before[u])
        assert net.optimizer_state()["step"] == state["step"] == 1
    with network(network_name, "numpy") as fresh, pytest.raises(ValueError, match=r"^y \(the targets\) is required"):
        fresh.sgd_step(x, None, 0.1)


CROSS_ENTROPY = {
    "MLP": lambda: MLP([4, 6, 3], cost="cross_entropy", backend="numpy", dtype="float64"),
    "RNN": lambda: RNN([4, 6, 3], cost="cross_entropy", output="every", backend="numpy", dtype="float64"),
    "DagNet": lambda: DagNet(4, [("h", Dense(5), "x"), ("out", Dense(3, "sigmoid"), "h")], cost="cross_entropy",
                             backend="numpy", dtype="float64"),
}


@pytest.mark.parametrize("name", CROSS_ENTROPY)
def test_cross_entropy_targets_outside_zero_one_are_refused_and_change_nothing(name):
    """The cost of a target outside [0, 1] has no minimum (2 ln a + ... falls without bound): training drove the loss
    below 0 with no error. Refused by every call that reads targets; 0, 1 and between pass (labels too)."""
    net = CROSS_ENTROPY[name]()
    x = np.random.default_rng(0).uniform(-1, 1, (5, 4, 4) if name == "RNN" else (4, 4))
    with net:
        shape = net.feedforward(x).shape
        inside = np.random.default_rng(1).uniform(0, 1, shape)
        inside.reshape(-1)[:2] = 0.0, 1.0
        net.train_step(x, inside, Adam(0.01))
        net.train_step(x, np.zeros(shape[:-2] + shape[-1:], dtype=int), Adam(0.01))  # class labels
        before, steps = net.parameters(), net.optimizer_state()["step"]
        for bad, shown in ((np.where(inside == 1.0, 2.0, inside), "2.0"), (inside - 1e-3, "-0.001")):
            for call in (lambda: net.gradients(x, bad), lambda: net.train_step(x, bad, Adam(0.01)),
                         lambda: net.evaluate(x, bad), lambda: net.fit(x, bad, 1, 2, Adam(0.01), progress=False)):
                with pytest.raises(ValueError, match=f"^y holds {re.escape(shown)}[0-9]*: the targets of a "
                                                     r"cross-entropy cost are probabilities in \[0, 1\]; scale them, "
                                                     "or build the network with cost='quadratic'$"):
                    call()
        after = net.parameters()
        assert all(np.array_equal(after[u][n], before[u][n]) for u in before for n in before[u])
        assert net.optimizer_state()["step"] == steps == 2


def test_integer_labels_for_one_cross_entropy_output_are_named_as_labels():
    with MLP([4, 6, 1], cost="cross_entropy", backend="numpy") as net:
        with pytest.raises(ValueError, match=r"^y holds 2: .* \[0, 1\] \(integer class labels need one output unit per "
                                             r"class\); scale them"):
            net.train_step(np.ones((4, 3)), np.array([0, 2, 1]), SGD(0.1))


def test_samples_as_rows_are_told_to_transpose(net):
    """PyTorch's layout (B, n): the error says that samples are columns here (where the shape is that one)."""
    with pytest.raises(ValueError, match=r"^x must have shape \(4, B\) or \(4,\) for sizes \[4, 6, 3\]; got \(5, 4\): "
                                         r"samples are columns here, pass x\.T$"):
        net.feedforward(np.ones((5, 4)))
    with pytest.raises(ValueError, match=r"; got \(5, 3\): samples are columns here, pass y\.T$"):
        net.gradients(np.ones((4, 5)), np.ones((5, 3)))
    with pytest.raises(ValueError, match=r"; got \(5, 7\)$"):
        net.feedforward(np.ones((5, 7)))


@pytest.mark.parametrize("sizes, written", [
    ([64, 128, 10], "[64, 128, 10]"),
    ([7] * 12, str([7] * 12)),  # LONG widths: the list itself
    ([7] * 13, "[7] * 13"),
    ([4] + [1] * 2000 + [2], "[4] + [1] * 2000 + [2]"),
    ([5, 5] + [6] * 3 + [7, 8] + [9] * 10, "[5, 5] + [6] * 3 + [7, 8] + [9] * 10"),
    (list(range(1, 15)), str(list(range(1, 15)))),  # no run to shorten
    (["a", "b"], "['a', 'b']"), ([64.5, 8, 10], "[64.5, 8, 10]"),  # a damaged checkpoint's, quoted as it is
])
def test_long_widths_are_written_by_their_runs_as_python_builds_them(sizes, written):
    """A header or a message of a deep network says its widths in a line, and Python reads them back."""
    assert checks.widths(sizes) == written and eval(written) == sizes
    assert checks.widths(None) == "None" and checks.widths(7) == "7"


def test_a_shape_error_of_a_deep_network_writes_its_widths_by_their_runs():
    with RNN([4] + [1] * 500 + [2], backend="numpy") as deep:
        with pytest.raises(ValueError, match=re.escape("for sizes [4] + [1] * 500 + [2]; got (4, 16, 8)")):
            deep.feedforward(np.ones((4, 16, 8)))
