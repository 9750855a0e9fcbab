"""A bench's progress over its grid of networks: a bar on stderr (on a terminal) and the time left, each
network weighed by its size.

A grid's networks differ in cost by orders of magnitude (the MLP's default grid runs from [256] * 8 at
B = 1 to [1024] * 16 at B = 64, the first a small part of the run), so the time left is not the networks
left times the mean time of those measured, a plain bar's estimate, but the work left at the seconds per
unit of work measured so far (``Estimate``). A network's work is what a layer costs (``layer_work``: the
weights it moves, the products it computes, a fixed part for the launches) times the layers its passes
run through. Once the first network is measured, one line on stderr says about how long the rest will
take; the bar then shows the estimate, refined after each network.
"""

import math
import sys
import time

from tqdm import tqdm

from ..cli import plural

BAR = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
"""tqdm's bar without its own time left, which assumes networks of equal cost."""


class Estimate:
    """The seconds left of a grid of networks whose work, in any unit, is ``works``, in the order measured:
    the seconds per unit of work of the networks measured so far, times the work left."""

    def __init__(self, works):
        self.works, self.done, self.seconds = list(works), 0, 0.0

    def measured(self, seconds):
        """The next network took ``seconds``."""
        self.done += 1
        self.seconds += seconds

    def left(self):
        """Seconds left, or None before any network is measured."""
        if not self.done:
            return None
        return self.seconds / sum(self.works[:self.done]) * sum(self.works[self.done:])


def about(seconds):
    """``seconds`` to two significant digits, as a person would say it: ``7``, ``140``, ``1200``."""
    if seconds < 10:
        return f"{max(seconds, 1):.0f}"
    return f"{round(seconds, 1 - int(math.log10(seconds))):.0f}"


def layer_work(n, batch):
    """The work of one layer of width ``n`` at ``batch``, in arbitrary units: its n^2 weights, moved a few
    times a pass (the 8), its products' n^2 B multiply-adds, and a fixed part (2^22), the launches' and
    the Python around them, ours and PyTorch's, which dominates a small network's time on a CPU."""
    return n * n * (batch + 8) + 2**22


class Progress:
    """The progress of ``prog`` over networks of work ``works`` (``Estimate``): ``start(name)`` as each is
    measured, ``done()`` once it is. Nothing on stderr when ``quiet``; the bar only on a terminal."""

    def __init__(self, prog, works, quiet):
        self.prog, self.quiet, self.estimate = prog, quiet, Estimate(works)
        self.bar = tqdm(total=len(self.estimate.works), desc="measuring", unit="network", leave=False,
                        file=sys.stderr, disable=quiet or not sys.stderr.isatty(), bar_format=BAR)
        self.started = None

    def __enter__(self):
        return self

    def __exit__(self, *error):
        self.bar.close()

    def start(self, name):
        """The network ``name`` is being measured."""
        left = self.estimate.left()
        self.bar.set_postfix_str(f"{name}, {'?' if left is None else 'about ' + about(left)} s left")
        self.started = time.perf_counter()

    def clear(self):
        """Take the bar off its line, before a line is printed."""
        self.bar.clear()

    def done(self):
        """The network started last is measured: after the first, the line that says how long the rest take."""
        self.estimate.measured(time.perf_counter() - self.started)
        self.bar.update()
        rest = len(self.estimate.works) - self.estimate.done
        if self.estimate.done == 1 and rest and not self.quiet:
            self.bar.clear()
            print(f"{self.prog}: about {about(self.estimate.left())} s left for {plural(rest, 'more network')} (the "
                  f"first took {self.estimate.seconds:.1f} s)", file=sys.stderr, flush=True)
