"""The NumPy backend's products (``host_blas.matmul``): every form and layout against the product in
float64, the two ways of calling BLAS (the GIL released or held) bitwise alike, and the GIL released for
a large product, so that host streams run their products side by side."""

import itertools
import re
import sys
import threading
import time

import numpy as np
import pytest
import threadpoolctl

from helpers import assert_same, batch, layer_names
from leapfrog_gpu import MLP, Leapfrog, Sequential, reference
from leapfrog_gpu.backends import blas_limits, host_blas
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.mlp import autotune

NEVER = 1 << 62
"""A threshold no product reaches: every call with the GIL held."""


def release_from(monkeypatch, size):
    """Every product from ``size`` on with the GIL released (0: all, ``NEVER``: none)."""
    monkeypatch.setattr(host_blas, "RELEASE_MATRIX", size)
    monkeypatch.setattr(host_blas, "RELEASE_GEMM", size)


# (p, r, q): out (p, q) = x (p, r) @ y (r, q); q = 1 is gemv, r = 1 with beta = 1 is ger
SHAPES = [(37, 23, 1), (1, 23, 1), (37, 1, 29), (37, 23, 29), (1, 1, 1), (64, 200, 300)]


def operand(rng, shape, transposed, dtype):
    """A C-contiguous array of ``shape``, or the transpose of one; a zero row and column, and ties."""
    x = rng.integers(-3, 4, size=shape).astype(dtype) / 4 + rng.standard_normal(shape).astype(dtype) * (
        rng.random(shape) < 0.5)
    x[0] = 0
    x[:, -1] = 0
    return np.ascontiguousarray(x.T).T if transposed else np.ascontiguousarray(x)


def product(dtype, shape, x_t, y_t, beta, order, release, monkeypatch, seed=0):
    rng = np.random.default_rng(seed)
    p, r, q = shape
    x, y = operand(rng, (p, r), x_t, dtype), operand(rng, (r, q), y_t, dtype)
    before = rng.standard_normal((p, q)).astype(dtype)
    out = np.array(before if beta else np.full((p, q), np.nan, dtype), order=order)
    release_from(monkeypatch, release)
    host_blas.matmul(out, x, y, alpha=-0.75, beta=beta)
    want = -0.75 * (x.astype(np.float64) @ y.astype(np.float64)) + (beta * before.astype(np.float64) if beta else 0)
    bound = np.finfo(dtype).eps * ((r + 2) * 0.75 * (np.abs(x).astype(np.float64) @ np.abs(y))
                                   + (np.abs(before) if beta else 0))
    return out, want, bound


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=("float32", "float64"))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("beta", [0.0, 1.0], ids=("beta0", "beta1"))
@pytest.mark.parametrize("order", ["C", "F"])
def test_every_form_is_the_product_and_both_calls_give_the_same_bits(dtype, shape, beta, order, monkeypatch):
    for x_t in (False, True):
        for y_t in (False, True):
            released, want, bound = product(dtype, shape, x_t, y_t, beta, order, 0, monkeypatch)
            held, _, _ = product(dtype, shape, x_t, y_t, beta, order, NEVER, monkeypatch)
            where = f"x{'^T' if x_t else ''} y{'^T' if y_t else ''}"
            assert np.isfinite(released).all(), f"{where}: a NaN of the output survived (beta = {beta})"
            assert (np.abs(released - want) <= bound).all(), f"{where}: off the float64 product by " \
                f"{np.max(np.abs(released - want) - bound):.3g} beyond the rounding bound"
            assert np.array_equal(released, held), f"{where}: the released call and the held one differ"


def test_a_large_product_releases_the_gil():
    """While the main thread is inside one large product, another Python thread keeps running; held
    (``ctypes.PyDLL``), it would not run at all, since the switch interval is set far beyond the call."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((1024, 1024), dtype=np.float32), rng.standard_normal((1024, 1024), dtype=np.float32)
    out = np.empty_like(x)
    host_blas.load()
    ticks, stop = [0], threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(2e-4)  # releases the GIL between ticks

    def ticks_during(release):
        with pytest.MonkeyPatch.context() as patch:
            if release is not None:
                release_from(patch, release)
            time.sleep(0.01)
            before = ticks[0]
            for _ in range(3):
                host_blas.matmul(out, x, y)
            return ticks[0] - before

    thread, interval = threading.Thread(target=tick, daemon=True), sys.getswitchinterval()
    with threadpoolctl.threadpool_limits(1, user_api="blas"):  # a core left for the ticking thread
        thread.start()
        sys.setswitchinterval(100.0)
        try:
            released, held = ticks_during(None), ticks_during(NEVER)
        finally:
            sys.setswitchinterval(interval)
            stop.set()
            thread.join()
    assert held <= 2, f"the held call let the other thread tick {held} times: the test cannot tell"
    assert released > 2, f"the other thread ticked {released} times during three large products: the GIL was held"


@pytest.mark.parametrize("release", [0, NEVER], ids=("released", "held"))
def test_read_only_and_strided_operands(release, monkeypatch):
    """Operands the buffer protocol does not hand out writable (read-only) or contiguous (a column of a
    wider array, for gemv and ger): the product is still right."""
    release_from(monkeypatch, release)
    rng = np.random.default_rng(1)
    w, wide = rng.standard_normal((6, 5)), rng.standard_normal((5, 3))
    w.setflags(write=False)
    column = wide[:, 1:2]  # strides (3 * 8, 8)
    out = np.full((6, 1), np.nan)
    host_blas.matmul(out, w, column)
    np.testing.assert_allclose(out, w @ column, rtol=1e-14, atol=0)
    rank = rng.standard_normal((6, 5))
    want = rank + 0.5 * out @ wide[:, 2:3].T
    host_blas.matmul(rank, out, wide[:, 2:3].T, alpha=0.5, beta=1.0)
    np.testing.assert_allclose(rank, want, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("release", [0, NEVER], ids=("released", "held"))
@pytest.mark.parametrize("x_t", [False, True], ids=("x", "xT"))
def test_blocks_of_a_wider_matrix_are_taken_in_place(release, x_t, monkeypatch):
    """A block of columns of a C array (or of rows of a Fortran one) has one unit stride and a leading
    dimension wider than the block: gemm and gemv read it in place, as the columns it is."""
    release_from(monkeypatch, release)
    rng = np.random.default_rng(2)
    wide = operand(rng, (40, 30), x_t, np.float64)
    block = wide[:, 7:19] if not x_t else wide[5:31, :]
    for q in (1, 9):
        y = rng.standard_normal((block.shape[1], q))
        out = np.full((block.shape[0], q), np.nan)
        host_blas.matmul(out, block, y)
        bound = 1e-15 * (block.shape[1] + 2) * (np.abs(block) @ np.abs(y))
        assert (np.abs(out - block @ y) <= bound).all(), f"q = {q}: off the product"


def test_an_operand_without_a_unit_stride_is_refused():
    x = np.ones((8, 8), np.float32)
    out = np.full((4, 4), np.nan, np.float32)
    with pytest.raises(ValueError, match="unit stride.*ascontiguousarray"):
        host_blas.matmul(out, x[::2, ::2], x[:4, :4])
    assert np.isnan(out).all(), "the refused call wrote into its output"


def taken(rng, shape, dtype):
    """``(how, view)``: every way the grid takes an array of ``shape`` from a wider one, a row and a column
    in from its corner: C or Fortran order, every step of 1 to 3 along each axis where the view keeps a
    unit stride along one axis, and every step along both where it is a vector (one axis of one element)."""
    rows, cols = shape
    for order in "CF":
        for steps in itertools.product((1, 2, 3), repeat=2):
            unit = steps[1] if order == "C" else steps[0]
            if unit != 1 and rows > 1 and cols > 1:
                continue
            wide = operand(rng, (1 + rows * steps[0] + 1, 1 + cols * steps[1] + 1), False, dtype)
            view = np.asarray(wide, order=order)[1:1 + rows * steps[0]:steps[0], 1:1 + cols * steps[1]:steps[1]]
            yield f"taken with steps {steps} from a {order}-order array", view


TINY = list(itertools.product((1, 2, 3), repeat=3))
"""(p, r, q) of the tiny products: every side 1, 2 or 3."""


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=("float32", "float64"))
@pytest.mark.parametrize("p, r, q", TINY, ids=["x".join(map(str, shape)) for shape in TINY])
def test_tiny_strided_operands_are_the_product(dtype, p, r, q):
    """(p, r) by (r, q) with every side 1, 2 or 3 (gemv at q = 1, ger at r = 1 with beta = 1, gemm otherwise),
    each operand taken from a wider array with every stride, into a C or Fortran output, beta 0 (the output
    NaN) or 1: each is the float64 product of np.matmul within rounding, the first stride or element of
    no operand skipped or read twice."""
    rng = np.random.default_rng(p * 9 + r * 3 + q)
    xs, ys = list(taken(rng, (p, r), dtype)), list(taken(rng, (r, q), dtype))
    for (x_how, x), (y_how, y), beta, order in itertools.product(xs, ys, (0.0, 1.0), "CF"):
        before = rng.standard_normal((p, q)).astype(dtype)
        out = np.array(before if beta else np.full((p, q), np.nan, dtype), order=order)
        host_blas.matmul(out, x, y, alpha=-0.75, beta=beta)
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        want = -0.75 * np.matmul(x64, y64) + beta * before.astype(np.float64)
        bound = np.finfo(dtype).eps * ((r + 2) * 0.75 * np.matmul(np.abs(x64), np.abs(y64)) + beta * np.abs(before))
        within = bool((np.abs(out - want) <= bound).all())
        assert within, (f"x {x_how}, strides {x.strides}; y {y_how}, strides {y.strides}; beta {beta}, {order} output: "
                        f"got {out.tolist()}, want {want.tolist()}")


SIZES = [9, 17, 5, 13, 7, 3]


def gradients_and_step(schedule, step_schedule, x, y, chaos):
    """(nabla_b + nabla_w of one backprop under ``schedule``, the parameters after two SGD steps under
    ``step_schedule``), on host streams with random delays before every operation."""
    with NumpyBackend(chaos=chaos) as backend:
        net = MLP(SIZES, dtype="float64", seed=3, backend=backend)
        nabla_b, nabla_w = net.backprop(x, y, schedule)
        gradients = [np.array(g) for g in nabla_b + nabla_w]
        for _ in range(2):
            net.sgd_step(x, y, 0.5, step_schedule)
        return gradients, net.weights + net.biases


@pytest.mark.parametrize("release", [0, NEVER], ids=("released", "held"))
def test_streams_running_released_products_side_by_side_keep_every_bit(release, monkeypatch):
    """With every product released (streams really computing at once) or none, each schedule's gradients
    are the reference's in float64 within rounding and Sequential's bit for bit, and every stream count
    and interleaving gives the same parameters; both ways give the same bits."""
    release_from(monkeypatch, release)
    x, y = batch(SIZES, 6)
    with MLP(SIZES, dtype="float64", seed=3, backend="numpy") as net:
        want_b, want_w = reference.backprop(net.weights, net.biases, x, y)
    names = layer_names(len(SIZES), "nabla_b", "nabla_w")
    for one_pass in (False, True):
        want = None
        for k in (0, 1, 2, 5):
            schedule = Leapfrog(k) if k else Sequential()
            step = Leapfrog(k, fused=True, one_pass=one_pass) if k else Sequential(fused=True, one_pass=one_pass)
            got, params = gradients_and_step(schedule, step, x, y, chaos=k + 10 * one_pass)
            for name, g, w in zip(names, got, want_b + want_w):
                assert np.allclose(g, w, rtol=1e-12, atol=1e-15), f"{schedule!r}: {name} off the reference"
            if want is None:
                want, sequential = params, got
            assert_same(got, sequential, names, repr(schedule), "Sequential()")
            assert_same(params, want, layer_names(len(SIZES), "w", "b"), repr(step), "the sequential step")
    release_from(monkeypatch, NEVER if release == 0 else 0)  # the other way of calling BLAS
    _, other = gradients_and_step(Sequential(), Sequential(fused=True, one_pass=True), x, y, chaos=1)
    assert_same(other, want, layer_names(len(SIZES), "w", "b"), "one-pass step", "the other way of calling BLAS")


def test_other_types_are_refused():
    x = np.ones((4, 4), np.int64)
    with pytest.raises(TypeError, match="float32 or float64"):
        host_blas.matmul(np.zeros((4, 4), np.int64), x, x)


def test_a_strided_output_is_refused():
    x = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="contiguous"):
        host_blas.matmul(np.zeros((4, 8), np.float32)[:, ::2], x, x)


def test_an_output_or_a_vector_it_cannot_take_is_refused():
    """A read-only or strided output, and a vector running backwards, each refused with the fix named,
    before anything is written."""
    rng = np.random.default_rng(3)
    w, v = rng.standard_normal((6, 5)), rng.standard_normal((5, 1))
    read_only = np.full((6, 1), np.nan)
    read_only.setflags(write=False)
    strided = np.full((12, 2), np.nan)[::2, :1]
    for out in (read_only, strided):
        with pytest.raises(ValueError, match="writable C- or Fortran-contiguous"):
            host_blas.matmul(out, w, v)
    out = np.full((6, 1), np.nan)
    with pytest.raises(ValueError, match="positive stride.*ascontiguousarray"):
        host_blas.matmul(out, w, v[::-1])
    assert np.isnan(out).all() and np.isnan(read_only).all() and np.isnan(strided).all(), \
        "a refused call wrote into its output"


def test_operands_of_another_dtype_are_refused():
    out = np.full((3, 1), np.nan, np.float32)
    with pytest.raises(TypeError, match="dtype, float32; got float64 and float32"):
        host_blas.matmul(out, np.ones((3, 4)), np.ones((4, 1), np.float32))
    assert np.isnan(out).all(), "the refused call wrote into its output"


@pytest.mark.parametrize("one_pass", [False, True], ids=("plain", "one-pass"))
def test_the_chain_takes_no_transposed_operand_at_b_above_one(one_pass, monkeypatch):
    """A plan's (n, B) arrays are batch-major on the host, so (5), ``(w^{l+1})^T delta^{l+1}``, reaches
    BLAS as a GEMM with neither operand transposed (M = n_l, K = n_{l+1}), the form OpenBLAS runs fastest;
    row-major arrays would hand it over as delta^T = delta_next^T w, its weights transposed."""
    calls, gemm = [], host_blas._Routines.gemm

    def recorded(self, trans_a, trans_b, m, n, k, *args):
        calls.append((m, k, n, trans_a, trans_b))
        return gemm(self, trans_a, trans_b, m, n, k, *args)

    monkeypatch.setattr(host_blas._Routines, "gemm", recorded)
    x, y = batch(SIZES, 4)
    with MLP(SIZES, seed=3, backend="numpy") as net:
        net.sgd_step(x, y, 0.5, Sequential(one_pass=one_pass))
    chain = {(SIZES[i], SIZES[i + 1]) for i in range(1, len(SIZES) - 1)}
    found = [(trans_a, trans_b) for m, k, n, trans_a, trans_b in calls if (m, k) in chain and n == 4]
    assert len(found) == len(chain), f"(5) did not reach BLAS as an n_l x B product over n_(l+1): {calls}"
    assert set(found) == {(0, 0)}, f"(5) took a transposed operand: {found}"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("beta", [0.0, 1.0])
@pytest.mark.parametrize("scaled", [False, True], ids=["alpha fixed", "alpha as it runs"])
def test_a_bound_product_is_the_product_on_what_the_arrays_hold_when_called(shape, beta, scaled):
    """``bind`` fixes the routine and the pointers, not the values: each call is ``matmul`` on the arrays as
    they are then, bitwise; the columns of one step of an (n, tau, B) buffer stored (tau, B, n) included. With
    alpha None each call takes its alpha (a different one each time here)."""
    rng = np.random.default_rng(1)
    p, r, q = shape
    x, y = operand(rng, (p, r), False, np.float32), rng.standard_normal((3, q, r)).astype(np.float32).transpose(2, 0, 1)
    out = rng.standard_normal((3, q, p)).astype(np.float32).transpose(2, 0, 1)
    call = host_blas.bind(out[:, 2], x, y[:, 1], alpha=None if scaled else 1.0, beta=beta)
    assert call.operands[0] is not None
    for alpha in (-0.75, 0.3):
        want = out[:, 2].copy(order="F")  # the same layout: the same BLAS call
        host_blas.matmul(want, x, y[:, 1], alpha=alpha if scaled else 1.0, beta=beta)
        call(alpha) if scaled else call()
        assert np.array_equal(out[:, 2], want)
        x += 1
        y[:, 1] *= 2


def test_matmul_refuses_an_alpha_of_none():
    out = np.full((3, 1), np.nan, np.float32)
    with pytest.raises(TypeError, match="matmul takes a number for alpha; alpha=None is bind's"):
        host_blas.matmul(out, np.ones((3, 2), np.float32), np.ones((2, 1), np.float32), alpha=None)
    assert np.isnan(out).all()


WITHOUT_OPENBLAS = """
import sys, warnings
import numpy as np


class Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "scipy_openblas32":
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)")
        return None


sys.meta_path.insert(0, Hidden())
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from leapfrog_gpu import Leapfrog, Sequential
from leapfrog_gpu.backends import host_blas
from tests.core.test_driver import NETWORKS, data, make, reference_gradients

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert host_blas.load() is None
print(caught[0].category.__name__, caught[0].message)
for kind in NETWORKS:
    for dtype, rtol, atol in (("float64", 1e-10, 1e-12), ("float32", 1e-4, 1e-5)):
        for schedule in (Sequential(), Leapfrog(2)):
            with make(kind, dtype) as net:
                print(kind, dtype, repr(net.backend))
                x, y = data(net, B=4, seed=2)
                x, y = x.astype(dtype), y.astype(dtype)
                want = reference_gradients(net, x.astype(np.float64), y.astype(np.float64))
                got = net.gradients(x, y, schedule)
                for unit, named in want.items():
                    for name, array in named.items():
                        assert np.allclose(got[unit][name], array, rtol=rtol, atol=atol), (kind, dtype, unit, name)
                before = net.parameters()
                net.sgd_step(x, y, 0.5, schedule)
                for unit, named in want.items():
                    for name, array in named.items():
                        step = np.asarray(before[unit][name], np.float64) - 0.5 / x.shape[-1] * array
                        assert np.allclose(net.parameters()[unit][name], step, rtol=rtol, atol=atol), (kind, unit)
print("trained")
out = np.ones((3, 1))
host_blas.bind(out, np.full((3, 2), 2.0), np.ones((2, 1)), alpha=None, beta=1.0)(0.5)
assert np.array_equal(out, np.full((3, 1), 3.0)), out
from leapfrog_gpu import MLP
nets = [MLP([5, 7, 3], seed=1, backend="numpy") for _ in range(2)]
for step in range(3):
    x, y = np.full((5, 1), 0.1 * step), np.full((3, 1), 0.5)
    for net, graph in zip(nets, (False, True)):
        net.sgd_step(x, y, 0.5, Sequential(one_pass=True), graph=graph)
assert all(np.array_equal(g, e) for g, e in zip(nets[1].weights, nets[0].weights))
print("bound")
"""


def test_without_scipy_openblas32_every_network_trains_on_numpys_blas_with_one_warning():
    """With ``scipy_openblas32`` unimportable (a machine without the wheel), the products run on NumPy's BLAS:
    one warning names the missing wheel, the backend's repr says which BLAS, and an MLP, an RNN and a DagNet
    give the float64 reference's gradients and SGD step, in float64 and float32, Sequential and Leapfrog(2); a
    product bound with its alpha given as it runs scales by it, and a graph's one-pass steps are the eager ones."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", WITHOUT_OPENBLAS, str(root / "tests" / "harness"), str(root)],
                          capture_output=True, text=True, timeout=120, cwd=root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("RuntimeWarning scipy-openblas32 does not import (No module named 'scipy_openblas32'")
    assert "NumPy's BLAS (np.matmul" in lines[1] and lines[-2:] == ["trained", "bound"]
    assert len(lines) == 1 + 3 * 2 * 2 + 2 and all("no scipy-openblas32" in line for line in lines[1:-2])


SPIN_AFTER_A_PRODUCT = """
import os, sys, time
import numpy as np
time.sleep(0.5)  # NumPy's own OpenBLAS, loaded at its import, starts threads that spin their first 2**28 cycles
from leapfrog_gpu.backends import host_blas

host_blas.load()[1].scipy_openblas_set_num_threads(2)
print(os.environ.get("OPENBLAS_THREAD_TIMEOUT"))
w, a, z = np.ones((512, 512), np.float32), np.ones((512, 64), np.float32), np.full((512, 64), np.nan, np.float32)
host_blas.matmul(z, w, a)
assert (z == 512).all()
used = time.process_time()
time.sleep(0.3)
print(round((time.process_time() - used) * 1e3, 1))
"""


def spin(environment):
    """What ``SPIN_AFTER_A_PRODUCT`` prints in a fresh process run in ``environment``: the library's
    ``OPENBLAS_THREAD_TIMEOUT`` as Python sees it after the load, and the CPU ms the process used in the
    0.3 s it slept after a product on two threads (NumPy's own OpenBLAS given the time its threads spin as they
    start, which fell in that window at times and made 40-50 ms of it)."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"} | environment
    done = subprocess.run([sys.executable, "-c", SPIN_AFTER_A_PRODUCT], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    given, cpu_ms = done.stdout.split()
    return given, float(cpu_ms)


def test_openblas_threads_sleep_soon_after_a_product():
    """Loaded by ``load``, OpenBLAS's second thread sleeps within ``2**SPIN`` cycles of a product instead of
    spinning for its default 2**28 (about 0.1 s: 100 ms and more of CPU in the 0.3 s after one product, cores
    the host streams need), and the environment is left as it was."""
    given, cpu_ms = spin({})
    assert given == "None"
    assert cpu_ms < 50, f"OpenBLAS's threads spun for {cpu_ms} ms of CPU after a product"


def test_an_openblas_thread_timeout_the_environment_sets_stands():
    given, _ = spin({"OPENBLAS_THREAD_TIMEOUT": "28"})
    assert given == "28"


@pytest.mark.parametrize("threads", [1, 2, 4, 5])
def test_share_divides_the_threads_in_force_and_gives_them_back_after_the_last_share(threads):
    import threadpoolctl

    host_blas.load()  # loaded first: the limits below reach the libraries loaded when they are set
    with threadpoolctl.threadpool_limits(threads, user_api="blas"):
        seen = []
        # (streams, held): a share of 2 ends; one of 3 passes to 2 streams, then ends; two shares overlap (3, 2),
        # the first passes to 4 streams and ends, then the second; the last call holds none
        calls = [(2, 1), (1, 2), (3, 1), (2, 3), (1, 2), (3, 1), (2, 1), (4, 3), (1, 4), (1, 2), (1, 1)]
        for streams, held in calls:
            host_blas.share(streams, held)
            seen.append(host_blas.threads())
        part = {streams: max(1, threads // streams) for streams in (2, 3, 4)}
        assert seen == [part[2], threads, part[3], part[2], threads, part[3], part[2], part[4], part[4], threads,
                        threads]


@pytest.mark.parametrize("closed", ["released", "held"])
def test_a_share_that_ends_after_a_backend_set_or_gave_back_its_threads_leaves_that_setting(closed):
    """A backend closed (or collected) during a hand-off gives the threads from before it back; the share that
    ends after it must not set its stale whole (the backend's 1 thread) over them. The same for a backend opened
    during the share: its setting stays."""
    import threadpoolctl

    host_blas.load()
    with threadpoolctl.threadpool_limits(3, user_api="blas"):
        ticket = blas_limits.hold(1)
        host_blas.share(2)  # the hand-off of a leapfrog pass: 1 // 2 -> 1 thread a stream
        if closed == "released":
            blas_limits.release(ticket)  # the backend goes: the 3 threads come back
        else:
            later = blas_limits.hold(2)  # another backend opens: its 2
        host_blas.share(1, 2)  # the hand-off ends
        assert host_blas.threads() == (3 if closed == "released" else 2)
        if closed == "held":
            blas_limits.release(later)
            blas_limits.release(ticket)
        assert host_blas.threads() == 3


def test_more_threads_than_openblas_runs_are_refused():
    """OpenBLAS cuts a thread count above its build's MAX_THREADS to that, without a word: a backend, a tuning or a
    command given more says so (a bench's rows and records said the count given, which never ran)."""
    most = host_blas.most_threads()
    if most is None:
        pytest.skip("no scipy-openblas32: no MAX_THREADS to read")
    with threadpoolctl.threadpool_limits(most + 1, user_api="blas"):
        assert host_blas.threads() == most  # what MAX_THREADS means: more run as that many
    changes = blas_limits.changes()
    message = f"is more threads than this OpenBLAS runs (at most {most}, its build's MAX_THREADS: it would run {most})"
    with pytest.raises(ValueError, match=rf"^blas_threads={most + 1} {re.escape(message)}; give at most {most}$"):
        NumpyBackend(blas_threads=most + 1)
    assert blas_limits.changes() == changes  # refused before any setting
    with pytest.raises(ValueError, match=rf"^blas_threads {most + 1} {re.escape(message)}"):
        autotune.blas_settings("numpy", [1, most + 1])
    with NumpyBackend(blas_threads=most) as backend:
        assert backend.blas_threads == most
