"""The recurrent pass at its call floor, counted: per (layer, time step) the forward makes one BLAS call
(u^l a^{l,t-1} added into z^{l,t}) and the ufuncs of sigma (one; four for sigmoid), the backward one BLAS
call ((u^l)^T delta^{l,t+1} added into delta^{l,t}) and one ufunc (times sigma'); the rest of a layer is a
few calls whatever tau, its gradients one BLAS call each."""

import collections

import numpy as np
import pytest

from helpers import CountedNumpy, patched_ops
from leapfrog_gpu import BPTT, RNN
from leapfrog_gpu.backends import ops_numpy
from leapfrog_gpu.backends.host import NumpyBackend

PRODUCTS = {"matmul", "dot", "vdot", "inner", "outer", "tensordot", "einsum"}
"""The functions of ``xp`` that count as BLAS calls."""


class Counter:
    """What a serial NumPy backend's launches call, by launch name and kind ("blas" or "ufunc"): every
    function of its ``xp`` (a proxy of NumPy), every product bound by ``ops.bind_matmul`` and every
    ``ops.nabla_w``."""

    def __init__(self, backend):
        self.counts, self.name = collections.Counter(), None
        launch = backend.launch

        def named(stream, name, fn, *args):
            self.name = name
            try:
                launch(stream, name, fn, *args)
            finally:
                self.name = None

        def bind_matmul(*args, **options):
            return self.counted("blas", ops_numpy.bind_matmul(*args, **options))

        backend.launch = named
        backend.xp = CountedNumpy(lambda name, fn: self.counted("blas" if name in PRODUCTS else "ufunc", fn))
        backend.ops = patched_ops(bind_matmul=bind_matmul, nabla_w=self.counted("blas", ops_numpy.nabla_w))

    def counted(self, kind, fn):
        def call(*args, **options):
            self.counts[self.name, kind] += 1
            return fn(*args, **options)

        return call


def counts(activation, tau):
    """The calls of one ``backprop`` under BPTT() of RNN([3, 5, 4, 2]) at ``tau``, B = 2."""
    backend = NumpyBackend(mode="serial")
    counter = Counter(backend)
    with backend, RNN([3, 5, 4, 2], activation, output="every", dtype="float64", backend=backend) as net:
        rng = np.random.default_rng(0)
        net.backprop(rng.standard_normal((tau, 3, 2)), rng.uniform(0.1, 0.9, (tau, 2, 2)), BPTT())
    return counter.counts


SIGMA = {"tanh": 1, "relu": 1, "sigmoid": 4}
"""The ufuncs of a = sigma(z) at one step (``ops_numpy.sigma_calls``)."""
SIGMA_PRIME = {"tanh": 2, "relu": 1, "sigmoid": 2}
"""The ufuncs of sigma'(z) over the whole sequence (``ops_numpy.sigma_prime``)."""


@pytest.mark.parametrize("activation", list(SIGMA))
def test_each_step_of_each_layer_makes_one_blas_call_for_z_and_one_for_delta(activation):
    short, long = counts(activation, 3), counts(activation, 11)
    for l in (2, 3):
        per_step = {(what, kind): (long[f"{what}[{l}]", kind] - short[f"{what}[{l}]", kind]) / 8
                    for what in ("z", "delta") for kind in ("blas", "ufunc")}
        assert per_step == {("z", "blas"): 1, ("z", "ufunc"): SIGMA[activation],
                            ("delta", "blas"): 1, ("delta", "ufunc"): 1}, f"layer {l}: {per_step}"


@pytest.mark.parametrize("tau", [1, 2, 7])
def test_a_layer_calls_its_steps_and_a_few_whole_sequence_operations(tau):
    """z^l: w^l a^{l-1} (one product over tau*B columns), + b^l, then each step, then sigma' at once;
    delta^l: (w^{l+1})^T delta^{l+1} (one product), then each step; nabla_w^l, nabla_u^l: one product each."""
    got = counts("tanh", tau)
    for l in (2, 3):
        assert got[f"z[{l}]", "blas"] == 1 + (tau - 1)
        assert got[f"z[{l}]", "ufunc"] == 1 + tau * SIGMA["tanh"] + SIGMA_PRIME["tanh"]
        assert got[f"delta[{l}]", "blas"] == 1 + (tau - 1)
        assert got[f"delta[{l}]", "ufunc"] == tau
        assert got[f"nabla_w[{l}]", "blas"] == 1
        assert got[f"nabla_u[{l}]", "blas"] == (1 if tau > 1 else 0)
