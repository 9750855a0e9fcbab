"""Bytes each kernel of ``kernels/`` must move, and its memory floor: the time that takes at full bandwidth.

The counts are the compulsory traffic of each kernel's header comment: every input element read once and
every output element written once (re-reads are left to the caches). Layer ``l`` has ``n = n_l`` rows and
``m = n_{l-1}`` columns; in (5) ``m = n_{l+1}``, the rows of the w^{l+1} it reads; ``batch`` is B. A whole
step's bytes are ``leapfrog_gpu.tools.bench.traffic.step_bytes``. ``readme()`` is the start of kernels/README.md
(``python profiling/kernel_model.py --readme`` prints the whole file: these floors and its model).
"""

import textwrap

H200_BANDWIDTH = 4.8e12  # bytes per second, HBM3e

KERNELS = {
    # name: (equation, elements read, elements written), the counts as functions of (n, m, batch)
    "forward_gemv": ("(2)(3), B = 1", lambda n, m, b: n * m + m * b + n, lambda n, m, b: 3 * n * b),
    "forward_gemm": ("(2)(3), B > 1", lambda n, m, b: n * m + m * b + n, lambda n, m, b: 3 * n * b),
    "backward_gemv": ("(5), B = 1", lambda n, m, b: m * n + m * b + n * b, lambda n, m, b: n * b),
    "backward_gemm": ("(5), B > 1", lambda n, m, b: m * n + m * b + n * b, lambda n, m, b: n * b),
    "bias_activation": ("(2) bias, (3)", lambda n, m, b: n * b + n, lambda n, m, b: 3 * n * b),
    "delta_output": ("(4) quadratic", lambda n, m, b: 3 * n * b, lambda n, m, b: n * b),
    "delta_hidden": ("(5) Hadamard", lambda n, m, b: 2 * n * b, lambda n, m, b: n * b),
    "outer": ("(7), B = 1", lambda n, m, b: n + m, lambda n, m, b: n * m),
    "rank_update": ("(7), B > 1", lambda n, m, b: (n + m) * b, lambda n, m, b: n * m),
    "outer_sgd": ("(7) + SGD, B = 1", lambda n, m, b: n + m + n * m, lambda n, m, b: n * m),
    "rank_update_sgd": ("(7) + SGD, B > 1", lambda n, m, b: (n + m) * b + n * m, lambda n, m, b: n * m),
    "outer_bias": ("(6)(7), B = 1", lambda n, m, b: n + m, lambda n, m, b: n * m + n),
    "rank_update_bias": ("(6)(7), B > 1", lambda n, m, b: (n + m) * b, lambda n, m, b: n * m + n),
    "bias_sum": ("(6)", lambda n, m, b: n * b, lambda n, m, b: n),
    "sgd_update": ("SGD on w", lambda n, m, b: 2 * n * m, lambda n, m, b: n * m),
    "sgd_update_layer": ("SGD on w and b", lambda n, m, b: 2 * n * m + 2 * n, lambda n, m, b: n * m + n),
    "momentum_update": ("SGD with momentum on w", lambda n, m, b: 3 * n * m, lambda n, m, b: 2 * n * m),
    "adam_update": ("Adam on w", lambda n, m, b: 4 * n * m, lambda n, m, b: 3 * n * m),
    "check_finite": ("check of nabla_w", lambda n, m, b: n * m, lambda n, m, b: 0),
    "step_done": ("end of a step", lambda n, m, b: 2, lambda n, m, b: 1),
    "gru_forward": ("GRU step", lambda n, m, b: 7 * n * b + n, lambda n, m, b: 5 * n * b),
    "gru_backward": ("GRU step, backward", lambda n, m, b: 7 * n * b, lambda n, m, b: 7 * n * b),
    "lstm_forward": ("LSTM step", lambda n, m, b: 5 * n * b, lambda n, m, b: 6 * n * b),
    "lstm_backward": ("LSTM step, backward", lambda n, m, b: 8 * n * b, lambda n, m, b: 5 * n * b),
}
B_ONE = ("outer", "outer_sgd", "outer_bias", "forward_gemv", "backward_gemv")
"""The kernels that run at B = 1 only."""
B_MANY = ("rank_update", "rank_update_sgd", "rank_update_bias", "forward_gemm", "backward_gemm")
"""Their twins, which run at B > 1 only."""
B_ANY = ("sgd_update", "sgd_update_layer", "momentum_update", "adam_update", "check_finite", "step_done")
"""The kernels whose traffic does not depend on B."""


def kernel_bytes(name, n, m, batch, itemsize):
    """Bytes kernel ``name`` must move for a layer of ``n`` by ``m`` and a batch of ``batch``."""
    _, reads, writes = KERNELS[name]
    return (reads(n, m, batch) + writes(n, m, batch)) * itemsize


def floor_seconds(name, n, m, batch, itemsize, bandwidth=H200_BANDWIDTH):
    """The memory floor: ``kernel_bytes`` at ``bandwidth`` bytes per second."""
    return kernel_bytes(name, n, m, batch, itemsize) / bandwidth


def _rows(widths=(1024, 4096), batches=(1, 64)):
    for name in KERNELS:
        for width in widths:
            for batch in batches:
                if (name in B_ONE and batch != 1) or (name in B_MANY and batch == 1):
                    continue  # the B = 1 and B > 1 kernels of (2)(3), (5) and (7)
                if name in B_ANY and batch != batches[0]:
                    continue  # the same traffic whatever B
                yield name, width, batch


def readme():
    """The text of kernels/README.md: the memory floor of every kernel on an H200."""
    about = (
        "Every kernel here is memory-bound, so none can run faster than the bytes it must move divided by "
        f"the memory bandwidth: {H200_BANDWIDTH / 1e12:.1f} TB/s on an H200. Bytes count every input read "
        "once and every output written once (each kernel's header comment gives the count), for a square "
        "layer of width N (n = m = N) and a batch of B. `sgd_update` is the update of w (3 N^2 elements, "
        "whatever B); that of b is N times smaller, and `sgd_update_layer` updates both in one launch. "
        "`outer_bias` and `rank_update_bias` are (7) with (6) in the same kernel. `check_finite` is the check "
        "of nabla_w (N^2 reads), run "
        "on every gradient before the update when `check_finite=True`; `step_done`, one thread at the end of a "
        "step by an optimizer with a state, writes its step count t beside the step's controls. "
        "`gru_*` and `lstm_*` are the elementwise "
        "parts of one time step of a gated layer of width N (3N or 4N gate rows), forward and backward; "
        "their B = 1 rows show that a step of a small batch is bound by its launch. "
        "A fused `*_sgd` kernel replaces (7) "
        "and that update. The chain kernels, `forward_*` (2)(3) and `backward_*` (5), are what a CUDA graph "
        "step runs in place of cuBLAS and an elementwise kernel. "
        "Arrays of N = 1024 (4 MB in float32) fit in the 50 MB L2, so a kernel whose inputs were just "
        "written may beat its floor there; at N = 4096 they do not. Floors far below a microsecond say "
        "that the launch, not memory, sets the time."
    )
    flush = (
        "CuPy compiles every kernel with `-ftz=true` (flush to zero; the compile test uses the same options). "
        "In float32 a denormal, a magnitude below 2^-126 = 1.18e-38, is then read and written as zero on "
        "the GPU, while the NumPy twins and the CPU harness keep it; float64 is not affected. So a float32 "
        "result computed from normal numbers can differ from its twin's by up to 1.18e-38: sigmoid's a and a(1 - a) for z between about "
        "-88.7 and -87.3 are 0 on the GPU and denormal on the host, and so are products of tiny errors deep "
        "in the chain. That is far inside the kernel tests' tolerances (relative to max(|x|, 1), or to the sum of "
        "the terms' magnitudes). A denormal a kernel divides by is another matter: Adam's eps below 1.18e-38 "
        "reads as 0, and m / (sqrt(v) + eps) as 0/0 where a gradient has been 0, so a float32 network refuses "
        "such an eps (and a learning rate that small), on every backend. Results on one device still agree bit for bit across schedules (leapfrog "
        "and sequential, fused and plain): both sides flush alike. Between the GPU and the host only "
        "agreement within tolerance is expected, but for the optimizers' updates (`momentum_update`, "
        "`adam_update`): they round every product and sum on its own (`__fmul_rn`, ...: nothing contracted into "
        "a fused multiply-add) from constants the host rounds once, as their twins do, so they give their twins' "
        "bits wherever nothing flushes. A float32 sum over the batch ((6), alone and beside (7)) runs in float64 "
        "and is rounded once, as the host's is: its error does not grow with B."
    )
    lines = [
        "# Memory floor of each kernel",
        "",
        "Generated by `python profiling/kernel_model.py --readme > kernels/README.md`; a test checks that it is "
        "current.",
        "",
        textwrap.fill(about, 100),
        "",
        "## Flush to zero",
        "",
        textwrap.fill(flush, 100),
        "",
        "## Floors",
        "",
        "| kernel | equation | N | B | float32 bytes | float32 floor (us) | float64 bytes | float64 floor (us) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, width, batch in _rows():
        cells = [name, KERNELS[name][0], str(width), "any" if name in B_ANY else str(batch)]
        for itemsize in (4, 8):
            cells.append(f"{kernel_bytes(name, width, width, batch, itemsize):,}")
            cells.append(f"{floor_seconds(name, width, width, batch, itemsize) * 1e6:.3g}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

