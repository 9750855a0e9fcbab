"""A network's pass at one batch size: the streams it runs on, its events and its buffers, made once.

The MLP's ``Plan``, the RNN's and the DAG's are each one of these. Every buffer starts filled with NaN, so
that a read before its write shows in the result; every event is made on first use and kept, so that a
pass makes none after its first (``E_u``: the main stream is past what unit u's gradients wait for; ``F_j``:
worker j is done). ``captured`` holds the steps graph mode captured on this plan (``core.capture``).
"""

import numpy as np

from .handoff import Handoff


class Plan:
    """Streams, events and buffers of one pass of a network on ``backend``, in ``dtype``, at ``batch`` columns;
    ``units`` bounds ``index(unit)``, the number that chooses the worker of a unit's gradients."""

    def __init__(self, backend, dtype, batch, units):
        self.backend, self.xp, self.main, self.dtype, self.batch = backend, backend.xp, backend.main, dtype, batch
        self.units = units
        self.captured = {}
        self._events = {}

    def workers(self, k):
        """The backend's first ``k`` worker streams."""
        return self.backend.workers(k)

    def event(self, name):
        """The event called ``name``, made on first use."""
        if name not in self._events:
            self._events[name] = self.backend.event(name)
        return self._events[name]

    def buffer(self, *shape, order="C"):
        """A new array of ``shape`` in the plan's dtype, filled with NaN."""
        return self.xp.full(shape, np.nan, dtype=self.dtype, order=order)

    def columns(self, rows):
        """A NaN-filled (rows, B) buffer of this plan's batch, in the backend's order for minibatches."""
        return self.buffer(rows, self.batch, order=self.backend.batch_order)

    def make_scratch(self, elements, least=1):
        """What an update of a parameter of ``elements`` elements streams through (``ops.SCRATCH`` at most,
        ``least`` at least), or None on a backend whose updates need none."""
        chunk = self.backend.ops.SCRATCH
        return self.xp.empty(max(min(chunk, elements), least), dtype=self.dtype) if chunk else None

    def handoff(self, k):
        """A ``Handoff`` of this pass's gradients to ``k`` workers (0: the main stream)."""
        return Handoff(self, k)

    def index(self, unit):
        """The number of ``unit`` that chooses its worker (``index(unit) mod k``): a layer's own number."""
        return unit

    def capture_refusal(self, schedule):
        """Why a step of ``schedule`` on this plan cannot be captured yet, beyond the schedule's own reasons,
        or None."""
        return None

    def allocated(self):
        """Call once the plan's buffers are made: CuPy allocates on its default stream, which ours do not
        wait for."""
        self.backend.synchronize()
