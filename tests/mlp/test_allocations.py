"""No step allocates a temporary the size of a weight matrix: what a step allocates, tracked by tracemalloc
(which sees NumPy's array data), stays under one cache block (``ops_numpy.SCRATCH`` elements)."""

import tracemalloc

import numpy as np
import pytest

from helpers import batch, batch_id, patched_ops
from leapfrog_gpu import MLP, Leapfrog, Sequential
from leapfrog_gpu.backends import ops_numpy
from leapfrog_gpu.backends.host import NumpyBackend

SIZES = [300, 800, 700, 10]  # w^4 is 560 000 weights, 8.5 blocks: even a bool temporary of its size shows
SCHEDULES = [Sequential(), Sequential(fused=True), Sequential(one_pass=True), Leapfrog(2), Leapfrog(2, fused=True),
             Leapfrog(2, one_pass=True)]


def peak_of_steps(net, x, y, schedule, steps=1):
    """The most memory allocated at once by ``steps`` SGD steps after a first one (which makes the plan's
    buffers and the worker streams), in bytes above what was held before: every later step runs the same code."""
    net.sgd_step(x, y, 0.1, schedule)  # the plan's buffers and the worker streams, made on first use
    net.synchronize()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(steps):
            net.sgd_step(x, y, 0.1, schedule)
        net.synchronize()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", [1, 64], ids=batch_id)
@pytest.mark.parametrize("mode", ["threads", "serial"])
def test_no_step_allocates_more_than_a_cache_block(mode, size, dtype):
    block = ops_numpy.SCRATCH * np.dtype(dtype).itemsize
    x, y = batch(SIZES, size, dtype=dtype)
    with NumpyBackend(mode=mode) as backend:
        nets = {False: MLP(SIZES, dtype=dtype, backend=backend), True: MLP(SIZES, dtype=dtype, backend=backend,
                                                                         check_finite=True)}
        peaks = {}
        for schedule in SCHEDULES:
            for checked in (False, True) if not schedule.fused else (False,):
                peaks[f"{schedule!r}{' checked' if checked else ''}"] = peak_of_steps(nets[checked], x, y, schedule)
    over = {name: peak for name, peak in peaks.items() if peak > block}
    assert not over, f"steps allocating more than a cache block ({block} bytes): {over}"


def test_the_tracking_sees_a_weight_sized_temporary():
    """The check itself: a step whose update allocates ``scale * nabla`` shows it."""

    def allocating_update(w, nabla_w, b, nabla_b, controls, scratch):
        if controls[1] == 0:
            w -= controls[0] * nabla_w
            b -= controls[0] * nabla_b

    x, y = batch(SIZES, 1, dtype=np.float32)
    with NumpyBackend(mode="serial") as backend:
        net = MLP(SIZES, backend=backend)
        backend.ops = patched_ops(update=allocating_update)
        assert peak_of_steps(net, x, y, Sequential()) >= 800 * 700 * 4
