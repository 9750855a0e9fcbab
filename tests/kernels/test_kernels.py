"""Every kernel of ``kernels/*.cu``, and its NumPy twin in ``leapfrog_gpu.backends.ops_numpy``, against
the maths it computes, written out here in NumPy and evaluated in float64.

The kernels run through ``leapfrog_gpu.backends.ops_cuda.CudaOps``, so with the launch shapes and ``-D``
options of ``leapfrog_gpu.backends.launch``: on the CPU under the fiber harness of ``tests/harness/cuda_cpu``
(always), and on a GPU through CuPy (skipped without one; there each result is also compared with the
CPU harness's). The twins run as they are (device ``twin``). Expected values never come from a twin, so
a bug copied into a kernel and its twin fails both. Outputs start as NaN, so an element a kernel does
not write (or adds to instead of setting) shows. Sizes are odd on purpose: no multiple of any block or
tile edge, non-square, batches 1, 3 and 64 (and 2, 31, 32 and 33 for the rank updates). Inputs are random
normals with exact ties and boundary values mixed in: z + b = 0 exactly (relu's kink), a = y, zeros, saturating |z|, and rows that cancel.

Tolerance, per element: ``2 * e32 + 4 * eps * magnitude``. ``e32`` is the largest error the same
maths makes evaluated in float32 against float64 on the same inputs (zero for float64), so a kernel may
be twice as wrong as a plain float32 implementation. The second term allows for a different order of
rounding (a sequential sum against BLAS's, a fused multiply-add, a device ``exp`` within 2 ulp) at a
few units in the last place of the operands' magnitude: ``max(|x|, 1)`` for elementwise results, the
sum of the terms' absolute values for the reductions (6) and (7). A wrong index or a missing term moves
a result by a whole term, far outside it.
"""

import contextlib
import re

import numpy as np
import pytest

from helpers import OUT_OF_RANGE, CpuDevice, function_span, mutant, rows_of_blocks
from leapfrog_gpu import reference
from leapfrog_gpu.backends import launch, ops_cuda, ops_numpy
from leapfrog_gpu.core.functions import COSTS, OUTPUT_ACTIVATIONS

import cuda_cpu

DTYPES = (np.float32, np.float64)
SIZES = (1, 2, 31, 33, 257)
BATCHES = (1, 3, 64)
PAIRS = [(n, m) for n in SIZES for m in SIZES]  # (n, m): square and not
WIDE = [(70, 132), (36, 8)]  # rows of nabla_w a multiple of 4 long: the rank-B update's 16-byte stores
"""What the harness says of a kernel that accessed an argument outside its buffer."""


def check(device, request, run, inputs, expect, magnitude):
    """Run ``run(device, inputs)`` and compare its outputs with the maths; see the module docstring.

    ``run(device, inputs)`` launches the kernel on device copies of ``inputs`` and returns the outputs
    on the host; ``expect(inputs)`` computes the same outputs from their definition, in the inputs'
    dtype; ``magnitude(inputs64, reference)`` returns the scale of each output's elements.
    """
    dtype = next(iter(inputs.values())).dtype
    inputs64 = {name: value.astype(np.float64) for name, value in inputs.items()}
    with np.errstate(over="ignore"):
        reference = expect(inputs64)
        if dtype == np.float32:
            e32 = [np.max(np.abs(out.astype(np.float64) - ref), initial=0) for out, ref in zip(expect(inputs), reference)]
        else:
            e32 = [0.0] * len(reference)
    eps = np.finfo(dtype).eps
    bounds = [2 * e + 4 * eps * m for e, m in zip(e32, magnitude(inputs64, reference))]
    outputs = run(device, inputs)
    for k, (out, ref, bound) in enumerate(zip(outputs, reference, bounds)):
        assert out.dtype == dtype and out.shape == ref.shape
        error = np.abs(out - ref)
        excess = np.nan_to_num(error - bound, nan=np.inf)
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(excess), error.shape))
        assert np.all(error <= bound), (
            f"output {k}: error {error[worst]:.3g} > bound {np.broadcast_to(bound, error.shape)[worst]:.3g} "
            f"at {worst} (got {out[worst]}, want {ref[worst]})"
        )
    if device.name == "gpu" and cuda_cpu.available():
        # The same kernel on the CPU harness: each is within its bound of the reference, so within twice.
        for out, host, bound in zip(outputs, run(request.getfixturevalue("cpu"), inputs), bounds):
            assert np.all(np.abs(out - host) <= 2 * bound)


def nans(shape, dtype):
    """An output buffer before a kernel writes it."""
    return np.full(shape, np.nan, dtype=dtype)


@pytest.mark.parametrize("n, m", [(1, 1), (257, 31), (4096, 4096), (100_000, 3), (3, 100_000), (600_000, 3),
                                  (4_200_000, 3), (16_777_217, 3)])
def test_launch_shapes_cover_every_element_within_cuda_limits(n, m):
    """Beyond the sizes run above: grids cover the arrays and stay within CUDA's grid and block limits, past 65535
    rows of blocks too (600_000 rows at B = 1, 4_200_000 in tiles: grid z; 16_777_217 in rows: more octets a
    block), every row of blocks taken once."""
    shapes = {  # (launch, columns a block covers, rows a row of blocks covers, rows of blocks dealt out in runs)
        "outer": (launch.outer_launch(n, m), launch.OUTER_BLOCK[0], launch.OUTER_BLOCK[1], False),  # a thread each
        "rank_update": (launch.rank_update_launch(n, m, 65, 4), 64, 64, False),  # in tiles: a 64-square tile a block
    }
    for batch, itemsize in [(2, 4), (32, 4), (64, 4), (32, 8)]:  # in rows: 256 / H columns, octets dealt out
        launched, parts = launch.rank_update_launch(n, m, batch, itemsize), launch.rank_parts(batch, itemsize)
        shapes[f"rank_update {batch}"] = (launched, 256 // parts, 8, True)
        assert launched[1] == (parts, 32 // parts, 8)
    for name, ((grid, block, _), across, down, dealt) in shapes.items():
        assert block[0] * block[1] * block[2] <= 1024 and grid[0] < 2**31 and max(grid[1:]) <= 65535, name
        assert grid[0] * across >= m, name
        count = -(-n // down)
        assert np.array_equal(rows_of_blocks(grid, count, dealt), np.arange(count)), name
        assert dealt or grid[1] * grid[2] - count < grid[2], name  # past the layer: fewer than a row of blocks a z
    grid, block, _ = launch.bias_launch(n)  # a row a warp
    assert block[0] * block[1] * block[2] <= 1024 and grid[0] < 2**31 and grid[0] * launch.BIAS_ROWS >= n
    grid, block, _ = launch.elementwise_launch(n * m)
    assert block[0] <= 1024 and 1 <= grid[0] <= launch.ELEMENTWISE_MAX_GRID  # a grid-stride loop covers the rest


def _random(rng, shape, dtype, scale=1.0, specials=(0.0,)):
    """Normals times ``scale``, about a quarter of them replaced by ``specials`` (ties, boundaries)."""
    x = scale * rng.standard_normal(shape)
    chosen = rng.random(shape) < 0.25
    x[chosen] = np.resize(np.asarray(specials, dtype=np.float64), int(chosen.sum()))
    return x.astype(dtype)


def _ties(rng, shape):
    """About a quarter of the positions of ``shape``, chosen at random."""
    return rng.random(shape) < 0.25


def _elementwise_magnitude(inputs64, reference):
    return [np.maximum(np.abs(r), 1) for r in reference]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("activation", list(OUTPUT_ACTIVATIONS))
def test_bias_activation(device, request, activation, n, batch, dtype):
    """(2) bias half and (3): z + b, sigma(z + b), sigma'(z + b); some z + b exactly 0 (relu's kink), some
    saturating (|z| = 100) or at the edge of float32's normal range (sigmoid at -88)."""
    rng = np.random.default_rng([n, batch])
    inputs = {"z": _random(rng, (n, batch), dtype, 3.0, (100.0, -100.0, -88.0, 0.0)),
              "b": _random(rng, (n,), dtype)}
    tie = _ties(rng, (n, batch))
    inputs["z"][tie] = -np.broadcast_to(inputs["b"][:, None], (n, batch))[tie]  # z + b == 0 exactly

    def expect(x):
        z = x["z"] + x["b"][:, None]
        return z, reference.sigma(activation, z), reference.sigma_prime(activation, z)

    def run(dev, x):
        z, a, sp = (dev.to_device(v) for v in (x["z"], nans((n, batch), dtype), nans((n, batch), dtype)))
        dev.ops.bias_activation(z, a, sp, dev.to_device(x["b"]), activation)
        return dev.to_host(z), dev.to_host(a), dev.to_host(sp)

    check(device, request, run, inputs, expect, _elementwise_magnitude)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("activation", list(OUTPUT_ACTIVATIONS))
def test_an_activation_of_nan_is_nan(device, activation, dtype):
    """sigma(NaN) is NaN and sigma'(NaN) what the maths' comparison gives (relu's 0); the infinities go to their
    limits. The outputs hold 7 first, so that a NaN written is told from one left unwritten. A relu that gave 0 for
    NaN made a pass through a NaN weight finite, and check_finite let its step through."""
    z64 = np.array([[np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -1.5]]).T
    with np.errstate(invalid="ignore"):
        want = reference.sigma(activation, z64), reference.sigma_prime(activation, z64)
    z, a, sp = (device.to_device(v) for v in (z64.astype(dtype), np.full(z64.shape, 7, dtype),
                                              np.full(z64.shape, 7, dtype)))
    device.ops.bias_activation(z, a, sp, device.to_device(np.zeros(len(z64), dtype)), activation)
    eps = np.finfo(dtype).eps
    for name, got, expected in (("a", a, want[0]), ("sigma'", sp, want[1])):
        np.testing.assert_allclose(device.to_host(got), expected, rtol=4 * eps, atol=4 * eps, err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cost", list(COSTS))
def test_delta_output(device, request, cost, n, batch, dtype):
    """(4): (a - y) * sigma'(z) for the quadratic cost, a - y for cross-entropy; some a == y exactly."""
    rng = np.random.default_rng([n, batch, 1])
    inputs = {name: _random(rng, (n, batch), dtype) for name in ("a", "y", "sp")}
    tie = _ties(rng, (n, batch))
    inputs["y"][tie] = inputs["a"][tie]

    def expect(x):
        return ((x["a"] - x["y"]) * x["sp"] if cost == "quadratic" else x["a"] - x["y"],)

    def run(dev, x):
        delta = dev.to_device(nans((n, batch), dtype))
        a, y, sp = (dev.to_device(x[name]) for name in ("a", "y", "sp"))
        dev.ops.delta_output(delta, a, y, sp, cost)
        return (dev.to_host(delta),)

    check(device, request, run, inputs, expect, _elementwise_magnitude)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("n", SIZES)
def test_delta_hidden(device, request, n, batch, dtype):
    """(5), Hadamard half: delta * sigma'(z)."""
    rng = np.random.default_rng([n, batch, 2])
    inputs = {name: _random(rng, (n, batch), dtype) for name in ("delta", "sp")}

    def expect(x):
        return (x["delta"] * x["sp"],)

    def run(dev, x):
        delta = dev.to_device(x["delta"])
        dev.ops.delta_hidden(delta, dev.to_device(x["sp"]))
        return (dev.to_host(delta),)

    check(device, request, run, inputs, expect, _elementwise_magnitude)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_elementwise_grid_stride_loop(device, request, monkeypatch, dtype):
    """The sizes above fit in one pass of the grid; cap the grid so that every thread loops 2 or 3 times."""
    monkeypatch.setattr(launch, "ELEMENTWISE_MAX_GRID", 2)
    assert launch.elementwise_launch(257 * 3)[0][0] * launch.ELEMENTWISE_BLOCK < 257 * 3
    test_bias_activation(device, request, "sigmoid", 257, 3, dtype)
    test_delta_output(device, request, "quadratic", 257, 3, dtype)
    test_delta_hidden(device, request, 257, 3, dtype)
    test_sgd_update(device, request, (257, 3), dtype)


def step(scale, dtype, refused=0):
    """A step's controls as the update kernels read them: eta / B, and the refusal (0: update)."""
    return np.array([scale, refused], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(n, m) for n, m in PAIRS] + [(n,) for n in SIZES], ids=str)
def test_sgd_update(device, request, shape, dtype):
    """param - scale * nabla."""
    rng = np.random.default_rng(list(shape))
    inputs = {name: _random(rng, shape, dtype) for name in ("param", "nabla")}
    scale = 0.3 / 64

    def expect(x):
        return (x["param"] - scale * x["nabla"],)

    def run(dev, x):
        param = dev.to_device(x["param"])
        dev.ops.sgd_update(param, dev.to_device(x["nabla"]), dev.to_device(step(scale, dtype)), None)
        return (dev.to_host(param),)

    def magnitude(x, reference):
        return [np.maximum(np.abs(x["param"]) + scale * np.abs(x["nabla"]), 1)]

    check(device, request, run, inputs, expect, magnitude)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("n, m", PAIRS + WIDE)
def test_nabla_w(device, request, n, m, batch, dtype):
    """(7), the outer product at B = 1 and the register-blocked rank-B update."""
    rng = np.random.default_rng([n, m, batch])
    inputs = {"delta": _random(rng, (n, batch), dtype), "a": _random(rng, (m, batch), dtype)}
    check(device, request, _run_nabla_w, inputs, _expect_nabla_w, _nabla_w_magnitude)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("n, m", PAIRS + WIDE)
def test_fused_update(device, request, n, m, batch, dtype):
    """(7) fused with SGD, ``w -= scale * delta a^T`` (outer_sgd at B = 1, rank_update_sgd above);
    bitwise the plain kernel followed by sgd_update, as nabla_w.cu says."""
    rng = np.random.default_rng([n, m, batch, 4])
    inputs = {"w": _random(rng, (n, m), dtype), "delta": _random(rng, (n, batch), dtype),
              "a": _random(rng, (m, batch), dtype)}
    scale = 0.3 / batch

    def expect(x):
        return (x["w"] - scale * (x["delta"] @ x["a"].T),)

    def run(dev, x):
        w = dev.to_device(x["w"])
        dev.ops.fused_update(w, dev.to_device(x["delta"]), dev.to_device(x["a"]), dev.to_device(step(scale, dtype)),
                             None)
        return (dev.to_host(w),)

    def magnitude(x, reference):
        return [np.maximum(np.abs(x["w"]) + scale * (np.abs(x["delta"]) @ np.abs(x["a"]).T), 1)]

    check(device, request, run, inputs, expect, magnitude)
    if device.name == "twin" and batch > 1 and n * m > ops_numpy.SCRATCH:
        return  # the twin's blocks are smaller GEMMs than nabla_w's one, which BLAS may round otherwise
    (fused,) = run(device, inputs)
    w, nabla_w = device.to_device(inputs["w"]), device.to_device(nans((n, m), dtype))
    device.ops.nabla_w(nabla_w, device.to_device(inputs["delta"]), device.to_device(inputs["a"]))
    device.ops.sgd_update(w, nabla_w, device.to_device(step(scale, dtype)), None)
    np.testing.assert_array_equal(fused, device.to_host(w))


RAGGED = [(33, 31), (65, 130), (130, 67)] + WIDE  # across the 64-square tiles of the rank update


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", [2, 31, 32, 33])
@pytest.mark.parametrize("n, m", RAGGED)
def test_rank_updates_at_ragged_batches(device, request, monkeypatch, n, m, batch, dtype):
    """(7), (7) fused with SGD, and (6) with (7) in one kernel, at batches around the 16 samples (8 doubles) a
    thread of the update in rows holds, the staged chunks of the one in tiles (8 samples, 4 in float64) and the
    32 of a warp's row sums, each against its maths; in rows with every octet of rows in as few blocks as the
    launch allows (RANK_MIN_BLOCKS 1: a block's octets go round its stages and slots)."""
    monkeypatch.setattr(launch, "RANK_MIN_BLOCKS", 1)
    check_rank_updates(device, request, n, m, batch, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", [2, 33])
@pytest.mark.parametrize("n, m", [(33, 31), (130, 67)])
def test_rank_updates_in_tiles_at_any_batch(cpu, request, monkeypatch, n, m, batch, dtype):
    """The update in tiles, the path of batches past 64 (32 in float64), taken at a batch of 2 and of 33 too."""
    monkeypatch.setattr(launch, "RANK_ROWS_PARTS", ())
    check_rank_updates(cpu, request, n, m, batch, dtype)


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_rank_updates_in_tiles_at_every_stage_count(cpu, request, monkeypatch, stages, dtype):
    """RANK_STAGES chunks in flight, every count its asserts allow: the first RANK_STAGES - 1 staged before the
    loop, which copies chunk c + RANK_STAGES - 1 (with chunk 0 alone staged first, chunk 1 at 3 stages was read
    from a block's shared memory as it started: NaN on the harness)."""
    monkeypatch.setattr(launch, "RANK_STAGES", stages)
    monkeypatch.setattr(launch, "RANK_ROWS_PARTS", ())
    check_rank_updates(cpu, request, 33, 31, 65, dtype)


PAST_GRID_Y = [  # (path, n, batch, rows of grid y): 13 rows of blocks of 8 rows in 3 x 5 (grid y x z), 5 rows of
    # 64-square tiles in 2 x 3 or 3 x 2 (the last z's last blocks past them), 33 octets of rows dealt out to 2
    ("outer", 100, 1, 3), ("tiles", 257, 33, 2), ("tiles", 257, 3, 3), ("rows", 257, 32, 2)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("path, n, batch, rows", PAST_GRID_Y)
def test_rank_updates_past_the_rows_a_grid_holds(cpu, request, monkeypatch, path, n, batch, rows, dtype):
    """Grid y holds 65535 rows of blocks (launch.MAX_GRID_Y; 2 or 3 here): past them the outer product and the
    update in tiles go on in grid z, the update in rows deals more octets to a block. (7), (7) fused with SGD, and
    (6) with (7), against their maths."""
    if path == "tiles":
        monkeypatch.setattr(launch, "RANK_ROWS_PARTS", ())

    def grid():
        if batch == 1:
            return launch.outer_launch(n, 31)[0]
        return launch.rank_update_launch(n, 31, batch, np.dtype(dtype).itemsize)[0]

    wanted = grid()[1]
    monkeypatch.setattr(launch, "MAX_GRID_Y", rows)
    assert grid()[1] <= rows < wanted and (grid()[2] > 1) == (path != "rows"), grid()
    check_rank_updates(cpu, request, n, 31, batch, dtype)


def check_rank_updates(device, request, n, m, batch, dtype):
    """(7), (7) fused with SGD, and (6) with (7) in one kernel on ``device``, each against its maths."""
    rng = np.random.default_rng([n, m, batch, 12])
    inputs = {"w": _random(rng, (n, m), dtype), "delta": _random(rng, (n, batch), dtype),
              "a": _random(rng, (m, batch), dtype)}
    scale = 0.3 / batch
    check(device, request, _run_nabla_w, inputs, _expect_nabla_w, _nabla_w_magnitude)

    def run(dev, x):
        w, nabla_w, nabla_b = dev.to_device(x["w"]), dev.to_device(nans((n, m), dtype)), dev.to_device(nans(n, dtype))
        delta, a = dev.to_device(x["delta"]), dev.to_device(x["a"])
        dev.ops.fused_update(w, delta, a, dev.to_device(step(scale, dtype)), None)
        dev.ops.gradients(nabla_w, nabla_b, delta, a)
        return dev.to_host(w), dev.to_host(nabla_w), dev.to_host(nabla_b)

    def expect(x):
        return x["w"] - scale * (x["delta"] @ x["a"].T), x["delta"] @ x["a"].T, x["delta"].sum(axis=1)

    def magnitude(x, reference):
        product = np.abs(x["delta"]) @ np.abs(x["a"]).T
        return [np.maximum(np.abs(x["w"]) + scale * product, 1), product, np.abs(x["delta"]).sum(axis=1)]

    if device.name != "twin":  # the twins have no (6)(7) kernel: gradients is the pair of them
        check(device, request, run, inputs, expect, magnitude)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("n, m, batch", [(33, 31, 3), (65, 130, 32), (70, 132, 64), (70, 132, 65)])
def test_the_plain_and_the_asynchronous_copies_give_the_same_bits(cpu, monkeypatch, n, m, batch, dtype):
    """kernels/pipeline.h's two paths of the rank updates (in rows, 1, 2 and 4 threads a column; in tiles, at
    65 samples, and 64 in float64): the copies landing at the wait that covers them (the harness's asynchronous
    copies), or at once (LEAPFROG_PLAIN_COPY, where a copy into a stage still being read would show). The
    same sums in the same order, so the same bits."""
    rng = np.random.default_rng([n, m, batch, 13])
    w, delta, a = _random(rng, (n, m), dtype), _random(rng, (n, batch), dtype), _random(rng, (m, batch), dtype)

    def run():
        ops = CpuDevice().ops
        outputs = [cuda_cpu.guarded(x) for x in (w, nans((n, m), dtype), nans(n, dtype), nans((n, m), dtype))]
        ops.fused_update(outputs[0], delta, a, step(0.5, dtype), None)
        ops.gradients(outputs[1], outputs[2], delta, a)
        ops.nabla_w(outputs[3], delta, a)
        return [_bits(x) for x in outputs]

    monkeypatch.setattr(launch, "RANK_MIN_BLOCKS", 1)  # in rows: a block's octets round its stages and slots
    asynchronous = run()
    monkeypatch.setattr(launch, "PLAIN_COPY", True)
    assert run() == asynchronous


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_refused_step_writes_nothing(device, dtype, batch):
    """step[1] != 0 (check_finite found a NaN, or the host refused the step): no update kernel writes,
    whatever step[0] holds; with step[1] = 0 the same launches do write."""
    rng = np.random.default_rng(batch)
    w, delta, a = _random(rng, (33, 31), dtype), _random(rng, (33, batch), dtype), _random(rng, (31, batch), dtype)
    for refused, changed in ((7, False), (-1, False), (0, True)):
        controls = device.to_device(step(np.nan if refused else 0.5, dtype, refused))
        param, bias = device.to_device(w), device.to_device(w[:, 0].copy())
        device.ops.fused_update(param, device.to_device(delta), device.to_device(a), controls, None)
        device.ops.sgd_update(bias, device.to_device(delta[:, 0].copy()), controls, None)
        assert np.array_equal(device.to_host(param), w) != changed
        assert np.array_equal(device.to_host(bias), w[:, 0]) != changed


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(1, 1), (37, 29), (257,)], ids=str)
@pytest.mark.parametrize("where", [None, "first", "middle", "last"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_check_finite(device, monkeypatch, dtype, shape, where, bad):
    """step[1] takes the code when the array holds a NaN or an Inf anywhere (the grid-stride loop capped
    so that each thread visits several elements), and only while it is still 0; nothing else changes. Zeros,
    the largest finite magnitudes and the smallest normal one are finite."""
    monkeypatch.setattr(launch, "ELEMENTWISE_MAX_GRID", 2)
    finfo = np.finfo(dtype)
    x = _random(np.random.default_rng(list(shape)), shape, dtype, 1e30, (0.0, finfo.max, -finfo.max, finfo.tiny))
    if where is not None:
        x.reshape(-1)[{"first": 0, "middle": x.size // 2, "last": -1}[where]] = bad
    want = 0 if np.isfinite(x).all() else 5
    for before, after in ((0, want), (3, 3)):
        controls = device.to_device(np.array([0.25, before, 0.5, 0.25, 6, 0.5, 0.5, 4], dtype))
        device.ops.check_finite(controls, device.to_device(x), 5)
        assert device.to_host(controls).tolist() == [0.25, after, 0.5, 0.25, 6, 0.5, 0.5, 4]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("refusal", [0, 1, -1, np.nan])
def test_step_done(device, dtype, refusal):
    """step[7] takes step[4], the step count t, where step[1] holds no refusal (0), and keeps the t of the last
    step that updated where it holds one (any other value, NaN too); nothing else changes."""
    controls = np.array([0.25, refusal, 0.5, 0.25, 2**24 - 1, 0.5, 0.5, 2**24 - 2], dtype)
    on_device = device.to_device(controls)
    device.ops.step_done(on_device)
    got = device.to_host(on_device)
    want = controls.copy()
    want[7] = controls[4] if refusal == 0 else controls[7]
    np.testing.assert_array_equal(got, want)


def _expect_nabla_w(x):
    return (x["delta"] @ x["a"].T,)


def _run_nabla_w(dev, x):
    nabla_w = dev.to_device(nans((x["delta"].shape[0], x["a"].shape[0]), x["delta"].dtype))
    dev.ops.nabla_w(nabla_w, dev.to_device(x["delta"]), dev.to_device(x["a"]))
    return (dev.to_host(nabla_w),)


def _nabla_w_magnitude(x, reference):
    return [np.abs(x["delta"]) @ np.abs(x["a"]).T]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("n", SIZES)
def test_nabla_b(device, request, n, batch, dtype):
    """(6): the bias gradient, summed over the batch; the first row's first two terms cancel exactly."""
    rng = np.random.default_rng([n, batch, 3])
    inputs = {"delta": _random(rng, (n, batch), dtype)}
    if batch > 1:
        inputs["delta"][0, 1] = -inputs["delta"][0, 0]

    def expect(x):
        return (x["delta"].sum(axis=1),)

    def run(dev, x):
        nabla_b = dev.to_device(nans(n, dtype))
        dev.ops.nabla_b(nabla_b, dev.to_device(x["delta"]))
        return (dev.to_host(nabla_b),)

    def magnitude(x, reference):
        return [np.abs(x["delta"]).sum(axis=1)]

    check(device, request, run, inputs, expect, magnitude)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_sums_over_the_batch_are_one_rounding_of_the_exact_sum(device, request, dtype):
    """(6), alone and beside (7): 1e8 then 32 ones sum to 100000032, a float32 exactly; summed in float32 one term
    after another each one is lost (1e8 + 1 rounds to 1e8), and a lane's ones summed first give 100000024. The sums
    run in float64 (``Wide`` in vector.h; the twin's float64 sum), rounded once."""
    delta = np.ones((3, 33), dtype)
    delta[:, 0] = [1e8, -1e8, 3.0]
    want = np.array([1e8 + 32, -1e8 + 32, 35.0], dtype)
    nabla_b = device.to_device(nans(3, dtype))
    device.ops.nabla_b(nabla_b, device.to_device(delta))
    np.testing.assert_array_equal(device.to_host(nabla_b), want)
    nabla_w, nabla_b = device.to_device(nans((3, 2), dtype)), device.to_device(nans(3, dtype))
    device.ops.gradients(nabla_w, nabla_b, device.to_device(delta), device.to_device(np.ones((2, 33), dtype)))
    np.testing.assert_array_equal(device.to_host(nabla_b), want)


@pytest.mark.parametrize(
    "old, new, occurrence, plain, batch, caught_by",
    [
        # A chunk used before it has landed: no wait, a wait one group short, no barrier after the waits
        # (with plain copies, a chunk overwritten while others still read it).
        ("wait_copies<RANK_STAGES - 2>();", "", 0, False, 64, cuda_cpu.KernelError),
        ("wait_copies<RANK_STAGES - 2>();", "wait_copies<RANK_STAGES - 1>();", 0, False, 64, cuda_cpu.KernelError),
        ("__syncthreads();", "", 0, False, 64, AssertionError),
        ("__syncthreads();", "", 0, True, 64, AssertionError),
        # The next chunk copied into the stage being read: it lands only at the next wait, but with plain
        # copies it lands at once.
        ("copy_chunk(ahead % RANK_STAGES, ahead);", "copy_chunk(buf, ahead);", 0, True, 64, AssertionError),
        # Off by one: the store one row past the end, a copy one sample past a row's end, the sum one sample
        # short of each chunk; and each half's sums met with another tile's.
        ("if (i < n) {", "if (i <= n) {", 0, False, 3, cuda_cpu.KernelError),
        ("batch - sample : 0", "batch - sample + 1 : 0", 0, False, 3, cuda_cpu.KernelError),
        ("sample < C; sample += 2", "sample < C - 2; sample += 2", 0, False, 64, AssertionError),
        ("fold_half<32>(part, lane, 1)", "fold_half<32>(part, lane, 2)", 0, False, 64, AssertionError),
    ],
    ids=["wait removed", "wait one short", "barrier removed", "barrier removed, plain copies",
         "copy into the stage in use, plain copies", "store bound", "copy bound", "chunk short", "halves apart"],
)
def test_harness_catches_broken_rank_update(request, monkeypatch, old, new, occurrence, plain, batch, caught_by):
    """Mutations of the real register-tiled kernel (the rank update in tiles, taken at every batch here) fail: by
    a mismatch, or by the harness stopping the launch."""
    source = ops_cuda.kernel_source
    if old == "__syncthreads();":  # the chunk loop's barrier and w's tile's, and no others
        assert source("nabla_w.cu")[slice(*function_span(source("nabla_w.cu"), "rank_tiles"))].count(old) == 2
    mutated = mutant("nabla_w.cu", "rank_tiles", old, new, occurrence)
    monkeypatch.setattr(ops_cuda, "kernel_source", lambda f: mutated if f == "nabla_w.cu" else source(f))
    monkeypatch.setattr(launch, "PLAIN_COPY", plain)
    monkeypatch.setattr(launch, "RANK_ROWS_PARTS", ())
    rng = np.random.default_rng(7)
    inputs = {"delta": _random(rng, (33, batch), np.float32), "a": _random(rng, (31, batch), np.float32)}
    with pytest.raises(caught_by) as failure:
        check(CpuDevice(), request, _run_nabla_w, inputs, _expect_nabla_w, _nabla_w_magnitude)
    if caught_by is cuda_cpu.KernelError:
        assert re.search(f"{OUT_OF_RANGE}|asynchronous copies it never waited for", str(failure.value)), failure.value
    # The unmutated kernel passes the same check.
    monkeypatch.setattr(ops_cuda, "kernel_source", source)
    check(CpuDevice(), request, _run_nabla_w, inputs, _expect_nabla_w, _nabla_w_magnitude)


@pytest.mark.parametrize("batch", [3, 64])
def test_harness_catches_a_fused_update_that_reads_w_before_it_landed(request, monkeypatch, batch):
    """rank_update_sgd's tile of w (in tiles, taken at every batch here), copied while the block computes: read
    without the wait for it, it is the NaN a block's shared memory starts with."""
    source = ops_cuda.kernel_source
    mutated = mutant("nabla_w.cu", "rank_tiles", "wait_copies<0>();  // w's tile", "// w's tile")
    monkeypatch.setattr(ops_cuda, "kernel_source", lambda f: mutated if f == "nabla_w.cu" else source(f))
    monkeypatch.setattr(launch, "RANK_ROWS_PARTS", ())
    rng = np.random.default_rng(8)
    w, delta, a = (_random(rng, shape, np.float32) for shape in ((33, 31), (33, batch), (31, batch)))
    device = CpuDevice()
    out = device.to_device(w)
    with pytest.raises(cuda_cpu.KernelError, match="never waited for") if batch == 3 else contextlib.nullcontext():
        device.ops.fused_update(out, delta, a, step(0.5, np.float32), None)
    if batch == 64:  # several chunks: their waits land w's tile too (committed after the first), so all is well
        np.testing.assert_allclose(device.to_host(out), w - 0.5 * (delta @ a.T), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "old, new, op, batch, octets, caught_by",
    [
        # An octet read before it has landed: no wait (the copies never waited for), no barrier (the samples the
        # warp's other threads copied not there yet).
        ("wait_copies<STAGES - 2>();", "", "nabla_w", 32, 8, cuda_cpu.KernelError),
        ("__syncthreads();", "", "nabla_w", 32, 8, AssertionError),
        # The octets dealt out to the rows of blocks by a floor: the last octets left to no block.
        ("per = (octets + gridDim.y - 1) / gridDim.y", "per = octets / gridDim.y", "nabla_w", 32, 2, AssertionError),
        # Off by one: the store one row past the end, a copy of delta or a load of a one sample past its row, a
        # row sum one row past the end.
        ("if (i < n) {", "if (i <= n) {", "nabla_w", 3, 8, cuda_cpu.KernelError),
        ("i < n && s < batch", "i < n && s <= batch", "nabla_w", 3, 8, cuda_cpu.KernelError),
        ("load_piece(x[e][q], a_j, s, batch,", "load_piece(x[e][q], a_j, s, batch + 1,", "nabla_w", 3, 8,
         cuda_cpu.KernelError),
        ("first + g < end ? first + g : end - 1", "first + g", "gradients", 3, 8, cuda_cpu.KernelError),
        # A column's sums met with another column's, and the octet's w read from the next octet's slot.
        ("fold_half<COLS / 2>(acc, lane, 1)", "fold_half<COLS / 2>(acc, lane, 2)", "nabla_w", 64, 8, AssertionError),
        ("w_ring[k % SLOTS][g]", "w_ring[(k + 1) % SLOTS][g]", "fused_update", 32, 8, AssertionError),
    ],
    ids=["wait removed", "barrier removed", "octets dealt short", "store bound", "copy bound", "load bound",
         "row sum bound", "halves apart", "slot of w"],
)
def test_harness_catches_a_broken_rank_update_in_rows(request, monkeypatch, old, new, op, batch, octets, caught_by):
    """Mutations of the rank update in rows fail, each octets to a block at most (as many as a 33-row layer
    has, 5, in one block; or 2 a block, 3 rows of blocks): by a mismatch with the maths, or by the harness
    stopping the launch."""
    source = ops_cuda.kernel_source
    mutated = mutant("nabla_w.cu", "rank_rows", old, new)
    monkeypatch.setattr(launch, "RANK_ROWS_OCTETS_CHOICES", (octets,))
    monkeypatch.setattr(launch, "RANK_MIN_BLOCKS", 1)
    rng = np.random.default_rng(17)
    w, delta, a = (_random(rng, shape, np.float32) for shape in ((33, 31), (33, batch), (31, batch)))
    scale = 0.5

    def run(device, x):
        delta, a = device.to_device(x["delta"]), device.to_device(x["a"])
        if op == "fused_update":
            out = device.to_device(x["w"])
            device.ops.fused_update(out, delta, a, device.to_device(step(scale, np.float32)), None)
            return (device.to_host(out),)
        nabla_w, nabla_b = device.to_device(nans((33, 31), np.float32)), device.to_device(nans(33, np.float32))
        if op == "gradients":
            device.ops.gradients(nabla_w, nabla_b, delta, a)
            return device.to_host(nabla_w), device.to_host(nabla_b)
        device.ops.nabla_w(nabla_w, delta, a)
        return (device.to_host(nabla_w),)

    def expect(x):
        product = x["delta"] @ x["a"].T
        return {"fused_update": (x["w"] - scale * product,), "gradients": (product, x["delta"].sum(axis=1)),
                "nabla_w": (product,)}[op]

    def magnitude(x, reference):
        product = np.abs(x["delta"]) @ np.abs(x["a"]).T
        return {"fused_update": [np.maximum(np.abs(x["w"]) + scale * product, 1)],
                "gradients": [product, np.abs(x["delta"]).sum(axis=1)], "nabla_w": [product]}[op]

    inputs = {"w": w, "delta": delta, "a": a}
    monkeypatch.setattr(ops_cuda, "kernel_source", lambda f: mutated if f == "nabla_w.cu" else source(f))
    with pytest.raises(caught_by) as failure:
        check(CpuDevice(), request, run, inputs, expect, magnitude)
    if caught_by is cuda_cpu.KernelError:
        assert re.search(f"{OUT_OF_RANGE}|asynchronous copies it never waited for", str(failure.value)), failure.value
    monkeypatch.setattr(ops_cuda, "kernel_source", source)  # the real kernel passes the same check
    check(CpuDevice(), request, run, inputs, expect, magnitude)


TWIN_IS_THE_PAIR = "the NumPy twin of a fused op is the pair of twins it fuses"


def _bits(array):
    return np.ascontiguousarray(array).tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", BATCHES + (33,))
@pytest.mark.parametrize("n, m", [(1, 1), (33, 31), (130, 67)] + WIDE)
def test_gradients_are_bitwise_nabla_b_and_nabla_w(device, n, m, batch, dtype):
    """(6) and (7) in one kernel (outer_bias, rank_update_bias: nabla_b from the staged slabs of delta)
    write bit for bit what nabla_b and nabla_w write, -0 and the batch's padding included, for every
    block of the grid (n = 130: three rows of blocks)."""
    if device.name == "twin":
        pytest.skip(TWIN_IS_THE_PAIR)
    rng = np.random.default_rng([n, m, batch, 9])
    delta, a = _random(rng, (n, batch), dtype, specials=(0.0, -0.0)), _random(rng, (m, batch), dtype)
    nabla_w, nabla_b = device.to_device(nans((n, m), dtype)), device.to_device(nans(n, dtype))
    device.ops.gradients(nabla_w, nabla_b, device.to_device(delta), device.to_device(a))
    alone_w, alone_b = device.to_device(nans((n, m), dtype)), device.to_device(nans(n, dtype))
    device.ops.nabla_w(alone_w, device.to_device(delta), device.to_device(a))
    device.ops.nabla_b(alone_b, device.to_device(delta))
    assert _bits(device.to_host(nabla_w)) == _bits(device.to_host(alone_w))
    assert _bits(device.to_host(nabla_b)) == _bits(device.to_host(alone_b))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("n, m", [(1, 1), (33, 31)] + WIDE)
def test_the_update_of_a_layer_is_bitwise_sgd_update_of_w_and_of_b(device, n, m, dtype):
    """One kernel for w and b writes what two sgd_update launches write; a refused step writes nothing."""
    rng = np.random.default_rng([n, m, 10])
    w, nabla_w = _random(rng, (n, m), dtype), _random(rng, (n, m), dtype)
    b, nabla_b = _random(rng, n, dtype), _random(rng, n, dtype)
    for refused in (0, 3):
        controls = device.to_device(step(0.3 / 7, dtype, refused))
        both_w, both_b, one_w, one_b = (device.to_device(x) for x in (w, b, w, b))
        device.ops.update(both_w, device.to_device(nabla_w), both_b, device.to_device(nabla_b), controls, None)
        device.ops.sgd_update(one_w, device.to_device(nabla_w), controls, None)
        device.ops.sgd_update(one_b, device.to_device(nabla_b), controls, None)
        assert _bits(device.to_host(both_w)) == _bits(device.to_host(one_w))
        assert _bits(device.to_host(both_b)) == _bits(device.to_host(one_b))
        if refused:
            assert _bits(device.to_host(both_w)) == _bits(w) and _bits(device.to_host(both_b)) == _bits(b)


def optimizer_controls(lr, batch, t, dtype, refused=0, betas=(0.9, 0.999)):
    """The controls the optimizers' kernels read: [eta / B (unused), refusal, lr, 1 / B, t, 1 - beta1^t,
    sqrt(1 - beta2^t)]."""
    return np.array([0.0, refused, lr, 1 / batch, t, 1 - betas[0] ** t, np.sqrt(1 - betas[1] ** t)], dtype)


MOMENTUM = {"first step": (1, 0.9, 0.0, False, 0.0), "momentum, dampening": (5, 0.9, 0.3, False, 0.0),
            "nesterov, decay": (5, 0.8, 0.0, True, 0.01), "decay alone": (5, 0.0, 0.0, False, 0.05)}
"""(t, momentum, dampening, nesterov, weight_decay) of the momentum kernel's cases."""


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(33, 31), (257, 3), (2,)], ids=str)
@pytest.mark.parametrize("case", list(MOMENTUM))
def test_momentum_update(device, request, case, shape, dtype):
    """torch.optim.SGD's step: g = nabla / B + wd p; buf = g at t = 1, else mu buf + (1 - d) g; p -= lr * (buf,
    or g + mu buf with Nesterov); without momentum the buffer is not touched."""
    t, momentum, dampening, nesterov, decay = MOMENTUM[case]
    rng = np.random.default_rng([len(shape), shape[0], t])
    inputs = {name: _random(rng, shape, dtype) for name in ("param", "nabla", "buf")}
    lr, batch = 0.3, 7

    def expect(x):
        g = x["nabla"] * (1 / batch) + decay * x["param"]
        buf = x["buf"]
        if momentum:
            buf = g if t == 1 else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        return x["param"] - lr * g, buf

    def run(dev, x):
        param, buf = dev.to_device(x["param"]), dev.to_device(x["buf"])
        dev.ops.momentum_update(param, dev.to_device(x["nabla"]), buf if momentum else None,
                                dev.to_device(optimizer_controls(lr, batch, t, dtype)), momentum, dampening, nesterov,
                                decay)
        return dev.to_host(param), dev.to_host(buf)

    def magnitude(x, reference):
        scale = np.abs(x["nabla"]) / batch + decay * np.abs(x["param"]) + momentum * np.abs(x["buf"])
        return [np.maximum(np.abs(x["param"]) + 2 * lr * scale, 1), np.maximum(2 * scale, 1)]

    check(device, request, run, inputs, expect, magnitude)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(33, 31), (257, 3), (2,)], ids=str)
@pytest.mark.parametrize("t", [1, 7])
@pytest.mark.parametrize("decoupled", [False, True], ids=["adam", "adamw"])
def test_adam_update(device, request, decoupled, t, shape, dtype):
    """torch.optim.Adam's step (AdamW's: p *= 1 - lr wd first, no wd in g): m = b1 m + (1 - b1) g,
    v = b2 v + (1 - b2) g^2, p -= lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps)."""
    rng = np.random.default_rng([len(shape), shape[0], t, decoupled])
    inputs = {name: _random(rng, shape, dtype) for name in ("param", "nabla", "m")}
    inputs["v"] = np.abs(_random(rng, shape, dtype)) + dtype(0.5)
    lr, batch, beta1, beta2, eps, decay = 0.01, 7, 0.9, 0.999, 1e-8, 0.1

    def expect(x):
        p, g = x["param"], x["nabla"] * (1 / batch)
        if decoupled:
            p = p * (1 - lr * decay)
        else:
            g = g + decay * p
        m = beta1 * x["m"] + (1 - beta1) * g
        v = beta2 * x["v"] + (1 - beta2) * g * g
        return p - lr / (1 - beta1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - beta2 ** t) + eps), m, v

    def run(dev, x):
        param, m, v = (dev.to_device(x[name]) for name in ("param", "m", "v"))
        controls = dev.to_device(optimizer_controls(lr, batch, t, dtype))
        dev.ops.adam_update(param, dev.to_device(x["nabla"]), m, v, controls, beta1, beta2, eps, decay, decoupled)
        return dev.to_host(param), dev.to_host(m), dev.to_host(v)

    def magnitude(x, reference):
        return [np.maximum(np.abs(r), 1) for r in reference]

    check(device, request, run, inputs, expect, magnitude)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_a_refused_optimizer_step_writes_nothing(device, dtype):
    """While controls[1] holds a refusal code, neither the parameter nor its state changes."""
    rng = np.random.default_rng(11)
    param, nabla, m, v = (_random(rng, (33, 31), dtype) for _ in range(4))
    controls = optimizer_controls(0.1, 3, 2, dtype, refused=4)
    got = [device.to_device(x) for x in (param, m, v)]
    device.ops.momentum_update(got[0], device.to_device(nabla), got[1], device.to_device(controls), 0.9, 0.0, True, 0.1)
    device.ops.adam_update(got[0], device.to_device(nabla), got[1], got[2], device.to_device(controls), 0.9, 0.999,
                           1e-8, 0.1, False)
    assert [_bits(device.to_host(x)) for x in got] == [_bits(x) for x in (param, m, v)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_optimizer_kernels_are_bitwise_their_twins(cpu, dtype):
    """momentum_update and adam_update (AdamW too) on the CPU harness give the NumPy twins' bits: 1 - beta and
    1 - dampening rounded once from the host's double, every product and sum rounded on its own (no FMA, on the
    device as here), sqrt in the parameter's dtype."""
    rng = np.random.default_rng(5)
    p, g, m = (_random(rng, (257, 31), dtype) for _ in range(3))
    v = np.abs(_random(rng, (257, 31), dtype)) + dtype(0.5)
    for decoupled, betas in ((False, (0.9, 0.999)), (True, (0.8, 0.99))):
        controls = optimizer_controls(0.01, 7, 3, dtype, betas=betas)
        want = [x.copy() for x in (p, m, v)]
        ops_numpy.adam_update(want[0], g, want[1], want[2], controls, *betas, 1e-8, 0.1, decoupled)
        got = [cpu.to_device(x) for x in (p, m, v)]
        cpu.ops.adam_update(got[0], cpu.to_device(g), got[1], got[2], cpu.to_device(controls), *betas, 1e-8, 0.1,
                            decoupled)
        assert [_bits(cpu.to_host(x)) for x in got] == [_bits(x) for x in want], (decoupled, betas)
    for dampening, nesterov in ((0.1, False), (0.0, True)):
        controls = optimizer_controls(0.3, 7, 5, dtype)
        want = [p.copy(), m.copy()]
        ops_numpy.momentum_update(want[0], g, want[1], controls, 0.9, dampening, nesterov, 0.01)
        got = [cpu.to_device(x) for x in (p, m)]
        cpu.ops.momentum_update(got[0], cpu.to_device(g), got[1], cpu.to_device(controls), 0.9, dampening, nesterov,
                                0.01)
        assert [_bits(cpu.to_host(x)) for x in got] == [_bits(x) for x in want], (dampening, nesterov)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_adam_kernel_is_its_twin_where_the_twin_skips_a_subnormal_term(cpu, dtype):
    """The twin adds 0 for (g * (1 - beta2)) * g where that term is below half an ulp of v * beta2
    (``host_updates._adam``); the kernel computes every product: gradients about sqrt(tiny / (1 - beta2)) and
    below, down to subnormal ones, and 1e20, whose square float32 cannot hold (g * (1 - beta2) first keeps v
    finite), against v * beta2 about tiny * 2^(p + 2) and below: bitwise the same."""
    info, c2 = np.finfo(dtype), 1 - 0.999
    tiny = float(info.tiny)
    small, floor = np.sqrt(tiny / c2), tiny * 2.0 ** (info.nmant + 3)
    g = np.array([s * small * f for s in (1, -1) for f in (8, 1 + 2.0 ** -20, 1 - 2.0 ** -20, 0.5, 1e-3)]
                 + [float(info.smallest_subnormal), 0.0, 1e20], dtype)
    v = np.array([floor * f for f in (4, 1 + 2.0 ** -20, 1 - 2.0 ** -20, 2.0 ** -5)] + [tiny, 0.0, 1.0], dtype) / 0.999
    g, v = (a.astype(dtype).reshape(-1) for a in np.meshgrid(g, v))
    rng = np.random.default_rng(6)
    p, m = _random(rng, g.shape, dtype), _random(rng, g.shape, dtype)
    controls = optimizer_controls(0.01, 1, 3, dtype)
    want = [x.copy() for x in (p, m, v)]
    ops_numpy.adam_update(want[0], g, want[1], want[2], controls, 0.9, 0.999, 1e-8, 0.1, True)
    got = [cpu.to_device(x) for x in (p, m, v)]
    cpu.ops.adam_update(got[0], cpu.to_device(g), got[1], got[2], cpu.to_device(controls), 0.9, 0.999, 1e-8, 0.1, True)
    assert [_bits(cpu.to_host(x)) for x in got] == [_bits(x) for x in want]
