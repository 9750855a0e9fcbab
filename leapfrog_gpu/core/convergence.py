"""What the iterative forward solvers share (``dag.forward``'s, ``rnn.newton``'s): the relative residual
they stop on, and what a solve that stops short of its tolerance does.

The residual is the largest of its columns' (axis 0 the features: a sample's state, or a sample's at one
time step), so that no sample or step whose values the others dwarf goes untested; each column's is taken in
float64 on the column scaled by its largest magnitude, so that no square overflows or underflows, whatever the
dtype; NaN or Inf anywhere counts as infinite (unconverged). A solve
that ends above its tolerance warns once per solver (``RuntimeWarning``), or with ``strict=True`` raises a
``RuntimeError``, raised by the call that waits for the solve.
"""

import math
import warnings

import numpy as np

from ..backends import to_host
from .checks import check_flag


TINY = np.finfo(np.float64).tiny
"""What a column's scale is at least, so that a column of zeros divides by it."""


def relative(xp, new, old):
    """max_j ||new_j - old_j|| / ||new_j|| over the columns j of ``new`` and ``old`` (``column_norms``), never NaN:
    0 for a column where both vanish, inf where only ``new`` does, and inf when either holds a NaN or an Inf (not
    converged)."""
    norms = column_norms(xp, new, old)
    return math.inf if norms is None else largest(*norms[:2])


def column_norms(xp, new, old):
    """``(num, den, scale)``, float64 host arrays, one element per column j of ``new`` and ``old`` (axis 0 their
    features; the columns of a 1-D array: one): ``scale_j`` the largest magnitude in ``new_j`` and ``old_j``,
    ``num_j`` and ``den_j`` the norms of ``new_j - old_j`` and ``new_j``, both scaled by it first (so that no
    difference or square overflows or underflows to the answer's harm); None where either array holds a NaN or an
    Inf."""
    new = new.astype(np.float64, order="C").reshape(new.shape[0], -1)  # copies, row-major whatever the layout: each
    old = old.astype(np.float64, order="C").reshape(new.shape)  # sum over axis 0 runs along whole rows, in one order
    scale = xp.abs(xp.maximum(xp.maximum(new.max(axis=0), -new.min(axis=0)),  # abs: +0 for a column of zeros
                              xp.maximum(old.max(axis=0), -old.min(axis=0))))
    if not bool(xp.isfinite(scale).all()):  # a NaN or an Inf reaches its column's largest magnitude
        return None
    divisor = xp.maximum(scale, TINY)  # a column of zeros stays zeros
    xp.divide(new, divisor, out=new)
    xp.divide(old, divisor, out=old)
    diff = xp.subtract(new, old, out=old)
    num, den = (xp.sqrt(xp.multiply(a, a, out=a).sum(axis=0)) for a in (diff, new))
    return to_host(num), to_host(den), to_host(scale)


def ratios(num, den):
    """``num / den`` element by element, 0 where both are 0 and inf where ``den`` alone is."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, math.inf, 0.0))


def largest(num, den):
    """The largest of ``ratios(num, den)``, a float."""
    return float(ratios(num, den).max())


class Solver:
    """A solver that says when it stops short: ``strict`` (raise, rather than warn once), ``stats``; ``network``
    names the network class whose forward pass it solves."""

    network = None

    def __init__(self, strict=False):
        self.strict, self.stats = check_flag("strict", strict), {}
        self._warned = False

    def check(self, net, shape):
        """Raise a ValueError, before a pass changes anything, where this solver cannot solve the forward pass of
        ``net`` on a batch of ``shape`` (the batch's less its axis of inputs: (B,), an RNN's (tau, B)): its
        buffers exceed its ``memory_limit``. A solver without buffers of its own solves any."""

    def _report(self, steps, what, measure, tol):
        """Say that the solve stopped after ``steps`` ``what`` with ``measure`` above ``tol`` (None: short of the
        steps that make it exact), unconverged."""
        short = f"with a relative {measure} above tol={tol}" if tol is not None else "short of those that make it exact"
        message = (f"{self!r} stopped after {steps} {what} {short}: its output is not the forward pass's (NaN or "
                   "Inf counts as unconverged); allow more iterations, or compare stats['converged'] before using it")
        if self.strict:
            raise RuntimeError(message)
        if not self._warned:
            self._warned = True
            warnings.warn(message, RuntimeWarning, stacklevel=2)
