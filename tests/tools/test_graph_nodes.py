"""profiling/graph_nodes.py: graphs of n empty kernels, and a node's cost as the slope of their times."""

import sys
from pathlib import Path

import numpy as np
import pytest

from leapfrog_gpu.backends import timing

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "profiling"))
import graph_nodes  # noqa: E402


def test_each_graph_holds_n_empty_kernels_and_the_slope_is_a_node(standin, monkeypatch):
    """On the stand-in each graph runs its n nodes, all the empty kernel; times of 3 + 0.5 n us (as the
    measurement reports them, in ms) give 0.5 us a node and 3 us a launch."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    ran = []

    def measure(backend, fn, repeats, warmup):
        start = len(standin.node_runs())
        fn()
        backend.synchronize()
        nodes = [name for name, _, _ in standin.node_runs()[start:]]
        ran.append(nodes)
        return np.array([(3 + 0.5 * len(nodes)) / 1e3] * repeats)

    monkeypatch.setattr(timing, "measure", measure)
    with CupyBackend() as backend:
        cost = graph_nodes.node_cost(backend, counts=(1, 4, 9), repeats=2, warmup=0)
    assert [len(nodes) for nodes in ran] == [1, 4, 9] and {name for nodes in ran for name in nodes} == {"empty"}
    assert cost["us"] == pytest.approx([3.5, 5.0, 7.5])
    assert (cost["node_us"], cost["launch_us"]) == (pytest.approx(0.5), pytest.approx(3.0))
    assert graph_nodes.line(cost) == ("graph node: 0.50 us a node, 3.0 us a launch "
                                      "(empty-kernel graphs, nodes: us = 1: 3.5, 4: 5.0, 9: 7.5)")
