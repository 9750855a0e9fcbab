"""The time left of a bench, each network weighed by its work: the estimate, from the times measured and
the one under way, the line printed once the first network is measured, the bar's estimate recomputed
as a network runs, and the default grid's."""

import io
import re
import sys
import time
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


def test_a_network_that_runs_past_its_share_raises_the_estimate_as_it_runs():
    """Three networks of equal work, the first 2 s: 4 s left as the second starts, 3 s a second into it; 5 s
    into it (its share was 2 s) the rate is at least (2 + 5) s over two networks' work, so the third alone
    takes 3.5 s, not the 0 s that 4 s less 5 s would say."""
    estimate = progress.Estimate([1, 1, 1])
    estimate.measured(2.0)
    assert [estimate.left(running) for running in (0.0, 1.0, 2.0)] == [4.0, 3.0, 2.0]
    assert estimate.left(5.0) == pytest.approx(3.5)
    assert estimate.left(11.0) == pytest.approx(6.5)  # (2 + 11) / 2 a unit for the third
    estimate.measured(11.0)
    assert estimate.left() == pytest.approx(6.5) and estimate.left(1.0) == pytest.approx(5.5)


def test_about_says_two_significant_digits():
    assert [progress.about(s) for s in (0.2, 7.4, 27.0, 143.0, 1234.5)] == ["1", "7", "27", "140", "1200"]


def test_the_estimate_is_printed_after_the_first_network_and_updated_on_the_bar(monkeypatch, clock):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    with progress.Progress("leapfrog-bench", [1, 2, 7], quiet=False) as bar:
        for name, seconds in (("first", 3.0), ("second", 4.0), ("third", 1.0)):
            bar.start(name)
            clock.seconds += seconds
            bar.stop()
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
        bar.stop()
        bar.done()
    assert err.getvalue() == ""


def test_the_bar_recomputes_the_time_left_while_a_network_runs(monkeypatch, clock):
    """The second of three equal networks, the first took 2 s: the bar says 4 s left as it starts, 3 s once it
    has run 1 s, and 11 s once it has run 20 s (the rate then at least 22 s over two networks' work): each
    redrawn while the network runs, with no network done in between."""
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(progress, "TICK", 0.01)
    with progress.Progress("leapfrog-bench", [1, 1, 1], quiet=False) as bar:
        bar.start("first")
        clock.seconds += 2
        bar.stop()
        bar.done()
        bar.start("second")
        for running, left in ((0, 4), (1, 3), (20, 11)):
            clock.seconds = bar.started + running
            assert bar.left() == f"about {left}"
            drawn = rf"\| 1/3 \[[\d:]+, second, about {left} s left\]\s*\Z"  # the last drawing of the bar
            deadline = time.monotonic() + 60  # a redraw comes every tick; a loaded machine may be slow to give one
            while not re.search(drawn, err.getvalue()) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert re.search(drawn, err.getvalue()), err.getvalue()[-300:]


def test_the_default_grid_is_weighed_by_its_networks_sizes():
    """A plain bar, counting networks, said 19 s left once the first of the default grid's 8 networks was
    measured (in 2.7 s, then), where well over 150 s were: the smallest network is a small part of the
    grid's work."""
    args = bench_mlp.parser().parse_args([])
    grid = bench_mlp.grid(args)
    assert grid[0] == {"N": 256, "L": 8, "B": 1} and grid[-1] == {"N": 1024, "L": 16, "B": 64}
    estimate = progress.Estimate([bench_mlp.work(network) for network in grid])
    estimate.measured(2.7)
    assert estimate.left() > 150
    assert "several minutes on a 2-core CPU" in " ".join(bench_mlp.parser().format_help().split())
