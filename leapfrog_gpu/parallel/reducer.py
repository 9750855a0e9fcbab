"""What a network does with a communicator (docs/design.md §5): join it, and sum its gradients across ranks.

The communicator itself, the MPI transport and its watchdog, is ``parallel.comm``. A network built with
``comm=parallel.world()`` on more than one rank (an ``MLP``, an ``RNN`` or a ``DagNet``) is attached
(``attach``): every rank must build the same network, and takes rank 0's parameters. Each of its plans then
has a ``Reducer`` over the gradients of its units (layers or nodes), laid out in the order the network's
schedules hand them over (``layout``): as soon as a unit's gradients are enqueued, the communication stream
(one per backend, the only one that communicates) waits for them, then sums them across ranks, in the
layout's order on every rank. Consecutive units go together in buckets of at most ``bucket_bytes``
(``buckets``); the main stream waits for the last sum before the update. A fused step updates each unit
behind its bucket's sum on the communication stream instead, off the chain.
"""

import contextlib
import math

import numpy as np

from ..backends import to_host
from .comm import Communicator


@contextlib.contextmanager
def building(comm):
    """A block that runs no collective, before one: a network allocating and drawing its parameters before it joins
    ``comm`` (``attach``), or taking a module's before they are broadcast. With more than one rank, an error one rank
    meets there (MemoryError, or a ValueError or TypeError: NumPy's for an array beyond any address space, an argument
    or a parameter refused) is raised on every rank (``Communicator.together``), so that no rank waits in the
    collective for a rank that failed."""
    if isinstance(comm, Communicator) and comm.reduces:
        with comm.together(MemoryError, ValueError, TypeError):
            yield
    else:
        yield


def attach(net, comm):
    """The communicator ``net`` sums its gradients over, or None when it runs alone.

    With more than one rank: every rank must build the same network (``net.structure()`` and ``check_finite``,
    compared by digest; ValueError otherwise), the engine for its backend is set up, and rank 0's parameters
    replace every rank's.
    """
    if comm is None:
        return None
    if not isinstance(comm, Communicator):
        raise TypeError(f"comm must be a leapfrog_gpu.parallel.Communicator, such as parallel.world(); got {comm!r}")
    if not comm.reduces:
        return None
    layout = net.gradient_layout()
    comm.check_same("network", {**net.structure(), "check_finite": net.check_finite, "backend": net.backend.name,
                                "buckets": buckets(layout, np.dtype(net.dtype).itemsize, comm.bucket_bytes)})
    comm.engine(net.backend)
    broadcast_parameters(net, comm)
    return comm


def broadcast_parameters(net, comm=None):
    """Give every rank rank 0's parameters over ``comm`` (default ``net.comm``; with neither, nothing happens)."""
    comm = comm or net.comm
    if comm is None:
        return
    params = net.parameters()
    keys = [(unit, name) for unit, named in params.items() for name in named]
    arrays = [to_host(params[unit][name]) for unit, name in keys]
    comm.broadcast(arrays)
    given = {}
    for (unit, name), array in zip(keys, arrays):
        given.setdefault(unit, {})[name] = array
    net.set_parameters(given)


def check_schedule(comm, schedule):
    """Refuse what cannot run data-parallel (docs/data-parallel.md): the MLP's one-pass sweep, which updates w
    inside the chain, before its gradients are summed."""
    if comm is not None and schedule.one_pass:
        raise ValueError(f"{schedule!r} cannot run data-parallel: the one-pass sweep updates w inside the chain's "
                         f"(5), before the sum across ranks of its gradient; pass {schedule.without_one_pass}")


def buckets(layout, itemsize, bucket_bytes):
    """The units of ``layout`` (``[(unit, {name: shape})]``) grouped for the sums, in order: each bucket
    holds consecutive units whose gradients take at most ``bucket_bytes`` together, or a single unit larger
    than that."""
    groups, nbytes = [], 0
    for unit, shapes in layout:
        size = sum(math.prod(shape) for shape in shapes.values()) * itemsize
        if groups and nbytes + size <= bucket_bytes:
            groups[-1].append(unit)
            nbytes += size
        else:
            groups.append([unit])
            nbytes = size
    return groups


class Reducer:
    """Sums one plan's gradients across the ranks of ``comm`` on the communication stream, bucket by bucket.

    ``layout`` (``[(unit, {name: shape})]``, the network's ``gradient_layout()``) lists the gradients in the
    order the schedules hand them over; ``views[unit][name]`` are views into one flat buffer laid out in
    that order, which the plan takes as its gradient buffers. A bucket is one contiguous slice, summed in
    place by one collective, without a copy.

    Events: ``done[unit]`` (G_unit) is recorded on the stream that computed the unit's gradients, and the
    communication stream waits for it (read after write); ``reduced`` (R) is recorded after the last sum,
    and the main stream waits for it before the update reads the sums (read after write) and before the
    next pass rewrites the buffers (write after read). A schedule may hand units over in another order than
    the layout's (``LevelSets``): the sums still leave in the layout's order, each once every unit before
    it has been handed over, so that every rank issues its collectives alike.

    A fused step (``pass_(update)``) enqueues each unit's update on the communication stream right behind
    its bucket's sum: the update reads the sum (read after write, in stream order) off the chain, and R,
    recorded after it, keeps the next pass off the parameters (write after read). One stream issues every
    collective, so k workers never race to issue them in another order on another rank.
    """

    def __init__(self, plan, comm, layout):
        backend, xp = plan.backend, plan.backend.xp
        self.comm, self.backend, self.main = comm, backend, plan.main
        self.stream = backend.comm_stream()
        self.engine = comm.engine(backend)
        self.units = [unit for unit, _ in layout]
        self.flat = xp.full(sum(math.prod(s) for _, shapes in layout for s in shapes.values()), np.nan,
                            dtype=plan.dtype)
        self.views, start, offset = {}, {}, 0
        for unit, shapes in layout:
            start[unit], self.views[unit] = offset, {}
            for name, shape in shapes.items():
                self.views[unit][name] = self.flat[offset:offset + math.prod(shape)].reshape(shape)
                offset += math.prod(shape)
        self.buckets = {}  # the last unit of a bucket -> (name, its part of the flat buffer, its units)
        groups = buckets(layout, np.dtype(plan.dtype).itemsize, comm.bucket_bytes)
        for group, after in zip(groups, [start[g[0]] for g in groups[1:]] + [offset]):
            name = f"allreduce[{group[0]}]" if len(group) == 1 else f"allreduce[{group[0]}..{group[-1]}]"
            self.buckets[group[-1]] = (name, self.flat[start[group[0]]:after], group)
        self.done = {unit: plan.event(f"G_{unit}") for unit in self.units}
        self.reduced = plan.event("R")
        self.handed = None  # the units the open pass has handed over; None outside a pass
        self.issued = 0  # how many units of the layout the open pass has waited for on the communication stream
        self.update = None  # the open pass's fused update, ``update(stream, unit)``, or None

    @contextlib.contextmanager
    def pass_(self, update=None):
        """A context around one backward pass: the gradients handed over in it are summed across ranks,
        and the main stream waits for the sums at its end. ``update(stream, unit)``, given (a fused step),
        enqueues a unit's update: each follows its bucket's sum on the communication stream."""
        self.handed, self.issued, self.update = set(), 0, update
        try:
            yield
            missing = [unit for unit in self.units if unit not in self.handed]
            if missing:
                raise RuntimeError(f"the schedule did not hand over the gradients of {_listing(missing)}; every "
                                   "rank must sum all of them")
            self.join()
        finally:
            self.handed = self.update = None

    def ready(self, stream, unit):
        """The gradients of ``unit`` are enqueued on ``stream``: the communication stream waits for them and
        sums each bucket once all of its units are in, in the layout's order. Outside a pass (a calibration)
        nothing is summed."""
        if self.handed is None:
            return
        if unit in self.handed:
            raise RuntimeError(f"the schedule handed over the gradients of {unit!r} twice in one pass")
        self.handed.add(unit)
        self.backend.record(stream, self.done[unit])
        while self.issued < len(self.units) and self.units[self.issued] in self.handed:
            unit = self.units[self.issued]
            self.issued += 1
            self.wait_for_gradients(unit)
            if unit in self.buckets:
                name, part, group = self.buckets[unit]
                self.backend.launch(self.stream, name, self._sum, name, part)
                if self.update is not None:  # a fused step: each unit's update reads its sum
                    for summed in group:
                        self.update(self.stream, summed)

    def wait_for_gradients(self, unit):
        """Guard read after write: the sum of ``unit``'s gradients reads what its stream wrote up to G_unit."""
        self.backend.wait(self.stream, self.done[unit])

    def join(self):
        """Guard read after write (the update reads the sums) and write after read (the next pass
        rewrites the gradients): the main stream waits for the last sum."""
        self.backend.record(self.stream, self.reduced)
        self.backend.wait(self.main, self.reduced)

    def add_zeros(self):
        """This rank's share of the batch is empty: it adds zero gradients to every sum."""
        self.backend.launch(self.main, "zero_gradients", self.flat.fill, 0)
        self.sum_all()

    def sum_all(self):
        """Sum every bucket across ranks as it stands, in a pass of its own (also the sums alone, timed by
        profiling/parallel_bench.py)."""
        with self.pass_():
            for unit in self.units:
                self.ready(self.main, unit)

    def _sum(self, what, part):
        with self.comm.watch(f"the sum of {what}"):
            self.engine(part)


def _listing(units):
    return ", ".join(repr(unit) for unit in units)
