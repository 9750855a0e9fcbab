"""What several test modules share: batches and host copies, the GPU skip, the CuPy stand-in, the book's
names and ids for what a test compares, the kernel devices, the chaos suite, the commands run in this
process, an Nsight Systems export for overlap.py, and the DAGs of the DagNet tests. Test modules import from
here, never from each other (``tests/test_layout.py`` checks it); ``conftest.py`` keeps the fixtures and hooks
only.

The commands' modules (``leapfrog_gpu.tools``) are imported where they are run: ``conftest.py`` imports
this module for every run, most of which start no command.
"""

import gzip
import io
import itertools
import json
import os
import re
import sqlite3
import subprocess
import sys
import types
import zipfile
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

import cuda_cpu
from leapfrog_gpu import MLP, Leapfrog, Sequential, reference
from leapfrog_gpu.dag import network as dagnet, layers
from leapfrog_gpu.backends import cuda, cuda_available, cuda_status, ops_cuda, ops_numpy
from leapfrog_gpu.backends.host import NumpyBackend

ROOT = Path(__file__).resolve().parents[2]

# -- data, host copies, the GPU ----------------------------------------------------------------------

NO_GPU = f"no usable GPU: {cuda_status().why}"
"""The reason of every test skipped for want of a GPU (what CuPy and CUDA answered, or that CuPy is
not installed), so that the summary counts them under one line."""
gpu = pytest.mark.skipif(not cuda_status().usable, reason=NO_GPU)


def batch(sizes, size, seed=0, dtype=np.float64, tau=None, output="every"):
    """A random input batch (n_1, B) in [0, 1) and a target batch (n_L, B) in (0.05, 0.95); with ``tau``, an
    RNN's: sequences (tau, n_1, B), standard normal, and targets (tau, n_L, B), or (n_L, B) for ``output="last"``."""
    rng = np.random.default_rng(seed)
    if tau is None:
        x = rng.random((sizes[0], size)).astype(dtype)
        y = rng.uniform(0.05, 0.95, (sizes[-1], size)).astype(dtype)
        return x, y
    x = rng.standard_normal((tau, sizes[0], size)).astype(dtype)
    y = rng.uniform(0.05, 0.95, (sizes[-1], size) if output == "last" else (tau, sizes[-1], size)).astype(dtype)
    return x, y


def rnn_lists(grads):
    """An RNN's gradients as ``gradients`` gives them, ``{l: {"w", "u", "b"}}``, as the reference's
    ``(nabla_b, nabla_w, nabla_u)``: lists for l = 2..L, 2..L and 2..L-1."""
    layers = sorted(grads)
    return ([grads[l]["b"] for l in layers], [grads[l]["w"] for l in layers],
            [grads[l]["u"] for l in layers if "u" in grads[l]])


def to_numpy(array):
    """A host copy of a NumPy or CuPy array."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


def host(arrays):
    """Host copies of NumPy or CuPy arrays, in order."""
    return [np.array(to_numpy(array)) for array in arrays]


def central(f, array, h=1e-6):
    """Central differences of the scalar ``f()`` in every element of ``array`` (moved by +-h in place, then
    restored): truncation O(h^2) ~ 1e-12, rounding O(eps / h) ~ 1e-10 in float64."""
    grad = np.zeros_like(array)
    for index in np.ndindex(array.shape):
        keep = array[index]
        array[index] = keep + h
        up = f()
        array[index] = keep - h
        down = f()
        array[index] = keep
        grad[index] = (up - down) / (2 * h)
    return grad


STANDIN_ORDERS = ("main-first", "workers-first", "random")
"""The orders of the stand-in's queues every CuPy test runs under (the host backend's deferred ones)."""


def standin_env():
    """The environment of a subprocess that imports the CuPy stand-in (and its nvmath) for CuPy: ``PYTHONPATH``
    ``tests/harness/standin``, then ``tests/harness``, then what it was, if anything."""
    harness = ROOT / "tests" / "harness"
    paths = [str(harness / "standin"), str(harness)] + [path for path in [os.environ.get("PYTHONPATH")] if path]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def install_standin(monkeypatch, order, seed=0, nvmath=True):
    """The CuPy stand-in (``tests/harness/fake_cupy``) as ``cupy`` (and ``cupy.cuda``, ``cupyx``) for this test, on
    a fresh device whose queues run in ``order``; with its ``nvmath.bindings.cublas`` as ``nvmath``, or,
    unless ``nvmath``, with no ``nvmath`` to import (even where nvmath-python is installed)."""
    if not cuda_cpu.available():
        pytest.skip(f"the CuPy stand-in runs kernels on the CPU harness, which needs {cuda_cpu.CXX}")
    import fake_cupy
    import fake_cupy.nvmath

    fake_cupy.reset(order, seed)
    fake_cupy.RawModule.calls.clear()
    fake_cupy.nvmath.reset()
    blas = fake_cupy.nvmath.modules()
    for name, module in {**fake_cupy.modules(), **(blas if nvmath else dict.fromkeys(blas))}.items():
        monkeypatch.setitem(sys.modules, name, module)  # None in sys.modules: that import raises ImportError
    monkeypatch.setattr(cuda, "_abandoned", [])  # no cuBLAS handle that an earlier device's backend left
    return fake_cupy


def patched_ops(**replacements):
    """``ops_numpy`` with some operations replaced: what a test sets as a host backend's ``ops``."""
    namespace = {name: getattr(ops_numpy, name) for name in dir(ops_numpy) if not name.startswith("_")}
    return types.SimpleNamespace(**{**namespace, **replacements})


class CountedNumpy:
    """NumPy as a host backend's ``xp``, each of its functions (not its classes or constants) passed through
    ``wrap(name, function)``: what a test that counts a pass's calls sets."""

    def __init__(self, wrap):
        self._wrap = wrap

    def __getattr__(self, name):
        value = getattr(np, name)
        if not callable(value) or isinstance(value, type):
            return value
        return self._wrap(name, value)


# -- the book's names, differences in words, and test ids ----------------------------------------------


def layer_names(L, *kinds):
    """``layer_names(3, "w", "b")`` is ``["w[2]", "w[3]", "b[2]", "b[3]"]``: the names of the per-layer
    arrays of a network of L layers (layers 2..L), in the order of ``net.weights + net.biases``."""
    return [f"{kind}[{l}]" for kind in kinds for l in range(2, L + 1)]


def difference(got, want, names, against="the reference"):
    """None when each array of ``got`` equals its ``want`` bit for bit (``np.array_equal``); else the first
    that does not, in words: ``nabla_w[5] differs from the reference: 3 of 35 elements, the largest by
    2.38e-07 at (4, 0) (got 0.3100002, want 0.31)``."""
    assert len(got) == len(want) == len(names), (len(got), len(want), len(names))
    for name, g, w in zip(names, got, want):
        g, w = to_numpy(g), to_numpy(w)
        if np.array_equal(g, w):
            continue
        if g.shape != w.shape:
            return f"{name} differs from {against}: shape {g.shape}, want {w.shape}"
        unequal = g != w  # a NaN is unequal to itself, as np.array_equal has it
        error = np.nan_to_num(np.abs(g.astype(np.float64) - w.astype(np.float64)), nan=np.inf)
        worst = np.unravel_index(np.argmax(np.where(unequal, error, -1)), g.shape)
        return (f"{name} differs from {against}: {int(unequal.sum())} of {g.size} elements, the largest by "
                f"{error[worst]:.3g} at {tuple(int(i) for i in worst)} (got {float(g[worst]):.9g}, "
                f"want {float(w[worst]):.9g})")
    return None


def assert_same(got, want, names, where=None, against="the reference"):
    """Each array of ``got`` equals its ``want`` bit for bit; else the failure names the first that does
    not, after ``where`` (``step 3: nabla_w[5] differs from the reference: ...``)."""
    message = difference(got, want, names, against)
    assert message is None, message if where is None else f"{where}: {message}"


def same(got, want):
    """Whether each array of ``got`` equals its ``want`` bit for bit."""
    return all(np.array_equal(a, b) for a, b in zip(got, want))


def case_id(L=None, k=None, B=None):
    """A test id in the book's letters: ``case_id(9, 8, 7)`` is ``L9-k8-B7``; a letter left None is left out."""
    return "-".join(f"{letter}{value}" for letter, value in (("L", L), ("k", k), ("B", B)) if value is not None)


def case_ids(cases):
    """The ids of (L, k, B) cases."""
    return [case_id(*case) for case in cases]


def batch_id(size):
    """The id of a batch size: ``B7``."""
    return f"B{size}"


def schedule_id(schedule):
    """The id of a schedule: ``sequential``, ``k2``, ``k2-fused``, ``kauto``, ``naumov-scan-k2``."""
    kind = type(schedule).__name__
    if kind == "Sequential":
        name = "sequential"
    elif kind == "Leapfrog":
        name = f"k{schedule.k}"
    else:  # NaumovScan -> naumov-scan
        name = "".join(f"-{c.lower()}" if c.isupper() else c for c in kind).lstrip("-") + f"-k{schedule.k}"
    return name + ("-fused" if getattr(schedule, "fused", False) else "")


# -- a graph step against SGD written out ------------------------------------------------------------


def eta(step):
    """A learning rate that changes every step: a graph must read the current one, not its first."""
    return 0.5 * (1 + step % 3) / 3


def assert_graph_steps_follow_the_reference(net, schedule, size, rtol=1e-12, steps=4):
    """``steps`` graph steps of ``net`` (float64, tanh, quadratic cost), eta changing every step, against
    SGD written out with the plain reference."""
    weights, biases = [to_numpy(w) for w in net.weights], [to_numpy(b) for b in net.biases]
    for step in range(steps):
        x, y = batch(net.sizes, size, seed=step)
        net.sgd_step(x, y, eta(step), schedule, graph=True)
        nabla_b, nabla_w = reference.backprop(weights, biases, x, y, "tanh", "quadratic", "tanh")
        weights = [w - eta(step) / size * g for w, g in zip(weights, nabla_w)]
        biases = [b - eta(step) / size * g for b, g in zip(biases, nabla_b)]
    for name, got, want in zip(layer_names(net.L, "w", "b"), net.weights + net.biases, weights + biases):
        np.testing.assert_allclose(to_numpy(got), want, rtol=rtol, atol=rtol / 100,
                                   err_msg=f"{name} after {steps} graph steps, against the reference")


GPU_SIZES = [33, 257, 31, 64, 129, 10]
"""The network of the GPU's graph tests: odd widths about the kernels' tiles."""


def assert_graph_steps_are_bitwise_eager_steps(backend, schedule, size, steps=20):
    """On ``backend``, ``steps`` float32 SGD steps of two networks [GPU_SIZES] alike, eta changing, one eager and
    one replaying its one captured graph: bitwise the same parameters after every step."""
    nets = [MLP(GPU_SIZES, seed=4, backend=backend) for _ in range(2)]
    for step in range(steps):
        x, y = batch(GPU_SIZES, size, seed=step, dtype=np.float32)
        for net, graph in zip(nets, (False, True)):
            net.sgd_step(x, y, 0.05 * (1 + step % 3), schedule, graph=graph)
        eager, graph = (host(net.weights + net.biases) for net in nets)
        assert all(np.array_equal(p, q) for p, q in zip(eager, graph)), f"step {step} differs"
    assert len(nets[1].plan(size).captured) == 1


# -- the chaos suite ---------------------------------------------------------------------------------

CHAOS_CONFIGS = list(itertools.product((1, 2, 3, 5), (2, 4, 9), (1, 6), ("float32", "float64")))  # k, L, B, dtype


def chaos_snapshots(net, backend, schedule, sizes, size, dtype, steps, graph=False):
    """Parameters after every SGD step, copied in stream order (no host synchronization between steps)."""
    taken, plan = [], net.plan(size)

    def snapshot():
        taken.append([p.copy() for p in list(plan.w.values()) + list(plan.b.values())])

    for step in range(steps):
        x, y = batch(sizes, size, seed=step, dtype=dtype)
        net.sgd_step(x, y, 0.5, schedule, graph=graph)
        backend.launch(backend.main, "snapshot", snapshot)
    backend.synchronize()
    return taken


def chaos_suite(steps, seed=0, fused=None, graph=False, configs=slice(None)):
    """Run every configuration under chaos; return where leapfrog first differs from sequential, in words
    (``L4-k2-B6 float32, step 3: w[3] differs from sequential: ...``), or None.

    ``fused=None`` alternates plain and fused leapfrog over the configurations; ``graph=True`` runs the
    leapfrog steps as graphs (captured at the first); ``configs`` selects configurations by a slice.
    """
    for index, (k, L, size, dtype) in list(enumerate(CHAOS_CONFIGS))[configs]:
        sizes = [int(n) for n in np.random.default_rng(index).integers(1, 14, size=L)]
        with NumpyBackend(mode="serial") as backend:
            want = chaos_snapshots(MLP(sizes, dtype=dtype, seed=index, backend=backend), backend, Sequential(),
                                   sizes, size, dtype, steps)
        with NumpyBackend(chaos=seed * 100 + index) as backend:
            schedule = Leapfrog(k, fused=index % 2 == 1 if fused is None else fused)
            got = chaos_snapshots(MLP(sizes, dtype=dtype, seed=index, backend=backend), backend, schedule,
                                  sizes, size, dtype, steps, graph)
        for step, (a, b) in enumerate(zip(want, got)):
            message = difference(b, a, layer_names(L, "w", "b"), "sequential")
            if message is not None:
                return f"{case_id(L, k, size)} {dtype}, step {step}: {message}"
    return None


def chaos_catches(steps, fused=None, graph=False, seeds=3):
    """Whether the suite finds a difference under one of ``seeds`` seeds. Chaos is random timing on
    real threads, so a race may slip through one seed on a loaded machine; the deterministic tests of
    test_schedules.py and test_graphs.py catch each missing wait every time."""
    return any(chaos_suite(steps, seed=seed, fused=fused, graph=graph) is not None for seed in range(seeds))


# -- the kernels' devices ----------------------------------------------------------------------------


class CpuDevice:
    """CudaOps on the CPU harness; arrays are guarded copies (a page nobody may touch after each)."""

    name = "cpu"

    def __init__(self):
        self.ops = ops_cuda.CudaOps(cuda_cpu)

    def to_device(self, array):
        return cuda_cpu.guarded(array)

    def to_host(self, array):
        assert cuda_cpu.untouched_before(array), "a kernel wrote before the start of an array"
        return np.array(array)


class GpuDevice:
    """CudaOps on CuPy."""

    name = "gpu"

    def __init__(self, cupy):
        self.cupy = cupy
        self.ops = ops_cuda.CudaOps(cupy)

    def to_device(self, array):
        return self.cupy.asarray(array)

    def to_host(self, array):
        return self.cupy.asnumpy(array)


def gpu_device_or_skip():
    """A ``GpuDevice``, or the test skipped with ``NO_GPU``."""
    if not cuda_available():
        pytest.skip(NO_GPU)
    import cupy

    return GpuDevice(cupy)


OUT_OF_RANGE = r"out-of-range access by thread .*: index -?\d+ of argument \d+, a buffer of \d+ elements$"
"""What the CPU harness says when a kernel reads or writes outside an argument's buffer."""


def rows_of_blocks(grid, count, dealt=False):
    """The rows of blocks (or octets of rows) 0..count-1 that a kernel's ``grid`` takes, sorted: block (y, z) takes
    y + grid[1] z (rows of blocks on grid y, then z, past CUDA's 65535 of grid y), or, where ``dealt`` (the rank
    update in rows, grid y alone), row y of the grid takes ceil(count / grid[1]) of them in a run from y times that
    many. Each once: ``np.arange(count)``."""
    _, rows, layers = grid
    if dealt:
        assert layers == 1, grid
        per = -(-count // rows)
        taken = np.arange(rows)[:, None] * per + np.arange(per)[None, :]
    else:
        taken = np.arange(rows)[:, None] + rows * np.arange(layers)[None, :]
    return np.sort(taken[taken < count])


def function_span(source, function):
    """``(start, end)`` of the device function ``function`` in ``source``: from its name to the next template,
    preprocessor branch or macro of the kernels' wrappers."""
    start = re.search(rf"__device__ (__forceinline__ )?void {function}\(", source).start()
    ends = (source.find(mark, start) for mark in ("\ntemplate <", "\n#if", "\n#endif", "#define LEAPFROG"))
    return start, min(i for i in ends if i > 0)


def mutant(filename, function, old, new, occurrence=0):
    """kernels/``filename`` with the ``occurrence``-th ``old`` inside the device function ``function``
    replaced by ``new``."""
    source = ops_cuda.kernel_source(filename)
    start, end = function_span(source, function)
    body = source[start:end]
    at = -1
    for _ in range(occurrence + 1):
        at = body.index(old, at + 1)
    changed = body[:at] + new + body[at + len(old):]
    assert changed != body
    return source[:start] + changed + source[end:]


# -- the commands, run in this process ---------------------------------------------------------------

SMALL = ["--hidden", "5x24", "--quiet"]  # digits with a small, odd, deep network: a fast epoch (45 steps)


def cli(*args):
    """Run ``leapfrog-train`` in this process; return its exit status."""
    from leapfrog_gpu.tools.train import command as train

    try:
        return train.main([str(arg) for arg in args])
    except SystemExit as exit:  # argparse exits itself
        return exit.code


def parameters(directory):
    """The parameters (in the checkpoint's order: w2, b2, w3, ... for an MLP) and the state of the checkpoint
    in ``directory``."""
    from leapfrog_gpu.tools.train import checkpoint

    arrays, state = checkpoint.load(directory)
    return list(arrays.values()), state


def idx_file(path, array):
    """Write ``array`` (unsigned bytes) to ``path`` as a gzipped IDX file, MNIST's format."""
    array = np.asarray(array, dtype=np.uint8)
    header = bytes([0, 0, 8, array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape)
    Path(path).write_bytes(gzip.compress(header + array.tobytes()))


def digits_as_mnist(directory):
    """The digits as MNIST's four IDX files in ``directory``: each 8x8 image scaled to 0..255, every pixel
    a 3x3 block, framed by 2 blank pixels (28x28), with its label; the digits' split. Return ``directory``."""
    from leapfrog_gpu import datasets

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    digits = datasets.digits("float64")
    for split, x, y in (("train", digits.x_train, digits.y_train), ("t10k", digits.x_test, digits.y_test)):
        images = np.kron(np.rint(x.T.reshape(-1, 8, 8) * 255), np.ones((1, 3, 3)))
        idx_file(directory / f"{split}-images-idx3-ubyte.gz", np.pad(images, ((0, 0), (2, 2), (2, 2))))
        idx_file(directory / f"{split}-labels-idx1-ubyte.gz", y.argmax(axis=0))
    return directory


def flip_last_byte(path, member):
    """Change the last byte of ``member``'s data in the zip archive at ``path`` (an ``.npz``): a damaged file, whose
    checksum no longer holds."""
    spoil_member(path, member, -1, lambda byte: byte ^ 0xFF)


def spoil_member(path, member, offset, change):
    """Replace the byte at ``offset`` of ``member``'s data (as stored: compressed, if it is) in the zip archive at
    ``path`` by ``change(byte)``; a negative ``offset`` counts from the data's end."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    content = bytearray(Path(path).read_bytes())
    header = info.header_offset  # the local header: 30 bytes, the name, then an extra field of the length at 28
    start = header + 30 + len(info.filename.encode()) + int.from_bytes(content[header + 28:header + 30], "little")
    at = start + offset % info.compress_size
    content[at] = change(content[at])
    Path(path).write_bytes(bytes(content))


def assert_bitwise_equal(first, second):
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


def one_error_line(capsys):
    """The one line ``leapfrog-train`` wrote on stderr, checked to be its error and no traceback."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("leapfrog-train: error: ") and "Traceback" not in err
    return lines[0]


def run_bench(argv):
    """Run ``leapfrog-bench`` in this process, which must exit 0; return what it printed."""
    from leapfrog_gpu.tools.bench import command as bench

    out = io.StringIO()
    with redirect_stdout(out):
        assert bench.main(argv) == 0
    return out.getvalue()


def bench_table(path):
    """The output of profiling/bench_table.py on ``path`` (a --json or --jsonl file)."""
    script = ROOT / "profiling" / "bench_table.py"
    return subprocess.run([sys.executable, script, path], capture_output=True, text=True, timeout=60,
                          check=True).stdout


def render_table(report, tmp_path):
    """What profiling/bench_table.py prints for ``report`` (a --json file's content), and its data rows."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    out = bench_table(path)
    return out, [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| N |")]


# -- an Nsight Systems export, for profiling/overlap.py ----------------------------------------------

NSYS_KERNELS = [(0, 100, 7, "gemv"), (100, 200, 7, "delta_hidden"), (300, 400, 7, "gemv"),
                (50, 150, 13, "outer_f32"), (200, 300, 14, "outer_f32"), (350, 450, 14, "bias_sum_f32")]


def build_export(path, with_nvtx=True, kernels=NSYS_KERNELS):
    """Tables and columns as ``nsys export --type sqlite`` writes them (the ones overlap.py reads, plus
    a few it must ignore), holding ``kernels``: (start, end, stream, name). By default, main stream 7:
    kernels over [0, 100], [100, 200], [300, 400] ns. Worker 13: [50, 150] (all of it overlaps main),
    worker 14: [200, 300] and [350, 450] (a quarter overlaps)."""
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
            shortName INTEGER NOT NULL, mangledName INTEGER, gridX INTEGER, blockX INTEGER);
    """)
    names = {name: i for i, name in enumerate(dict.fromkeys(["backward", "forward"] + [k[3] for k in kernels]), 1)}
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, name) for name, i in names.items()])
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, ?, 0, 0, ?, ?, 0, 1, 1)",
        [(start, end, stream, names[name], names[name]) for start, end, stream, name in kernels],
    )
    if with_nvtx:
        db.executescript("""
            CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
                rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
                endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER);
        """)
        events = [(0, 250, 59, None, names["forward"]), (250, 450, 59, None, names["backward"]),
                  (260, 300, 59, "backward", None),
                  (10, None, 34, "a mark", None), (500, 900, 60, "update", None)]
        db.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId) VALUES (?, ?, ?, ?, ?)", events)
    db.commit()
    db.close()
    return path


# -- DAGs of layers: a layer defined here, the networks, their data ----------------------------------


class Gate(layers.Layer):
    """A layer the library does not have: a = x * tanh(v) + c, elementwise, with parameters v and c.

    It gives only its products; its Jacobian comes from them."""

    params = ("v", "c")

    def size(self, sizes):
        if len(sizes) != 1:
            raise ValueError("Gate takes one input")
        return sizes[0]

    def init(self, rng, sizes):
        return {"v": rng.standard_normal(sizes[0]), "c": np.zeros(sizes[0])}

    def forward(self, backend, params, inputs):
        t = backend.xp.tanh(params["v"])[:, None]
        return inputs[0] * t + params["c"][:, None], {"t": t}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [g * saved["t"]]

    def vjp_params(self, backend, params, inputs, saved, g):
        return {"v": (g * inputs[0] * (1 - saved["t"] ** 2)).sum(axis=1), "c": g.sum(axis=1)}


class DrawsTooFew(Gate):
    """``params`` names v and c; ``init`` draws v alone."""

    def init(self, rng, sizes):
        return {"v": super().init(rng, sizes)["v"]}


class NamesTooFew(Gate):
    """``init`` draws v and c, which ``forward`` reads; ``params`` names v alone."""

    params = ("v",)



class NoBias(Gate):
    """``vjp_params`` leaves c's gradient out."""

    def vjp_params(self, backend, params, inputs, saved, g):
        return {"v": super().vjp_params(backend, params, inputs, saved, g)["v"]}


class SummedOverUnits(Gate):
    """``vjp_params`` gives c's gradient summed over its units too: a number, where c is (n,)."""

    def vjp_params(self, backend, params, inputs, saved, g):
        return {**super().vjp_params(backend, params, inputs, saved, g), "c": g.sum()}


class ShortProduct(Gate):
    """``vjp_inputs`` hands back a product one row short of its input."""

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [(g * saved["t"])[:-1]]


class Sized(Gate):
    """``size`` gives ``width``, whatever it is."""

    def __init__(self, width):
        self.width = width

    def __repr__(self):
        return f"Sized({self.width!r})"

    def size(self, sizes):
        return self.width


class Drawing(Gate):
    """``init`` draws every element of c as ``value``."""

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Drawing({self.value!r})"

    def init(self, rng, sizes):
        return {**super().init(rng, sizes), "c": np.full(sizes[0], self.value)}


class DrawsWide(Gate):
    """``init`` draws v and c one element longer than the input is wide."""

    def init(self, rng, sizes):
        return super().init(rng, [sizes[0] + 1])

class Product(layers.Layer):
    """A layer of two inputs the library does not have: a = x_0 * x_1, elementwise. It gives only its products."""

    def size(self, sizes):
        if len(sizes) != 2 or sizes[0] != sizes[1]:
            raise ValueError("Product takes two inputs of one width")
        return sizes[0]

    def forward(self, backend, params, inputs):
        return inputs[0] * inputs[1], {}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [g * inputs[1], g * inputs[0]]


class ForgetsAnInput(Product):
    """Hands back x_0's product alone: zipped with the inputs, x_1's adjoint would miss it (a DagNet and check_layer
    refuse it, with the counts)."""

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return super().vjp_inputs(backend, params, inputs, saved, g)[:1]


def residual_net(backend, dtype="float64", seed=3):
    """x -> 2 -> 3 -> s3 = 3 + 2 -> norm -> 5 -> s5 = 5 + s3 -> out: two skips and a LayerNorm (depth 7)."""
    Dense, Add = layers.Dense, layers.Add
    return dagnet.DagNet(6, [
        ("2", Dense(8, "tanh"), "x"), ("3", Dense(8, "tanh"), "2"), ("s3", Add(), ["3", "2"]),
        ("norm", layers.LayerNorm(), "s3"), ("5", Dense(8, "sigmoid"), "norm"), ("s5", Add(), ["5", "s3"]),
        ("out", Dense(4, "sigmoid"), "s5"),
    ], dtype=dtype, seed=seed, backend=backend)


def dense_net(backend, dtype="float64", seed=4, cost="quadratic"):
    """DenseNet-like: every block reads the concatenation of everything before it (depth 7)."""
    Dense, Concat = layers.Dense, layers.Concat
    return dagnet.DagNet(5, [
        ("1", Dense(4, "tanh"), "x"), ("c1", Concat(), ["x", "1"]), ("2", Dense(4, "relu"), "c1"),
        ("c2", Concat(), ["x", "1", "2"]), ("3", Dense(4, "sigmoid"), "c2"), ("c3", Concat(), ["1", "2", "3"]),
        ("out", Dense(3, "sigmoid"), "c3"),
    ], dtype=dtype, seed=seed, backend=backend, cost=cost)


def gate_net(backend, dtype="float64", seed=5):
    """A ``Gate`` and a skip around it (depth 4)."""
    Dense = layers.Dense
    return dagnet.DagNet(4, [("2", Dense(6, "tanh"), "x"), ("g", Gate(), "2"), ("s", layers.Add(), ["g", "2"]),
                                 ("out", Dense(2, "identity"), "s")], dtype=dtype, seed=seed, backend=backend)


NETS = {"residual": residual_net, "densenet": dense_net, "gate": gate_net}
"""The DAGs the DagNet tests run, by name."""


def deep_chain(D, backend, width=4):
    """A tanh chain of depth D (D + 1 layers), float64."""
    return dagnet.chain([3] + [width] * (D - 1) + [2], activation="tanh", dtype="float64", seed=1, backend=backend)


def dag_data(net, size, seed=0):
    """``batch`` for the DagNet ``net``: its input's and its output node's sizes."""
    return batch([net.n["x"], net.n[net.output]], size, seed)


def flat(grads):
    """``{node: {name: array}}`` as a list, in a fixed order."""
    return [grads[v][name] for v in sorted(grads, key=str) for name in sorted(grads[v])]


def same_arrays(got, want):
    """``same``, and as many arrays on both sides."""
    return len(got) == len(want) and same(got, want)
