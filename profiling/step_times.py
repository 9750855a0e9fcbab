"""The SGD step of an MLP ([1024] * 16, B = 1) and of an RNN ([128] * 4, output at every step, tau = 64,
B = 32) under Sequential()/BPTT() and Leapfrog(2), float32, one BLAS thread: one JSON line of medians (ms).

    PYTHONPATH=. python profiling/step_times.py     # in each tree compared, in turn, round after round

Runs on the API every release has had (``sgd_step(x, y, eta, schedule)``), so that two trees can be timed
alternately on one machine and compared within its noise.
"""

import argparse
import json
import time

import numpy as np

from leapfrog_gpu import BPTT, MLP, RNN, Leapfrog, Sequential
from leapfrog_gpu.backends import get_backend


def median_ms(step, sync, n=25, warm=3):
    """The median of ``n`` timed calls of ``step`` (each waited for by ``sync``), after ``warm`` untimed."""
    for _ in range(warm):
        step()
    sync()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options: --help, or refused
out = {}
rng = np.random.default_rng(0)
with get_backend("numpy", blas_threads=1) as backend:
    x, y = rng.random((1024, 1)).astype(np.float32), rng.random((1024, 1)).astype(np.float32)
    with MLP([1024] * 16, backend=backend) as net:
        for name, s in (("mlp_sequential", Sequential()), ("mlp_leapfrog2", Leapfrog(2))):
            out[name] = median_ms(lambda: net.sgd_step(x, y, 1e-9, s), net.synchronize)
    x = rng.standard_normal((64, 128, 32)).astype(np.float32)
    y = rng.random((64, 128, 32)).astype(np.float32)
    with RNN([128] * 4, output="every", backend=backend) as net:
        for name, s in (("rnn_bptt", BPTT()), ("rnn_leapfrog2", Leapfrog(2))):
            out[name] = median_ms(lambda: net.sgd_step(x, y, 1e-9, s), net.synchronize)
print(json.dumps(out))
