"""Property-based bad input: every case either works correctly or raises a clear ValueError/TypeError.
Targets of the samples' shape and an integer dtype are class labels, whose gradients are their one-hot targets'.

Never a crash, a hang (each test runs under pytest-timeout) or a wrong answer: when a batch is accepted,
its gradients are checked against the float64 reference on the same numbers. Finite values near
float64's limit overflow in the products; NumPy's warning of it is expected there, and only there
(any other RuntimeWarning fails the test).
"""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from leapfrog_gpu import MLP, Leapfrog, Sequential, reference

SIZES = [4, 5, 3]
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint8, np.bool_, np.complex64, np.complex128]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
HUGE = np.finfo(np.float64).max / 2  # finite, but w a overflows

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


@pytest.fixture(scope="module")
def net():
    with MLP(SIZES, dtype="float64", backend="numpy") as network:
        yield network


def layouts(array):
    """The same values as C order, Fortran order, or a strided view."""
    return st.sampled_from([
        array,
        np.asfortranarray(array),
        np.repeat(array, 2, axis=-1)[..., ::2] if array.ndim else array,
    ])


def batches(rows):
    shapes = st.one_of(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6),
                       st.sampled_from([(rows,), (rows, 1), (rows, 3)]))
    arrays = st.sampled_from(DTYPES).flatmap(lambda dtype: hnp.arrays(dtype, shapes))
    return arrays.flatmap(layouts)


def check_gradients(net, x, y, schedule):
    """Gradients of an accepted batch must equal the float64 reference on the same values; the network
    may warn of an overflow only where the reference overflows too."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nabla_b, nabla_w = net.backprop(x, y, schedule)
    x64 = np.asarray(x, dtype=np.float64).reshape(SIZES[0], -1)
    if np.shape(y) == np.shape(x)[1:] and np.asarray(y).dtype.kind in "iu":
        y = np.eye(SIZES[-1])[:, y]  # integer class labels, one per sample: their one-hot targets
    y64 = np.asarray(y, dtype=np.float64).reshape(SIZES[-1], -1)
    with warnings.catch_warnings(record=True) as overflows:
        warnings.simplefilter("always")
        want_b, want_w = reference.backprop(net.weights, net.biases, x64, y64)
    for warning in caught:
        assert warning.category is RuntimeWarning and "encountered" in str(warning.message), str(warning.message)
        assert overflows, f"the network warned ({warning.message}) where the reference computes without overflow"
    for got, want in zip(nabla_b + nabla_w, want_b + want_w):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@FUZZ
@given(x=batches(SIZES[0]), k=st.integers(1, 6))
@example(x=np.full((SIZES[0], 2), HUGE), k=2)
def test_fuzzed_inputs(net, x, k):
    y = np.full((SIZES[-1], max(1, x.shape[-1]) if x.ndim == 2 else 1), 0.5)
    try:
        check_gradients(net, x, y, Leapfrog(k))
    except (ValueError, TypeError) as error:
        assert any(word in str(error) for word in ("x must", "x contains", "x holds", "same number")), str(error)


@FUZZ
@given(y=batches(SIZES[-1]))
def test_fuzzed_targets(net, y):
    x = np.full((SIZES[0], max(1, y.shape[-1]) if y.ndim == 2 else 1), 0.25)
    try:
        check_gradients(net, x, y, Sequential())
    except (ValueError, TypeError) as error:
        assert any(word in str(error) for word in ("y must", "y contains", "y holds", "same number")), str(error)


@FUZZ
@given(k=st.one_of(st.integers(-3, 2**70), st.floats(allow_nan=True), st.text(max_size=3), st.none(), st.booleans()))
def test_fuzzed_k(net, k):
    try:
        schedule = Leapfrog(k)
    except (ValueError, TypeError) as error:
        assert "k must be an integer >= 1" in str(error)
        return
    x, y = np.full((SIZES[0], 2), 0.5), np.full((SIZES[-1], 2), 0.5)
    check_gradients(net, x, y, schedule)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.one_of(st.integers(-2, 9), st.floats(0, 9), st.text(max_size=1)), max_size=5),
       dtype=st.sampled_from(["float32", "float64", "float16", "int32", "double", np.float32, None]))
def test_fuzzed_network_arguments(sizes, dtype):
    try:
        net = MLP(sizes, dtype=dtype, backend="numpy")
    except (ValueError, TypeError) as error:
        assert any(word in str(error) for word in ("sizes", "dtype")), str(error)
        return
    with net:
        assert [w.shape for w in net.weights] == [(m, n) for n, m in zip(sizes, sizes[1:])]
        assert net.weights[0].dtype == np.dtype(dtype)
