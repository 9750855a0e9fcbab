"""The time left of a bench, each network weighed by its work: the estimate, the line printed once the
first network is measured, the bar's estimate refined after each network, and the default grid's."""

import io
import re
import sys
import types

import pytest

from leapfrog_gpu.tools.bench import mlp as bench_mlp, progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def clock(monkeypatch):
    """``progress``'s clock, which the test moves on by hand."""
    now = types.SimpleNamespace(seconds=100.0)
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: now.seconds))
    return now


def test_the_time_left_is_the_work_left_at_the_seconds_per_unit_so_far():
    estimate = progress.Estimate([1, 2, 7])
    assert estimate.left() is None
    estimate.measured(3.0)
    assert estimate.left() == pytest.approx(3.0 / 1 * 9)
    estimate.measured(4.0)
    assert estimate.left() == pytest.approx(7.0 / 3 * 7)
    estimate.measured(1.0)
    assert estimate.left() == 0


def test_about_says_two_significant_digits():
    assert [progress.about(s) for s in (0.2, 7.4, 27.0, 143.0, 1234.5)] == ["1", "7", "27", "140", "1200"]


def test_the_estimate_is_printed_after_the_first_network_and_updated_on_the_bar(monkeypatch, clock):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    with progress.Progress("leapfrog-bench", [1, 2, 7], quiet=False) as bar:
        for name, seconds in (("first", 3.0), ("second", 4.0), ("third", 1.0)):
            bar.start(name)
            clock.seconds += seconds
            bar.done()
    said = err.getvalue()
    assert re.search(r"\| 0/3 \[[\d:]+, first, \? s left\]", said)
    assert "\rleapfrog-bench: about 27 s left for 2 more networks (the first took 3.0 s)\n" in said
    assert re.search(r"\| 1/3 \[[\d:]+, second, about 27 s left\]", said)
    assert re.search(r"\| 2/3 \[[\d:]+, third, about 16 s left\]", said)  # 7 s for 3 units: 7 units left
    assert said.count("s left for") == 1


def test_quiet_prints_no_estimate(monkeypatch, clock):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    with progress.Progress("leapfrog-bench", [1, 2], quiet=True) as bar:
        bar.start("first")
        clock.seconds += 1
        bar.done()
    assert err.getvalue() == ""


def test_the_default_grid_is_weighed_by_its_networks_sizes():
    """A plain bar, counting networks, said 19 s left once the first of the default grid's 8 networks was
    measured (in 2.7 s, then), where well over 150 s were: the smallest network is a small part of the
    grid's work."""
    args = bench_mlp.parser().parse_args([])
    grid = bench_mlp.grid(args)
    assert grid[0] == (256, 8, 1) and grid[-1] == (1024, 16, 64)
    estimate = progress.Estimate([bench_mlp.work(network) for network in grid])
    estimate.measured(2.7)
    assert estimate.left() > 150
    assert "several minutes on a 2-core CPU" in " ".join(bench_mlp.parser().format_help().split())
