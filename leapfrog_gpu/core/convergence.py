"""What the iterative forward solvers share (``dag.forward``'s, ``rnn.newton``'s): the relative residual
they stop on, and what a solve that stops short of its tolerance does.

The residual is taken in float64 on arrays scaled by their largest magnitude, so that no square
overflows or underflows, whatever the dtype; NaN or Inf anywhere counts as infinite (unconverged). A solve
that ends above its tolerance warns once per solver (``RuntimeWarning``), or with ``strict=True`` raises a
``RuntimeError``, raised by the call that waits for the solve.
"""

import math
import warnings

import numpy as np

from .checks import check_flag


def relative(xp, new, old):
    """||new - old|| / ||new|| (Frobenius), never NaN: taken in float64 on arrays scaled by their largest
    magnitude, so that no square overflows or underflows to the answer's harm; 0 when both vanish, inf when
    only ``new`` does, and inf when either holds a NaN or an Inf (not converged)."""
    new, old = new.astype(np.float64), old.astype(np.float64)
    if not bool(xp.isfinite(new).all() and xp.isfinite(old).all()):
        return math.inf
    diff = new - old
    scale = max(float(xp.abs(new).max()), float(xp.abs(diff).max()))
    if scale == 0:
        return 0.0
    diff, new = diff / scale, new / scale
    num, den = math.sqrt(float((diff * diff).sum())), math.sqrt(float((new * new).sum()))
    return math.inf if den == 0 else num / den


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
