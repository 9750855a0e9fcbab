"""Chaos suite: random delays on every host stream and NaN in every dead buffer; leapfrog must still
equal sequential to the bit at every step. Each wait of the schedule, removed, is caught by it.

Short in CI (192 steps); ``pytest tests/mlp/test_chaos.py --chaos-full`` runs 576.
"""

import numpy as np
import pytest

from helpers import CHAOS_CONFIGS, batch, chaos_catches, chaos_suite
from leapfrog_gpu import MLP, Leapfrog
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core import plan
from leapfrog_gpu.core.handoff import Handoff


def test_leapfrog_equals_sequential_under_chaos(chaos_steps):
    assert len(CHAOS_CONFIGS) * chaos_steps >= 150
    assert chaos_suite(chaos_steps) is None


@pytest.mark.parametrize("wait", ["wait", "join", "last_reader"])
def test_chaos_catches_each_missing_wait(monkeypatch, chaos_steps, wait):
    """The suite can fail: remove one wait of docs/design.md §2 and it reports a difference within budget.

    ``last_reader`` made the identity has a fused worker wait only for its own delta^l (E_l), not for
    delta^{l-1}, the main stream's last read of w^l. The budget is three seeds (``chaos_catches``).
    """
    patches = {"wait": lambda self, worker, unit: None, "join": lambda self: None,
               "last_reader": lambda self, l: l}
    monkeypatch.setattr(plan.Plan if wait == "last_reader" else Handoff, wait, patches[wait])
    fused = True if wait == "last_reader" else None
    assert chaos_catches(chaos_steps, fused=fused), f"removing {wait} went unnoticed in three seeds"


def test_chaos_mode_poisons_dead_buffers():
    sizes = [5, 7, 3]
    with NumpyBackend(chaos=1) as backend:
        net = MLP(sizes, backend=backend)
        net.sgd_step(*batch(sizes, 2), 0.1, Leapfrog(2))
        net.synchronize()
        plan = net.plan(2)
        for group in (plan.a, plan.z, plan.delta, plan.nabla_w, plan.nabla_b):
            assert all(np.isnan(array).all() for array in group.values())
        assert all(np.isfinite(w).all() for w in net.weights)
