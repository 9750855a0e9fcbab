"""The hand-off: a pass's weight gradients leave the backward chain for k worker streams (docs/design.md §2).

The main stream runs the chain. Once it has enqueued what the gradients of unit u (a layer, a node) wait
for, it records the event E_u (``mark``); the gradients then run on worker ``index(u) mod k`` (the workers
numbered among those that own a unit: fewer than k where fewer residues mod k are some unit's) behind
E_after, where ``after`` is u itself (read after write: the worker reads delta^u) or, for an update fused
into the gradients, the unit whose delta reads u's parameters last (write after read). ``join`` makes the
main stream wait for every busy worker (write after read: the update and the next pass rewrite what the
workers read). With k = 0 the gradients run on the main stream, in the chain's order, and nothing waits.
``core.driver`` runs it for the MLP's, the RNN's and the DAG's schedules alike.
"""


class Handoff:
    """The hand-off of one pass on ``plan`` (a ``core.plan.Plan``, whose ``index(unit)`` chooses a unit's
    worker) to ``k`` workers; only the workers that own a unit are ever made. From its making to ``end`` the
    main stream and those workers, which run products at once, share the backend's BLAS threads
    (``backend.share``). Both changes of the share run while no worker runs (the previous pass joined; this one
    joined), so that each product runs on a number of threads that the schedule fixes, whatever the timing: a
    product of OpenBLAS may round otherwise on another number of threads."""

    def __init__(self, plan, k):
        self.plan, self.k = plan, k
        self.busy = {}
        owning = sorted({plan.index(unit) % k for unit in plan.units}) if k else []
        self.worker_of = {residue: j for j, residue in enumerate(owning)}  # index mod k -> the worker's number
        self.streams = len(owning) + 1  # the streams that share the BLAS threads
        if k:
            plan.backend.share(plan.main, self.streams)

    def mark(self, unit):
        """The main stream has enqueued what unit's gradients wait for: record E_unit there (k >= 1)."""
        if self.k:
            self.plan.backend.record(self.plan.main, self.plan.event(f"E_{unit}"))

    def off(self, unit, after=None):
        """The stream to enqueue unit's gradients on: the main stream (k = 0), else the worker of ``index(unit)
        mod k``, made to wait for E_after (``after`` defaults to ``unit``) first."""
        plan = self.plan
        if not self.k:
            return plan.main
        j = self.worker_of[plan.index(unit) % self.k]
        worker = plan.workers(len(self.worker_of))[j]
        self.wait(worker, unit if after is None else after)
        self.busy[j] = worker
        return worker

    def wait(self, worker, unit):
        """Guard read after write: ``worker`` reads what the main stream wrote up to E_unit (and, with a
        fused update, write after read: E_unit means the main stream is done with the parameters)."""
        self.plan.backend.wait(worker, self.plan.event(f"E_{unit}"))

    def join(self):
        """Nothing on the main stream passes until every busy worker is done."""
        backend, main = self.plan.backend, self.plan.main
        for j in sorted(self.busy):
            done = self.plan.event(f"F_{j}")
            backend.record(self.busy[j], done)
            backend.wait(main, done)
        self.busy = {}

    def end(self):
        """The streams no longer share the BLAS threads: the main stream has them all."""
        if self.streams > 1:
            self.plan.backend.share(self.plan.main, 1, self.streams)
            self.streams = 1
