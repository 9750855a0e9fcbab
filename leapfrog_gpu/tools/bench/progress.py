"""A bench's progress over its grid of networks: a tqdm bar on stderr (on a terminal) and the time left. The
networks differ in cost by orders of magnitude, so each counts for its work (``layer_work`` times the layers its
passes run through): the bar's percentage and time left are tqdm's over the work. Once the first network is
measured, one line on stderr says how long the rest will take at its rate."""

import sys
import time

from tqdm import tqdm

from ..cli import plural

BAR = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]"
"""tqdm's bar, without its count of the units of work."""


def about(seconds):
    """``seconds`` to two significant digits, as a person would say it: ``7``, ``140``, ``1200``."""
    return f"{float(f'{max(seconds, 1):.2g}'):.0f}"


def layer_work(n, batch):
    """The work of one layer of width ``n`` at ``batch``, in arbitrary units: its n^2 weights, moved a few
    times a pass (the 8), its products' n^2 B multiply-adds, and a fixed part (2^22), the launches' and
    the Python around them, ours and PyTorch's, which dominates a small network's time on a CPU."""
    return n * n * (batch + 8) + 2**22


class Progress(tqdm):
    """The progress of ``prog`` over networks of work ``works``: ``start(name)`` as each is measured,
    ``done(lines)`` once it is, its ``lines`` printed to stdout with the bar cleared for them. Nothing on
    stderr when ``quiet``; the bar only on a terminal."""

    def __init__(self, prog, works, quiet):
        self.prog, self.works, self.quiet, self.measured = prog, list(works), quiet, 0
        super().__init__(total=sum(self.works), desc="measuring", leave=False, file=sys.stderr, smoothing=0,
                         disable=quiet or not sys.stderr.isatty(), bar_format=BAR)

    def start(self, name):
        self.started = time.perf_counter()
        self.set_postfix_str(f"network {self.measured + 1} of {len(self.works)}, {name}")

    def done(self, lines):
        seconds, (work, *rest) = time.perf_counter() - self.started, self.works[self.measured:]
        with self.external_write_mode():
            if lines:
                print(*lines, sep="\n", flush=True)
            if self.measured == 0 and rest and not self.quiet:
                print(f"{self.prog}: about {about(seconds / work * sum(rest))} s left for "
                      f"{plural(len(rest), 'more network')} (the first took {seconds:.1f} s)", file=sys.stderr,
                      flush=True)
        self.update(work)
        self.measured += 1
