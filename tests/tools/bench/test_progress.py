"""The time left of a bench, each network weighed by its work: the line printed once the first network is
measured, the bar's percentage and time left over the work, and the default grid's weights."""

import io
import re
import sys
import types

import pytest
import tqdm.std

from leapfrog_gpu.tools.bench import mlp as bench_mlp, progress, runner


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def clock(monkeypatch):
    """The clock of ``progress`` and of tqdm's bar, which the test moves on by hand."""
    now = types.SimpleNamespace(seconds=100.0)
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: now.seconds))
    monkeypatch.setattr(tqdm.std, "time", lambda: now.seconds)
    return now


def terminal(monkeypatch):
    """stderr as a terminal, which the bar draws on (set in the test itself: pytest's capture sets stderr again
    between a fixture and its test); what it was written."""
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    return err


def measure(clock, works, seconds, rows=True, quiet=False):
    """A bar over networks of ``works``, named first, second, ..., each measured in its ``seconds`` on ``clock``
    and printing ``rows of NAME`` where ``rows``."""
    with progress.Progress("leapfrog-bench", works, quiet=quiet) as bar:
        for name, took in zip(("first", "second", "third"), seconds):
            bar.start(name)
            clock.seconds += took
            bar.done([f"rows of {name}"] if rows else [])


def test_about_says_two_significant_digits():
    assert [progress.about(s) for s in (0.2, 7.4, 27.0, 143.0, 1234.5)] == ["1", "7", "27", "140", "1200"]


def test_the_line_after_the_first_network_weighs_the_rest_by_their_work(monkeypatch, clock, capsys):
    """Works 2, 4 and 14, the first network 3 s: the other 18 units of work take about 27 s."""
    err = terminal(monkeypatch)
    measure(clock, [2, 4, 14], [3.0, 4.0, 1.0])
    said = err.getvalue()
    assert "\rleapfrog-bench: about 27 s left for 2 more networks (the first took 3.0 s)\n" in said
    assert said.count("s left for") == 1
    assert capsys.readouterr().out == "rows of first\nrows of second\nrows of third\n"


def test_the_bar_gives_the_share_of_the_work_done_and_the_time_left_at_its_rate(monkeypatch, clock):
    """The same networks: 10 % of the work done after the first (a bar counting networks would say 33 %), the
    9 units left at 3 s a unit as the second starts; 7 s for 3 units once two are done, so 16 s for the last 7."""
    err = terminal(monkeypatch)
    measure(clock, [1, 2, 7], [3.0, 4.0, 1.0], rows=False)
    said = err.getvalue()
    assert re.search(r"measuring:   0%\|.*\| \[00:00<\?, network 1 of 3, first\]", said)
    assert re.search(r"measuring:  10%\|.*\| \[00:03<00:27, network 2 of 3, second\]", said)
    assert re.search(r"measuring:  30%\|.*\| \[00:07<00:16, network 3 of 3, third\]", said)


def test_quiet_prints_no_estimate(monkeypatch, clock, capsys):
    err = terminal(monkeypatch)
    measure(clock, [1, 2], [1.0], quiet=True)
    assert err.getvalue() == "" and capsys.readouterr().out == "rows of first\n"


def test_the_default_grid_is_weighed_by_its_networks_sizes(monkeypatch, clock, capsys):
    """A plain bar, counting networks, said 19 s left once the first of the default grid's 8 networks was
    measured (in 2.7 s, then), where well over 150 s were: the smallest network is a small part of the
    grid's work."""
    args = bench_mlp.parser().parse_args([])
    grid = runner.grid(bench_mlp, args)
    assert grid[0] == {"N": 256, "L": 8, "B": 1} and grid[-1] == {"N": 1024, "L": 16, "B": 64}
    measure(clock, [bench_mlp.work(network) for network in grid], [2.7], rows=False)
    left = re.fullmatch(r"leapfrog-bench: about (\d+) s left for 7 more networks \(the first took 2.7 s\)\n",
                        capsys.readouterr().err)
    assert left and int(left[1]) > 150
    assert "several minutes on a 2-core CPU" in " ".join(bench_mlp.parser().format_help().split())
