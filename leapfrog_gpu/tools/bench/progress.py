"""A bench's progress over its grid of networks: a bar on stderr (on a terminal) and the time left.

The time left is the work left at the seconds per unit of work measured so far (``Estimate``). A grid's
networks differ in cost by orders of magnitude, so each is weighed by its work (``layer_work`` times the
layers its passes run through); a weight is a guess, so the network under way counts too once it has run
past its share, and the estimate rises while it runs, not after. Once the first network is measured, one
line on stderr says it; the bar recomputes it every ``TICK`` seconds.
"""

import math
import sys
import threading
import time

from tqdm import tqdm

from ..cli import plural

BAR = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
"""tqdm's bar without its own time left, which assumes networks of equal cost."""
TICK = 1.0
"""Seconds between two drawings of the bar while a network is measured."""


class Estimate:
    """The seconds left of a grid of networks whose work, in any unit, is ``works``, in the order measured."""

    def __init__(self, works):
        self.works, self.done, self.seconds = list(works), 0, 0.0

    def measured(self, seconds):
        """The next network took ``seconds``."""
        self.done += 1
        self.seconds += seconds

    def left(self, running=0.0):
        """Seconds left while the next network has run for ``running`` seconds (None before any is measured):
        the work left at the seconds per unit of the networks measured, or, once the one under way has run
        past its share, of those and it as if it ended now (the least its time says)."""
        if not self.done:
            return None
        done, (now, *rest) = sum(self.works[:self.done]), self.works[self.done:] or [0]
        rate = max(self.seconds / done, (self.seconds + running) / (done + now))
        return max(rate * now - running, 0.0) + rate * sum(rest)


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
    """The progress of ``prog`` over networks of work ``works``: ``start(name)`` as each is measured,
    ``stop()`` once it is (the bar leaves its line to the network's rows), ``done()`` once they are printed.
    Nothing on stderr when ``quiet``; the bar only on a terminal."""

    def __init__(self, prog, works, quiet):
        self.prog, self.quiet, self.estimate = prog, quiet, Estimate(works)
        self.bar = tqdm(total=len(self.estimate.works), desc="measuring", unit="network", leave=False,
                        file=sys.stderr, disable=quiet or not sys.stderr.isatty(), bar_format=BAR)
        self.name = self.started = None
        self.lock, self.closed = threading.Lock(), threading.Event()
        if not self.bar.disable:
            threading.Thread(target=self._tick, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *error):
        self.closed.set()
        with self.lock:
            self.bar.close()

    def left(self):
        """The time left now, as the bar says it: ``about 140``, or ``?`` before a network is measured."""
        left = self.estimate.left(0.0 if self.started is None else time.perf_counter() - self.started)
        return "?" if left is None else f"about {about(left)}"

    def start(self, name):
        with self.lock:
            self.name, self.started = name, time.perf_counter()
            self._show()

    def _tick(self):
        while not self.closed.wait(TICK):
            with self.lock:
                if self.started is not None:
                    self._show()

    def _show(self):
        self.bar.set_postfix_str(f"{self.name}, {self.left()} s left")

    def stop(self):
        with self.lock:
            self.estimate.measured(time.perf_counter() - self.started)
            self.started = None
            self.bar.clear()

    def done(self):
        self.bar.update()
        rest = len(self.estimate.works) - self.estimate.done
        if self.estimate.done == 1 and rest and not self.quiet:
            self.bar.clear()
            print(f"{self.prog}: about {about(self.estimate.left())} s left for {plural(rest, 'more network')} (the "
                  f"first took {self.estimate.seconds:.1f} s)", file=sys.stderr, flush=True)
