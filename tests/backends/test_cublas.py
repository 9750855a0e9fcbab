"""cuBLAS in the graph: the chain (2)(5) on nvmath-python's cuBLAS bindings (``backends/cublas.py``), on the
CuPy stand-in and its ``nvmath.bindings.cublas`` (``tests/harness/fake_cupy/nvmath.py``), under each of its orders.

The stand-in's cuBLAS runs each product on its handle's stream, in that stream's queue, and refuses a call
during a capture when the handle has no workspace of its own or its stream is not the capturing stream. So
these tests check the column-major transposes against the float64 maths, that graph steps whose chain runs
on cuBLAS are bitwise the eager steps with the same chain and follow the float64 reference, that the
capture is refused, saying why, without the workspace or the stream, and that without nvmath-python graph
mode runs the chain on our kernels and says so once.
"""

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import (assert_graph_steps_are_bitwise_eager_steps, assert_graph_steps_follow_the_reference, batch,
                     batch_id, gpu, host, schedule_id, standin_env)
from leapfrog_gpu import MLP, Leapfrog, Sequential
from leapfrog_gpu.backends import ops_cuda

SIZES = [7, 13, 5, 11, 3]
SCHEDULES = [Sequential(), Sequential(fused=True), Leapfrog(1), Leapfrog(1, fused=True), Leapfrog(2),
             Leapfrog(2, fused=True), Leapfrog(3), Leapfrog(3, fused=True)]


def cupy_backend(chain="cublas"):
    from leapfrog_gpu.backends.cuda import CupyBackend

    return CupyBackend(chain=chain)


def train(net, schedule, size, graph, steps=5):
    """float32 parameters (on the host) after each of ``steps`` SGD steps, eta changing every step."""
    taken = []
    for step, eta in enumerate([0.5, 0.1, 0.3, 0.0, 0.2][:steps]):
        x, y = batch(SIZES, size, seed=step, dtype=np.float32)
        net.sgd_step(x, y, eta, schedule, graph=graph)
        taken.append(host(net.weights + net.biases))
    return taken


@pytest.fixture
def no_cupy_matmul(standin, monkeypatch):
    """CuPy's own cuBLAS (``cupy.matmul``) fails the test if anything calls it."""

    def refused(*args, **kwargs):
        raise AssertionError("cupy.matmul was called: the chain should run on nvmath-python's cuBLAS")

    monkeypatch.setattr(standin, "matmul", refused)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("size", [1, 7], ids=batch_id)
@pytest.mark.parametrize("transpose", [False, True], ids=["w", "w^T"])
def test_the_products_follow_the_float64_maths(standin, dtype, size, transpose):
    """``Blas.matmul``: out = w x (a GEMV at B = 1, a GEMM above), w read transposed for (5), row-major
    arrays through column-major cuBLAS; the output's NaN fill is not read (beta = 0)."""
    rng = np.random.default_rng(size)
    n, m = 5, 3
    w = rng.standard_normal((m, n) if transpose else (n, m))
    x = rng.standard_normal((m, size))
    want = (w.T if transpose else w) @ x
    with cupy_backend() as cuda:
        dw, dx = standin.asarray(w.astype(dtype)), standin.asarray(x.astype(dtype))
        out = standin.empty((n, size), dtype)  # NaN-filled
        cuda.synchronize()
        cuda.launch(cuda.main, "product", cuda.ops.blas.matmul, out, dw, dx, transpose)
        cuda.synchronize()
        got = out.get()
    routine = ("s" if dtype == np.float32 else "d") + ("gemv" if size == 1 else "gemm")
    assert [name for name, _, _ in standin.nvmath.calls] == [routine]
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-14, atol=1e-6)


def laid_out(standin, array, layout):
    """``(view, whole)``: ``array`` on the stand-in as a C-contiguous array (``"C"``), the transpose of one
    (``"F"``), or the first columns of a wider one, its other columns NaN (``"padded"``: the stride between rows
    beyond the row); ``whole``, the array that holds it."""
    if layout == "F":
        whole = standin.asarray(np.ascontiguousarray(array.T))
        return whole.T, whole
    wide = np.full((array.shape[0], array.shape[1] + 3 * (layout == "padded")), np.nan)
    wide[:, :array.shape[1]] = array
    whole = standin.asarray(wide)
    return whole[:, :array.shape[1]], whole


@pytest.mark.parametrize("size", [1, 6], ids=batch_id)
@pytest.mark.parametrize("w_layout, x_layout, out_layout",
                         [("C", "C", "C"), ("F", "padded", "padded"), ("padded", "F", "C"), ("F", "F", "padded"),
                          ("C", "C", "F")])
def test_bound_products_of_every_layout_follow_the_float64_maths(standin, size, w_layout, x_layout, out_layout):
    """``bind_matmul`` through cuBLAS for operands of either unit stride, with a leading dimension beyond their rows
    (a time step's columns), w read as it is or transposed, into ``out`` or added: the float64 maths, each one call
    of the handle, and ``out``'s padding untouched; an ``out`` whose columns have the unit stride, which cuBLAS's
    row-major reading cannot write (``cublas.takes``), through ``cupy.matmul``."""
    rng = np.random.default_rng(size)
    n, m = 5, 3
    for transpose in (False, True):
        for accumulate in (False, True):
            w = rng.standard_normal((m, n) if transpose else (n, m))
            x, z0 = rng.standard_normal((m, size)), rng.standard_normal((n, size))
            with cupy_backend() as cuda:
                (dw, _), (dx, _), (out, whole) = (laid_out(standin, a, layout) for a, layout in
                                                  ((w, w_layout), (x, x_layout), (z0, out_layout)))
                product = cuda.ops.bind_matmul(out, dw, dx, transpose, accumulate)
                cuda.synchronize()
                standin.nvmath.calls.clear()
                cuda.launch(cuda.main, "product", product)
                cuda.synchronize()
                got, whole = out.get(), whole.get()
            routines = [] if out_layout == "F" and size > 1 else ["dgemv" if size == 1 else "dgemm"]  # a column: a row
            assert [name for name, _, _ in standin.nvmath.calls] == routines
            want = (z0 if accumulate else 0) + (w.T if transpose else w) @ x
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14, err_msg=f"{transpose=}, {accumulate=}")
            assert out_layout != "padded" or np.isnan(whole[:, size:]).all()


@pytest.mark.parametrize("accumulate", [False, True], ids=["into", "added"])
def test_a_product_a_worker_makes_runs_on_a_handle_of_that_workers_stream(standin, accumulate):
    """A bound product a worker may make (``worker=True``) runs on a cuBLAS handle of the stream current at the
    call, one handle per stream, each with its own workspace (cuBLAS's bits are the same only where a handle serves
    one stream), so the worker's next kernel reads it made (under workers-first it ran before the main stream's
    product otherwise); on the main stream it takes the main stream's handle, as the others do."""
    rng = np.random.default_rng(1)
    w, x, z0 = rng.standard_normal((5, 3)), rng.standard_normal((3, 4)), rng.random((5, 4))
    with cupy_backend() as cuda:
        dw, dx = standin.asarray(w), standin.asarray(x)
        on_worker, on_main, again = (standin.empty((5, 4)) for _ in range(3))  # NaN-filled
        for out in (on_worker, on_main, again):
            out.set(z0)
        worker = cuda.workers(1)[0]
        products = [cuda.ops.bind_matmul(out, dw, dx, accumulate=accumulate, worker=made_on_worker)
                    for out, made_on_worker in ((on_worker, True), (on_main, False), (again, True))]  # as a plan
        cuda.synchronize()
        cuda.launch(worker, "bound", products[0])
        cuda.launch(worker, "read", standin.multiply, on_worker, 2.0, on_worker)
        cuda.launch(cuda.main, "bound", products[1])
        cuda.launch(cuda.main, "bound", products[2])
        cuda.synchronize()
        assert standin.nvmath.calls == [("dgemm", worker.ptr, False)] + [("dgemm", cuda.main.ptr, False)] * 2
        handles = {stream: cuda.ops.blas._handles[stream.ptr] for stream in (worker, cuda.main)}
        assert len({handle for handle, _ in handles.values()}) == 2
        assert len({workspace.data.ptr for _, workspace in handles.values()}) == 2
        assert standin.nvmath.get_stream(handles[worker][0]) == worker.ptr
        got_worker, got_main, got_again = on_worker.get(), on_main.get(), again.get()
    want = (z0 if accumulate else 0) + w @ x
    np.testing.assert_allclose(got_worker, 2 * want, rtol=1e-14)
    for got in (got_main, got_again):
        np.testing.assert_allclose(got, want, rtol=1e-14)


@pytest.mark.parametrize("size", [1, 7], ids=batch_id)
@pytest.mark.parametrize("schedule", SCHEDULES, ids=schedule_id)
def test_graph_steps_on_cublas_are_bitwise_eager_steps_on_cublas(standin, no_cupy_matmul, schedule, size):
    """The chain on nvmath-python's cuBLAS in eager and graph steps alike (one handle, its workspace and
    the main stream): bitwise the same parameters after every step; the capture holds cuBLAS calls."""
    with cupy_backend() as cuda:
        assert cuda.ops.blas is not None and "chain='cublas' (nvmath)" in repr(cuda)
        want = train(MLP(SIZES, seed=4, backend=cuda), schedule, size, graph=False)
        got = train(MLP(SIZES, seed=4, backend=cuda), schedule, size, graph=True)
        main = cuda.main.ptr
    calls = standin.nvmath.calls
    routine = "sgemv" if size == 1 else "sgemm"
    assert {name for name, _, _ in calls} == {routine} and {stream for _, stream, _ in calls} == {main}
    assert sum(capturing for _, _, capturing in calls) == 2 * (len(SIZES) - 1) - 1  # (2) every layer, (5) below L
    for step, (a, b) in enumerate(zip(want, got)):
        assert all(np.array_equal(p, q) for p, q in zip(a, b)), f"graph step {step} differs from the eager one"


@pytest.mark.parametrize("size", [1, 7], ids=batch_id)
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(1), Leapfrog(2, fused=True), Leapfrog(3)],
                         ids=schedule_id)
def test_graph_steps_on_cublas_follow_the_float64_reference(standin, no_cupy_matmul, schedule, size):
    with cupy_backend() as cuda, MLP(SIZES, activation="tanh", dtype="float64", seed=2, backend=cuda) as net:
        assert_graph_steps_follow_the_reference(net, schedule, size)


PLANTS = {
    "no set_workspace": ("set_workspace", "on a handle without a workspace of its own"),
    "no set_stream": ("set_stream", r"but the handle's stream is <Stream 0x0 \(null\)>: the product would run "
                                    "outside the graph"),
    "set_stream after set_workspace": (None, "on a handle without a workspace of its own"),
}


@pytest.mark.parametrize("plant", PLANTS)
def test_the_capture_is_refused_without_the_workspace_or_the_stream(standin, monkeypatch, plant):
    """A handle whose workspace is not set (or was reset by a later set_stream, as cuBLAS does), or whose
    stream is not set (the legacy stream): the eager run does the step, the capture is refused, no graph
    is kept, and the next synchronize() raises the stand-in's cuBLAS error saying why."""
    nvmath = standin.nvmath
    skipped, message = PLANTS[plant]
    if skipped:
        monkeypatch.setattr(nvmath, skipped, lambda *args: None)
    with cupy_backend() as cuda, MLP(SIZES, dtype="float64", backend=cuda) as net:
        if skipped is None:
            nvmath.set_stream(cuda.ops.blas.handle, cuda.main.ptr)
        x, y = batch(SIZES, 3)
        before = host(net.weights)
        net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
        with pytest.raises(nvmath.cuBLASError, match=f"NOT_SUPPORTED \\(15\\): dgemm during .*{message}"):
            net.synchronize()
        assert net.plan(3).captured == {}
        assert not all(np.array_equal(p, q) for p, q in zip(host(net.weights), before))  # the eager run


def test_the_handle_is_set_up_once_before_any_capture_and_destroyed_on_close(standin):
    nvmath = standin.nvmath
    with cupy_backend() as cuda:
        handle = cuda.ops.blas.handle
        assert nvmath.get_stream(handle) == cuda.main.ptr
        assert nvmath.get_pointer_mode(handle) == nvmath.PointerMode.HOST
        assert nvmath._handles[handle].workspace is not None
        with cupy_backend(chain="kernels") as kernels:
            assert kernels.ops.blas is None and len(nvmath._handles) == 1  # no handle for our kernels
    assert nvmath._handles == {}


def test_without_nvmath_graph_mode_runs_our_kernels_and_says_so_once(standin_without_nvmath, monkeypatch, caplog):
    """Without nvmath-python: one warning for the process however many captures; the graph steps are then
    bitwise the eager steps on our kernels (``chain="kernels"``), while eager steps stay on CuPy's cuBLAS."""
    monkeypatch.setattr(ops_cuda, "_said", set())
    caplog.set_level(logging.WARNING, logger="leapfrog_gpu")
    with cupy_backend(chain="kernels") as kernels:
        want = train(MLP(SIZES, seed=4, backend=kernels), Leapfrog(2), 3, graph=False)
    with cupy_backend() as cuda:
        assert cuda.ops.blas is None and "chain='cublas' (cupy.matmul)" in repr(cuda)
        got = train(MLP(SIZES, seed=4, backend=cuda), Leapfrog(2), 3, graph=True)
        train(MLP(SIZES, seed=4, backend=cuda), Sequential(), 1, graph=True, steps=2)
    with cupy_backend() as again:
        train(MLP(SIZES, seed=4, backend=again), Leapfrog(3), 2, graph=True, steps=2)
    said = [record.getMessage() for record in caplog.records if record.name == "leapfrog_gpu"]
    assert said == ["graph mode runs the chain (2)(5) on our kernels of kernels/chain.cu, not cuBLAS: "
                    "nvmath-python is not installed (pip install nvmath-python)"]
    for step, (a, b) in enumerate(zip(want, got)):
        assert all(np.array_equal(p, q) for p, q in zip(a, b)), f"graph step {step} differs from our kernels'"


def test_a_handle_that_nvmath_cannot_make_falls_back_the_same_way(standin, monkeypatch, caplog):
    """nvmath-python imports, but makes no handle (no cuBLAS library, no driver): eager steps call
    cupy.matmul, graph steps run our kernels, and the warning carries what nvmath said."""
    nvmath = standin.nvmath

    def create():
        raise nvmath.cuBLASError(nvmath.Status.NOT_INITIALIZED)

    monkeypatch.setattr(nvmath, "create", create)
    monkeypatch.setattr(ops_cuda, "_said", set())
    caplog.set_level(logging.WARNING, logger="leapfrog_gpu")
    with cupy_backend() as cuda:
        assert cuda.ops.blas is None and "chain='cublas' (cupy.matmul)" in repr(cuda)
        train(MLP(SIZES, seed=4, backend=cuda), Leapfrog(2), 2, graph=True, steps=2)
    said = [record.getMessage() for record in caplog.records if record.name == "leapfrog_gpu"]
    assert said == ["graph mode runs the chain (2)(5) on our kernels of kernels/chain.cu, not cuBLAS: "
                    "nvmath-python's cuBLAS makes no handle: cuBLASError: NOT_INITIALIZED (1)"]


def test_the_stand_in_has_the_real_bindings_names_arguments_and_values():
    """Each binding the stand-in models, against nvmath-python's own (which imports without a GPU)."""
    import inspect

    real = pytest.importorskip("nvmath.bindings.cublas", reason="needs nvmath-python (in the test extras)")
    import fake_cupy.nvmath as fake

    for name in ("create", "destroy", "set_stream", "get_stream", "set_workspace", "set_pointer_mode",
                 "get_pointer_mode", "sgemm", "dgemm", "sgemv", "dgemv"):
        assert list(inspect.signature(getattr(fake, name)).parameters) == \
            list(inspect.signature(getattr(real, name)).parameters), name
    for kind in ("Status", "Operation", "PointerMode"):
        assert {m.name: int(m) for m in getattr(fake, kind)}.items() <= \
            {m.name: int(m) for m in getattr(real, kind)}.items(), kind
    assert issubclass(real.cuBLASError, Exception)


def test_a_command_in_a_subprocess_finds_the_stand_in_nvmath():
    """``PYTHONPATH=tests/harness/standin:tests/harness`` gives a subprocess the stand-in's nvmath too."""
    env = standin_env()
    code = "from leapfrog_gpu.backends.cuda import CupyBackend; print(repr(CupyBackend()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "chain='cublas' (nvmath)" in out


# -- on a GPU: nvmath-python's cuBLAS inside a real CUDA graph ------------------------------------------

@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 7, 32], ids=batch_id)
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(1), Leapfrog(2), Leapfrog(3, fused=True)],
                         ids=schedule_id)
def test_graph_steps_on_the_gpu_are_bitwise_eager_steps_on_cublas(schedule, size):
    """CUDA graphs holding cuBLAS, replayed 20 times, eta changing: bitwise the eager steps on cuBLAS."""
    pytest.importorskip("nvmath.bindings.cublas", reason="needs nvmath-python")
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as cuda:
        assert cuda.ops.blas is not None, cuda.ops._why
        assert_graph_steps_are_bitwise_eager_steps(cuda, schedule, size)
