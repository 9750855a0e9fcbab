"""The chain kernels of kernels/chain.cu, (2)(3) and (5), against the float64 maths of the reference.

They run through ``CudaOps(chain="kernels")``, so with the launch shapes and ``-D`` options of
``leapfrog_gpu.backends.launch``: on the CPU under the fiber harness of ``tests/harness/cuda_cpu`` (always), and
on a GPU through CuPy (skipped without one). Sizes are odd and non-square; every output starts as NaN.

Expected values are the float64 expressions of ``leapfrog_gpu.reference``: ``z = w a + b``,
``sigma(z)``, ``sigma'(z)``, and ``((w^{l+1})^T delta^{l+1}) * sp``. Tolerance, per element:
``2 * e32 + 4 * eps * magnitude``, where ``e32`` is the largest error of the same expression evaluated by
plain NumPy in float32 (zero in float64) and ``magnitude`` the sum of the absolute values of the terms
(and of b): a kernel may be twice as wrong as a plain float32 implementation, plus a few units in the
last place for another order of summation and a fused multiply-add. sigma and sigma' move by at most
the error of z (|sigma'| <= 1 for every activation here), plus a few ulp of their own.

relu's derivative jumps at z = 0, so the inputs plant exact zeros: rows of w and b that are zero, and a
row whose terms cancel exactly (small multiples of 1/4 sum without rounding). There sigma and sigma'
must be exactly 0; elsewhere relu's sigma' is compared where |z| exceeds the tolerance of z.
"""

import re

import numpy as np
import pytest

import cuda_cpu
from helpers import OUT_OF_RANGE, CpuDevice, gpu_device_or_skip, mutant, rows_of_blocks
from leapfrog_gpu import reference
from leapfrog_gpu.backends import launch, ops_cuda, ops_numpy
from leapfrog_gpu.core.functions import OUTPUT_ACTIVATIONS

DTYPES = (np.float32, np.float64)
PAIRS = [(1, 1), (2, 31), (33, 257), (257, 33)]  # (n, m): outputs and inputs of the layer
WIDE = [(260, 36), (8, 1100)]  # rows a multiple of 4 long: the GEMVs' 16-byte path; 1100 > one chunk
BATCHES = (1, 3, 64)


@pytest.fixture(scope="module")
def cpu():
    if not cuda_cpu.available():
        pytest.fail(f"the CPU harness needs a C++ compiler ({cuda_cpu.CXX}) on the PATH")
    device = CpuDevice()
    device.ops.chain = "kernels"
    return device


@pytest.fixture(scope="module", params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request):
    if request.param == "gpu":
        device = gpu_device_or_skip()
        device.ops.chain = "kernels"
        return device
    return request.getfixturevalue("cpu")


def forward_inputs(n, m, batch, dtype, seed=0):
    """w, a_prev, b with exact zeros of z planted: row 0 of w and b zero (when n > 1), and, in column 0,
    a row whose terms cancel exactly (w small integers, a_prev multiples of 1/4, b minus their sum)."""
    rng = np.random.default_rng([n, m, batch, seed])
    w = rng.standard_normal((n, m)).astype(dtype)
    a_prev = (rng.integers(-8, 9, (m, batch)) / 4).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    if n > 1:
        w[0], b[0] = 0, 0
        w[-1] = rng.integers(-3, 4, m)
        b[-1] = -(w[-1].astype(np.float64) @ a_prev[:, 0].astype(np.float64))
    return {"w": w, "a_prev": a_prev, "b": b}


def run_forward(dev, x, activation, order="C"):
    """z, a and sp of ``dev.ops.forward`` on x, the (n, B) arrays in ``order``."""
    n, batch = x["w"].shape[0], x["a_prev"].shape[1]
    z, a, sp = (dev.to_device(np.full((n, batch), np.nan, x["w"].dtype, order=order)) for _ in range(3))
    a_prev = dev.to_device(np.asarray(x["a_prev"], order=order))
    dev.ops.forward(z, a, sp, dev.to_device(x["w"]), a_prev, dev.to_device(x["b"]), activation)
    return dev.to_host(z), dev.to_host(a), dev.to_host(sp)


def check_forward(dev, x, activation, order="C"):
    w64, a64, b64 = (x[name].astype(np.float64) for name in ("w", "a_prev", "b"))
    z_ref = w64 @ a64 + b64[:, None]
    e32 = 0.0
    if x["w"].dtype == np.float32:
        e32 = float(np.max(np.abs((x["w"] @ x["a_prev"] + x["b"][:, None]) - z_ref)))
    eps = np.finfo(x["w"].dtype).eps
    bound = 2 * e32 + 4 * eps * (np.abs(w64) @ np.abs(a64) + np.abs(b64)[:, None])
    z, a, sp = run_forward(dev, x, activation, order)
    a_ref, sp_ref = reference.sigma(activation, z_ref), reference.sigma_prime(activation, z_ref)
    compare("z", z, z_ref, bound)
    compare("a", a, a_ref, bound + 4 * eps * np.maximum(np.abs(a_ref), 1))
    steady = np.abs(z_ref) > bound if activation == "relu" else np.ones(z_ref.shape, bool)
    compare("sp", np.where(steady, sp, sp_ref), sp_ref, bound + 4 * eps * np.maximum(np.abs(sp_ref), 1))
    ties = z_ref == 0
    assert np.all(z[ties] == 0), "an exact zero of z came out non-zero"
    if activation == "relu":
        assert np.all(a[ties] == 0) and np.all(sp[ties] == 0), "relu at z = 0: want a = 0 and sigma' = 0"
    return ties.sum()


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", BATCHES)
def test_a_nan_weight_gives_a_nan_unit_through_relu(device, batch, dtype):
    """(2)(3) through a NaN weight: z and relu(z) NaN for every sample of that unit, sigma' 0, the other unit
    exact (2). The kernels' relu once gave 0 for NaN (GEMV and GEMM alike)."""
    x = {"w": np.array([[np.nan, 1], [1, 1]], dtype), "a_prev": np.ones((2, batch), dtype), "b": np.zeros(2, dtype)}
    z, a, sp = run_forward(device, x, "relu")
    assert np.isnan(z[0]).all() and np.isnan(a[0]).all() and (sp[0] == 0).all()
    assert (z[1] == 2).all() and (a[1] == 2).all() and (sp[1] == 1).all()


def compare(name, got, want, bound):
    assert got.shape == want.shape
    error = np.abs(got - want)
    excess = np.nan_to_num(error - bound, nan=np.inf)
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(excess), error.shape))
    assert np.all(error <= bound), (
        f"{name}: error {error[worst]:.3g} > bound {np.broadcast_to(bound, error.shape)[worst]:.3g} at {worst} "
        f"(got {got[worst]}, want {want[worst]})")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("activation, n, m, batch", [
    (activation, n, m, batch) for activation in OUTPUT_ACTIVATIONS for n, m in PAIRS + WIDE for batch in BATCHES
    if batch < 64 or n * m < 4096 or activation == "tanh"])  # the largest GEMMs once: the activation is elementwise
def test_forward(device, activation, n, m, batch, dtype):
    """(2)(3): the GEMV at B = 1, the staged GEMM above."""
    ties = check_forward(device, forward_inputs(n, m, batch, dtype), activation)
    assert ties >= (0 if n == 1 else batch + 1)  # row 0 in every column, the cancelling row in column 0


class Host:
    """The NumPy backend's ops on host arrays, kept in the order they come in."""

    ops = ops_numpy
    to_device = to_host = staticmethod(np.array)


@pytest.mark.parametrize("activation", OUTPUT_ACTIVATIONS)
@pytest.mark.parametrize("n, m, batch", [(1, 5, 4), (33, 257, 1), (33, 257, 3), (257, 33, 64), (8, 1100, 64)])
def test_the_host_forward_on_batch_major_columns(activation, n, m, batch):
    """``ops_numpy.forward`` on (n, B) arrays in Fortran order, as the NumPy backend's plans hold them: for
    n, B > 1 its product goes through sp's memory in row-major order, and z, a and sp come out as the reference's."""
    x = forward_inputs(n, m, batch, np.float32)
    z = np.empty((n, batch), order="F")
    assert (ops_numpy.product_target(z, np.empty_like(z)) is z) == (n == 1 or batch == 1)  # the path this test is for
    ties = check_forward(Host(), x, activation, order="F")
    assert ties >= (0 if n == 1 else batch + 1)


def backward_inputs(n, m, batch, dtype, seed=0):
    """w^{l+1} (m, n), delta^{l+1} (m, B), and sigma'(z^l) (n, B) in [0, 1] with exact zeros and ones."""
    rng = np.random.default_rng([n, m, batch, seed, 1])
    sp = rng.random((n, batch))
    sp[rng.random((n, batch)) < 0.2] = 0
    sp[rng.random((n, batch)) < 0.1] = 1
    return {"w": rng.standard_normal((m, n)).astype(dtype), "delta_next": rng.standard_normal((m, batch)).astype(dtype),
            "sp": sp.astype(dtype)}


def run_backward(dev, x):
    n, batch = x["sp"].shape
    delta = dev.to_device(np.full((n, batch), np.nan, x["w"].dtype))
    dev.ops.backward(delta, dev.to_device(x["w"]), dev.to_device(x["delta_next"]), dev.to_device(x["sp"]))
    return dev.to_host(delta)


def check_backward(dev, x):
    w64, d64, sp64 = (x[name].astype(np.float64) for name in ("w", "delta_next", "sp"))
    want = (w64.T @ d64) * sp64
    e32 = 0.0
    if x["w"].dtype == np.float32:
        e32 = float(np.max(np.abs((x["w"].T @ x["delta_next"]) * x["sp"] - want)))
    eps = np.finfo(x["w"].dtype).eps
    delta = run_backward(dev, x)
    compare("delta", delta, want, 2 * e32 + 4 * eps * (np.abs(w64).T @ np.abs(d64)) * sp64)
    assert np.all(delta[sp64 == 0] == 0), "sigma' = 0 must give delta = 0 exactly"


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("n, m", PAIRS + WIDE + [(31, 2)])
def test_backward(device, n, m, batch, dtype):
    """(5): the transposed GEMV at B = 1, the staged GEMM above."""
    check_backward(device, backward_inputs(n, m, batch, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", [2, 31, 32, 33])
@pytest.mark.parametrize("n, m", [(33, 257), (70, 1100)])
def test_gemms_at_ragged_batches(device, n, m, batch, dtype):
    """(2)(3) and (5) at batches around a block's 16 or 32 columns (8 or 16 doubles), m over several stages."""
    check_forward(device, forward_inputs(n, m, batch, dtype), "relu")
    check_backward(device, backward_inputs(n, m, batch, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("groups", launch.GEMM_COLUMNS_CHOICES)
@pytest.mark.parametrize("rows", launch.GEMM_ROWS_CHOICES)
def test_every_gemm_block_shape(cpu, monkeypatch, rows, groups, dtype):
    """Each block shape chain_launch may take (rows, groups of columns): its own tiles, slices and sums by
    halves, ragged at both ends (n and B no multiple of them, m over several stages and not one of 4)."""
    monkeypatch.setattr(launch, "GEMM_ROWS_CHOICES", (rows,))
    monkeypatch.setattr(launch, "GEMM_COLUMNS_CHOICES", (groups,))
    assert launch.gemm_shape(70, 33, np.dtype(dtype).itemsize) == (rows, groups)
    check_forward(cpu, forward_inputs(70, 301, 33, dtype), "tanh")
    check_backward(cpu, backward_inputs(70, 301, 33, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("n, m, batch", [(33, 31, 3), (70, 1100, 33)])
def test_the_plain_and_the_asynchronous_copies_give_the_same_bits(cpu, monkeypatch, n, m, batch, dtype):
    """kernels/pipeline.h's two paths of the GEMMs: the stages of w landing at the wait that covers them (the
    harness's asynchronous copies), or at once (LEAPFROG_PLAIN_COPY, where a copy into a stage still being
    read would show): the same sums in the same order, so the same bits."""
    x, y = forward_inputs(n, m, batch, dtype), backward_inputs(n, m, batch, dtype)
    asynchronous = [*run_forward(cpu, x, "sigmoid"), run_backward(cpu, y)]
    monkeypatch.setattr(launch, "PLAIN_COPY", True)
    plain = [*run_forward(cpu, x, "sigmoid"), run_backward(cpu, y)]
    assert all(np.array_equal(p, q, equal_nan=False) for p, q in zip(asynchronous, plain))


@pytest.mark.parametrize("forward_block, backward_block", [((32, 1), (4, 32)), ((32, 16), (16, 512))])
def test_gemvs_with_other_block_shapes(cpu, monkeypatch, forward_block, backward_block):
    """The GEMVs' sums meet in shuffles and a fixed-order pass whose shape follows the block (-D options):
    other shapes, down to one warp a block and a thread across the columns, give the same maths."""
    monkeypatch.setattr(launch, "FORWARD_GEMV_BLOCK", forward_block)
    monkeypatch.setattr(launch, "BACKWARD_GEMV_BLOCK", backward_block)
    for n, m in [(33, 257), (257, 33), (1, 5)]:
        check_forward(cpu, forward_inputs(n, m, 1, np.float32), "relu")
        check_backward(cpu, backward_inputs(n, m, 1, np.float32))


class MisalignedDevice(CpuDevice):
    """CpuDevice whose arrays start one element past a 16-byte boundary: the GEMVs' scalar path."""

    def to_device(self, array):
        raw = np.empty(array.size + 16 // array.itemsize + 1, array.dtype)
        start = (-raw.ctypes.data % 16) // array.itemsize + 1
        copy = raw[start:start + array.size].reshape(array.shape)
        copy[...] = array
        return copy

    def to_host(self, array):
        return np.array(array)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("n, m", WIDE)
def test_the_vector_and_the_scalar_path_give_the_same_bits(cpu, n, m, dtype):
    """Aligned rows take 16-byte loads, the same rows one element off a boundary scalar ones: the same
    elements summed in the same order, so the same bits."""
    other = MisalignedDevice()
    other.ops.chain = "kernels"
    x, y = forward_inputs(n, m, 1, dtype), backward_inputs(m, n, 1, dtype)
    assert all(np.array_equal(p, q) for p, q in zip(run_forward(cpu, x, "tanh"), run_forward(other, x, "tanh")))
    assert np.array_equal(run_backward(cpu, y), run_backward(other, y))


def test_launch_shapes_cover_every_output_within_cuda_limits():
    """Past 65535 rows of blocks too (2_100_000 rows at B > 1: grid z), every row of blocks taken once."""
    for n, batch in [(1, 1), (257, 1), (100_000, 1), (4096, 32), (100_000, 3), (3, 100_000), (2_100_000, 1),
                     (2_100_000, 2), (4_200_000, 33)]:
        for kind in ("forward", "backward"):
            for itemsize in (4, 8):
                grid, block, _ = launch.chain_launch(kind, n, batch, itemsize)
                assert block[0] * block[1] * block[2] <= 1024 and grid[0] < 2**31 and max(grid[1:]) <= 65535
                if batch == 1:
                    per_block = block[1] if kind == "forward" else launch.BACKWARD_GEMV_BLOCK[0]
                    assert grid[0] * per_block >= n and grid[1:] == (1, 1)
                else:  # gemm_shape's rows, and its groups of 32 bytes of the batch a block
                    rows, groups = launch.gemm_shape(n, batch, itemsize)
                    assert grid[0] * groups * 32 // itemsize >= batch
                    count = -(-n // rows)
                    assert np.array_equal(rows_of_blocks(grid, count), np.arange(count)), (n, batch, grid)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("rows", launch.GEMM_ROWS_CHOICES)
def test_gemms_past_the_rows_a_grid_holds(cpu, monkeypatch, rows, dtype):
    """Grid y holds 65535 rows of blocks (launch.MAX_GRID_Y; 3 here): past them the rows of blocks go on in grid z
    (100 rows: 13, 7 or 4 rows of blocks in 3 x 5, 3 x 3 or 2 x 2, the last z's last blocks past them)."""
    monkeypatch.setattr(launch, "GEMM_ROWS_CHOICES", (rows,))
    monkeypatch.setattr(launch, "MAX_GRID_Y", 3)
    assert launch.chain_launch("forward", 100, 33, np.dtype(dtype).itemsize)[0][1:] == {8: (3, 5), 16: (3, 3),
                                                                                         32: (2, 2)}[rows]
    check_forward(cpu, forward_inputs(100, 301, 33, dtype), "tanh")
    check_backward(cpu, backward_inputs(100, 301, 33, dtype))


def test_the_same_launch_gives_the_same_bits(cpu):
    """Fixed order of summation: rerunning a kernel on the same inputs reproduces every bit."""
    x = forward_inputs(257, 33, 3, np.float32)
    first = run_forward(cpu, x, "tanh")
    assert all(np.array_equal(p, q) for p, q in zip(first, run_forward(cpu, x, "tanh")))
    y = backward_inputs(33, 257, 1, np.float32)
    assert np.array_equal(run_backward(cpu, y), run_backward(cpu, y))


@pytest.mark.parametrize(
    "function, old, new, occurrence, check, n, m, batch, caught_by",
    [
        # The GEMVs' sums: lanes' sums that never meet, a shuffle level short, the warps' partial sums
        # read before they are written.
        ("forward_gemv", "acc = warp_sum(acc);", "", 0, "forward", 33, 257, 1, AssertionError),
        ("backward_gemv", "offset >= ACROSS", "offset > ACROSS", 0, "backward", 33, 257, 1, AssertionError),
        ("backward_gemv", "__syncthreads();", "", 0, "backward", 33, 257, 1, AssertionError),
        # The 16-byte path (rows a multiple of 4 long): the wrong vector loaded; the vector path taken for
        # rows that are not aligned: w starts on 16 bytes, its rows of 33 do not (the harness stops a
        # misaligned 16-byte access).
        ("forward_gemv", "load16(av[u], a_prev + j);", "load16(av[u], w_i + j);", 0, "forward", 8, 1100, 1,
         AssertionError),
        ("backward_gemv", "n % V == 0 && aligned16(w)", "aligned16(w)", 0, "backward", 33, 256, 1,
         cuda_cpu.KernelError),
        # The staged GEMM: a stage used before it has landed (no wait, no barrier), the next stage copied into
        # the one being read (caught with plain copies, which land at once), the warps' partial sums read
        # before they are written; off by one at an edge: a copy one past the end of a row of w, a load one
        # past a row of the batch, a store one row past the end.
        ("chain_gemm", "wait_copies<GEMM_STAGES - 2>();", "", 0, "forward", 33, 1100, 3, cuda_cpu.KernelError),
        ("chain_gemm", "__syncthreads();", "", 0, "forward", 33, 1100, 3, AssertionError),
        ("chain_gemm", "copy_stage(ahead % GEMM_STAGES, ahead);", "copy_stage(buf, ahead);", 0, "plain", 33, 1100, 3,
         AssertionError),
        ("chain_gemm", "__syncthreads();", "", 2, "backward", 33, 31, 3, AssertionError),
        ("copy_piece", "e < left ? row + start + e : row, e < left ? 1 : 0",  # pipeline.h's, as the GEMM copies w
         "e <= left ? row + start + e : row, e <= left ? 1 : 0", 0, "forward", 33, 31, 3, cuda_cpu.KernelError),
        ("chain_gemm", "load_piece(x_next[j][h], x_k, s, batch,", "load_piece(x_next[j][h], x_k, s, batch + 1,", 0,
         "backward", 33, 31, 3, cuda_cpu.KernelError),
        ("chain_gemm", "i < n && col < batch", "i <= n && col < batch", 0, "forward", 33, 31, 3,
         cuda_cpu.KernelError),
        ("forward_gemv", "lane == 0 && i < n", "lane == 0 && i <= n", 0, "forward", 33, 31, 1, cuda_cpu.KernelError),
    ],
    ids=["gemv, no warp sum", "backward gemv, shuffle level short", "backward gemv, barrier",
         "forward gemv, wrong vector", "backward gemv, misaligned vectors", "gemm, stage wait",
         "gemm, stage barrier", "gemm, copy into the stage in use, plain copies", "gemm, partial sums barrier",
         "gemm, w bound", "gemm, batch bound", "gemm, store bound", "forward gemv, store bound"],
)
def test_harness_catches_broken_chain_kernels(monkeypatch, function, old, new, occurrence, check, n, m, batch,
                                              caught_by):
    """Mutations of the real chain kernels fail: by a mismatch with the reference, or by the harness
    stopping the launch (an access outside an argument, a misaligned vector, copies never waited for)."""
    source = ops_cuda.kernel_source
    mutated = mutant("chain.cu", function, old, new, occurrence)
    monkeypatch.setattr(ops_cuda, "kernel_source", lambda f: mutated if f == "chain.cu" else source(f))
    monkeypatch.setattr(launch, "PLAIN_COPY", check == "plain")

    def run():
        device = CpuDevice()
        device.ops.chain = "kernels"
        if check in ("forward", "plain"):
            check_forward(device, forward_inputs(n, m, batch, np.float32), "tanh")
        else:
            check_backward(device, backward_inputs(n, m, batch, np.float32))

    with pytest.raises(caught_by) as failure:
        run()
    if caught_by is cuda_cpu.KernelError:
        assert re.search(f"{OUT_OF_RANGE}|misaligned 16-byte access|asynchronous copies it never waited for",
                         str(failure.value)), failure.value
    monkeypatch.setattr(ops_cuda, "kernel_source", source)  # the real kernel passes the same check
    run()


def test_the_kernel_benchmark_runs_the_chain_on_cupy_against_cublas(standin, monkeypatch):
    """profiling/kernels.py's chain rows on the CuPy stand-in (real kernels on the CPU harness, its
    matmul NumPy's): our kernels and cuBLAS + elementwise agree, byte and flop counts are the model's;
    the timing itself is the GPU's (a constant here, measured after the work has run, as timing does)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "profiling"))
    import kernels
    from leapfrog_gpu.backends import timing
    from leapfrog_gpu.backends.cuda import CupyBackend

    monkeypatch.setattr(timing, "measure_launches", lambda backend, fn, repeats, warmup, launches:
                        [fn(), backend.synchronize(), (np.array([0.5]), np.array([0.01]))][2])
    with CupyBackend() as backend:
        rows = list(kernels.chain_rows(backend, [(33, 31, 1), (20, 17, 5)], repeats=1, warmup=0, copy=10.0))
    assert [(r["kernel"], r["impl"]) for r in rows] == [
        (f"{direction}_{shape}", impl) for shape in ("gemv", "gemm") for direction in ("forward", "backward")
        for impl in ("ours", "cublas+ew")]
    gemm = rows[4]
    assert gemm["gflops"] == pytest.approx(2 * 20 * 17 * 5 / 0.5e6) and rows[0]["gflops"] is None
    assert gemm["gbps"] == pytest.approx((20 * 17 + 17 * 5 + 20 + 3 * 20 * 5) * 4 / 0.5e6)
    assert kernels.chain_verdicts(rows) == []  # no target shape measured


def test_the_kernel_benchmark_judges_the_gemv_targets():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "profiling"))
    import kernels

    def row(n, kernel, impl, ms, gbps):
        return {"n": n, "m": n, "B": 1, "kernel": kernel, "impl": impl, "ms": {"median": ms}, "gbps": gbps,
                "copy_gbps": 4000.0}

    rows = [row(4096, "forward_gemv", "ours", 1.0, 3400.0), row(4096, "backward_gemv", "ours", 1.0, 2000.0),
            row(1024, "forward_gemv", "ours", 2.0, 1.0), row(1024, "forward_gemv", "cublas+ew", 3.0, 1.0)]
    assert kernels.chain_verdicts(rows) == [
        "target forward_gemv N=4096: 85% of copy bandwidth (>= 80%: met)",
        "target backward_gemv N=4096: 50% of copy bandwidth (>= 80%: NOT MET)",
        "target forward_gemv N=1024: 1.50x the speed of cuBLAS + elementwise (>= 1x: met)"]
