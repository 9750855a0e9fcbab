"""Parameters in: ``set_parameters`` checks what a batch is checked for, names the layer of every error,
takes Nielsen's (n, 1) biases, changes nothing when a check fails, and is the only way in."""

import numpy as np
import pytest

from leapfrog_gpu import MLP, Sequential

SIZES = [4, 6, 3]


@pytest.fixture
def net():
    with MLP(SIZES, dtype="float64", backend="numpy") as network:
        yield network


def given(seed=1):
    """Random w^l (n_l, n_{l-1}) and b^l (n_l,) for l = 2..L."""
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal((n, m)) for m, n in zip(SIZES[:-1], SIZES[1:])]
    return weights, [rng.standard_normal(n) for n in SIZES[1:]]


def assert_parameters(net, weights, biases):
    got = net.weights + net.biases
    assert all(np.array_equal(p, q) for p, q in zip(got, weights + biases)), "the network's parameters changed"


def test_parameters_go_in_and_come_back_bitwise(net):
    weights, biases = given()
    net.set_parameters(weights, biases)
    assert_parameters(net, weights, biases)


def test_the_network_keeps_copies_of_what_it_is_given(net):
    weights, biases = given()
    net.set_parameters(weights, biases)
    kept = [w.copy() for w in weights], [b.copy() for b in biases]
    weights[0][...] = 0.0
    biases[1][...] = 0.0
    assert_parameters(net, *kept)


def test_nielsens_column_biases_are_taken_and_give_his_feedforward(net):
    weights, biases = given()
    columns = [b.reshape(-1, 1) for b in biases]  # the shape of network.py's np.random.randn(y, 1)
    net.set_parameters(weights, columns)
    assert_parameters(net, weights, biases)
    x = np.random.default_rng(2).random((SIZES[0], 1))
    a = x
    for w, b in zip(weights, columns):  # network.py's feedforward, one sample as a column
        a = 1.0 / (1.0 + np.exp(-(np.dot(w, a) + b)))
    np.testing.assert_allclose(net.feedforward(x), a, rtol=1e-13, atol=0)


def test_integer_parameters_are_taken_as_a_batch_is(net):
    weights, biases = given()
    weights = [np.rint(w).astype(np.int64) for w in weights]
    net.set_parameters(weights, biases)
    assert_parameters(net, [w.astype(np.float64) for w in weights], biases)


def test_lists_of_numbers_are_taken(net):
    weights, biases = given()
    net.set_parameters([w.tolist() for w in weights], [b.tolist() for b in biases])
    assert_parameters(net, weights, biases)


def broken(name, index, value):
    """``given()`` with its ``name`` (weights or biases) ``index`` replaced by ``value``."""
    weights, biases = given(seed=3)
    (weights if name == "weights" else biases)[index] = value
    return weights, biases


BAD = [
    ("weights", 0, np.zeros((6, 5)), ValueError, "weights of layer 2 must have shape (6, 4); got (6, 5)"),
    ("weights", 1, np.zeros((6, 3)), ValueError, "weights of layer 3 must have shape (3, 6); got (6, 3)"),
    ("weights", 1, np.zeros(18), ValueError, "weights of layer 3 must have shape (3, 6); got (18,)"),
    ("biases", 0, np.zeros((6, 7)), ValueError, "biases of layer 2 must have shape (6,) or (6, 1); got (6, 7)"),
    ("biases", 1, np.zeros((1, 3)), ValueError, "biases of layer 3 must have shape (3,) or (3, 1); got (1, 3)"),
    ("biases", 1, np.zeros(4), ValueError, "biases of layer 3 must have shape (3,) or (3, 1); got (4,)"),
    ("weights", 1, np.full((3, 6), np.nan), ValueError,
     "weights of layer 3 contains NaN or Inf (as float64); every parameter must be finite"),
    ("biases", 0, np.array([0, 0, np.inf, 0, 0, 0]), ValueError,
     "biases of layer 2 contains NaN or Inf (as float64); every parameter must be finite"),
    ("biases", 1, np.array([[0.0], [-np.inf], [0.0]]), ValueError, "biases of layer 3 contains NaN or Inf"),
    ("weights", 0, np.zeros((6, 4), complex), TypeError,
     "weights of layer 2 must hold real numbers (a float or integer dtype); got dtype complex128"),
    ("biases", 1, np.zeros(3, bool), TypeError, "biases of layer 3 must hold real numbers"),
    ("biases", 0, ["a"] * 6, TypeError,
     "biases of layer 2 must hold real numbers (a float or integer dtype); got dtype <U1"),
]


@pytest.mark.parametrize("name,index,value,error,message", BAD)
def test_a_bad_parameter_is_refused_naming_its_layer_and_nothing_changes(net, name, index, value, error, message):
    weights, biases = given()
    net.set_parameters(weights, biases)
    with pytest.raises(error) as info:
        net.set_parameters(*broken(name, index, value))  # everything else differs: nothing may be copied
    assert message in str(info.value)
    assert_parameters(net, weights, biases)


def test_a_float32_network_refuses_a_value_beyond_float32s_range():
    with MLP(SIZES, dtype="float32", backend="numpy") as net:
        before = net.weights + net.biases
        weights, biases = given()
        weights[1][0, 0] = 1e39  # finite in float64, Inf in float32
        with pytest.raises(ValueError, match=r"weights of layer 3 contains NaN or Inf \(as float32\)"):
            net.set_parameters(weights, biases)
        assert all(np.array_equal(p, q) for p, q in zip(net.weights + net.biases, before))


@pytest.mark.parametrize("weights,biases,error,message", [
    (given()[0][:1], given()[1], ValueError, "weights must list 2 arrays (layers 2..3); got 1"),
    (given()[0], given()[1] * 2, ValueError, "biases must list 2 arrays (layers 2..3); got 4"),
    (np.zeros((2, 6, 4)), given()[1], TypeError, "weights must be a list of 2 arrays (layers 2..3); got ndarray"),
    (given()[0], None, TypeError, "biases must be a list of 2 arrays (layers 2..3); got NoneType"),
])
def test_the_lists_must_hold_one_array_per_layer(net, weights, biases, error, message):
    before = net.weights + net.biases
    with pytest.raises(error) as info:
        net.set_parameters(weights, biases)
    assert message in str(info.value)
    assert all(np.array_equal(p, q) for p, q in zip(net.weights + net.biases, before))


@pytest.mark.parametrize("name", ["weights", "biases"])
def test_assigning_the_parameters_points_at_set_parameters(net, name):
    before = net.weights + net.biases
    with pytest.raises(AttributeError) as info:
        setattr(net, name, getattr(net, name))
    assert str(info.value) == (f"{name} cannot be assigned: each read of it is a copy; to load parameters call "
                               "net.set_parameters(weights, biases)")
    assert all(np.array_equal(p, q) for p, q in zip(net.weights + net.biases, before))


def test_on_the_cupy_backend_host_and_device_arrays_are_checked_alike(standin):
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as cuda, MLP(SIZES, dtype="float64", backend=cuda) as net:
        weights, biases = given()
        net.set_parameters([standin.asarray(w) for w in weights], biases)
        assert all(np.array_equal(p.get(), q) for p, q in zip(net.weights + net.biases, weights + biases))
        bad = [standin.asarray(w) for w in weights]
        bad[1][0, 0] = np.nan
        with pytest.raises(ValueError, match=r"weights of layer 3 contains NaN or Inf \(as float64\)"):
            net.set_parameters(bad, [standin.asarray(b) for b in given(seed=5)[1]])
        with pytest.raises(ValueError, match=r"biases of layer 2 must have shape \(6,\) or \(6, 1\); got \(1, 6\)"):
            net.set_parameters(weights, [standin.asarray(biases[0]).reshape(1, 6), biases[1]])
        net.set_parameters(weights, [standin.asarray(b).reshape(-1, 1) for b in biases])
        assert all(np.array_equal(p.get(), q) for p, q in zip(net.weights + net.biases, weights + biases))


def nielsen_backprop(weights, biases, x, y):
    """The backprop of Nielsen's network.py, step for step: column vectors, sigmoid, quadratic cost."""
    def sigmoid(z):
        return 1.0 / (1.0 + np.exp(-z))

    def sigmoid_prime(z):
        return sigmoid(z) * (1 - sigmoid(z))

    activation, activations, zs = x, [x], []
    for b, w in zip(biases, weights):
        z = np.dot(w, activation) + b
        zs.append(z)
        activation = sigmoid(z)
        activations.append(activation)
    delta = (activations[-1] - y) * sigmoid_prime(zs[-1])
    nabla_b, nabla_w = [delta], [np.dot(delta, activations[-2].transpose())]
    for l in range(2, len(weights) + 1):
        delta = np.dot(weights[-l + 1].transpose(), delta) * sigmoid_prime(zs[-l])
        nabla_b.insert(0, delta)
        nabla_w.insert(0, np.dot(delta, activations[-l - 1].transpose()))
    return nabla_b, nabla_w


@pytest.mark.parametrize("sizes", [[7, 9, 5, 3], [784, 30, 10], [2, 1]], ids=str)
def test_nielsens_parameters_give_his_gradients_bit_for_bit(sizes):
    """His (n, 1) biases go in as they are; at B = 1 in float64 the gradients are his, to the bit."""
    rng = np.random.default_rng(len(sizes))
    weights = [rng.standard_normal((n, m)) for m, n in zip(sizes[:-1], sizes[1:])]
    biases = [rng.standard_normal((n, 1)) for n in sizes[1:]]
    x, y = rng.standard_normal((sizes[0], 1)), rng.random((sizes[-1], 1))
    with MLP(sizes, activation="sigmoid", cost="quadratic", dtype="float64", backend="numpy") as net:
        net.set_parameters(weights, biases)
        nabla_b, nabla_w = net.backprop(x, y, Sequential())
    want_b, want_w = nielsen_backprop(weights, biases, x, y)
    for l, (got, want) in enumerate(zip(nabla_w, want_w), start=2):
        assert np.array_equal(got, want), f"nabla_w[{l}] differs from Nielsen's"
    for l, (got, want) in enumerate(zip(nabla_b, want_b), start=2):
        assert np.array_equal(got, want.ravel()), f"nabla_b[{l}] differs from Nielsen's"
