"""What a network does with a communicator (docs/design.md §5): join it, and sum its gradients across ranks.

The communicator itself, the MPI transport and its watchdog, is ``leapfrog_gpu.parallel``. A network built
with ``MLP(..., comm=parallel.world())`` on more than one rank is attached (``attach``): every rank must
build the same network, and takes rank 0's parameters. Each of its plans then has a ``Reducer``: as soon
as the schedule has produced a layer's gradients, the communication stream (one per backend, the only
one that communicates) waits for that layer's event, then sums its gradients across ranks, layer L
first, in the same order on every rank. Consecutive layers go together in buckets of at most
``bucket_bytes`` (``buckets``); the main stream waits for the last sum before the update.
"""

import contextlib

import numpy as np

from ..backends import to_host
from .comm import Communicator


def attach(net, comm):
    """The communicator ``net`` sums its gradients over, or None when it runs alone.

    With more than one rank: every rank must build the same network (compared by digest; ValueError
    otherwise), the engine for its backend is set up, and rank 0's parameters replace every rank's.
    """
    if comm is None:
        return None
    if not isinstance(comm, Communicator):
        raise TypeError(f"comm must be a leapfrog_gpu.parallel.Communicator, such as parallel.world(); got {comm!r}")
    if not comm.reduces:
        return None
    comm.check_same("network", {
        "sizes": net.sizes, "activation": net.activation, "cost": net.cost,
        "output_activation": net.output_activation, "dtype": net.dtype, "backend": net.backend.name,
        "buckets": buckets(net.sizes, np.dtype(net.dtype).itemsize, comm.bucket_bytes)})
    comm.engine(net.backend)
    broadcast_parameters(net, comm)
    return comm


def broadcast_parameters(net, comm=None):
    """Give every rank rank 0's weights and biases over ``comm`` (default ``net.comm``; with neither,
    nothing happens)."""
    comm = comm or net.comm
    if comm is None:
        return
    weights, biases = [to_host(w) for w in net.weights], [to_host(b) for b in net.biases]
    comm.broadcast(weights + biases)
    net.set_parameters(weights, biases)


def check_schedule(comm, schedule, graph=False):
    """Refuse what cannot run data-parallel (docs/data-parallel.md): a fused update, and a step as a graph."""
    if comm is None:
        return
    if schedule.fused:
        raise ValueError(f"{schedule!r} cannot run data-parallel: a fused update never writes nabla_w, and the "
                         "sum across ranks needs it written; pass fused=False")
    if graph:
        raise ValueError("graph=True cannot run data-parallel yet: a graph holds the step of one plan, while a "
                         "rank whose share of a batch is empty runs another step on it, and no graph has held "
                         "the sums across ranks; pass graph=False")


def buckets(sizes, itemsize, bucket_bytes):
    """Layers L..2 grouped for the sums: each bucket holds consecutive layers whose gradients (nabla_w and
    nabla_b) take at most ``bucket_bytes`` together, or a single layer larger than that."""
    groups, nbytes = [], 0
    for l in range(len(sizes), 1, -1):
        size = sizes[l - 1] * (sizes[l - 2] + 1) * itemsize
        if groups and nbytes + size <= bucket_bytes:
            groups[-1].append(l)
            nbytes += size
        else:
            groups.append([l])
            nbytes = size
    return groups


class Reducer:
    """Sums one plan's gradients across the ranks of ``comm`` on the communication stream, bucket by bucket.

    The plan's ``nabla_w[l]`` and ``nabla_b[l]`` become views into one flat buffer laid out in the order
    in which every schedule hands them over, layer L first: [nabla_w^L, nabla_b^L, nabla_w^{L-1}, ...].
    A bucket is then one contiguous slice, summed in place by one collective, without a copy.

    Events: ``done[l]`` (G_l) is recorded on the stream that computed (6)(7) of layer l, and the
    communication stream waits for it (read after write); ``reduced`` (R) is recorded after the last
    sum, and the main stream waits for it before the update reads the sums (read after write) and before
    the next pass rewrites the buffers (write after read).
    """

    def __init__(self, plan, comm):
        backend, xp, n = plan.backend, plan.backend.xp, plan.n
        self.comm, self.backend, self.main, self.L = comm, backend, plan.main, plan.L
        self.stream = backend.comm_stream()
        self.engine = comm.engine(backend)
        self.flat = xp.full(sum(n[l] * (n[l - 1] + 1) for l in plan.layer_numbers), np.nan, dtype=plan.dtype)
        start = {}
        offset = 0
        for l in range(plan.L, 1, -1):
            start[l] = offset
            plan.nabla_w[l] = self.flat[offset:offset + n[l] * n[l - 1]].reshape(n[l], n[l - 1])
            plan.nabla_b[l] = self.flat[offset + n[l] * n[l - 1]:offset + n[l] * (n[l - 1] + 1)]
            offset += n[l] * (n[l - 1] + 1)
        self.buckets = {}  # the last layer of a bucket -> (name, its part of the flat buffer)
        for group in buckets(plan.sizes, np.dtype(plan.dtype).itemsize, comm.bucket_bytes):
            last = group[-1]
            stop = start[last] + n[last] * (n[last - 1] + 1)
            name = f"allreduce[{group[0]}]" if len(group) == 1 else f"allreduce[{group[0]}..{last}]"
            self.buckets[last] = (name, self.flat[start[group[0]]:stop])
        self.done = {l: backend.event(f"G_{l}") for l in plan.layer_numbers}
        self.reduced = backend.event("R")
        self.expected = None  # the layer the open pass hands over next; None outside a pass

    @contextlib.contextmanager
    def pass_(self):
        """A context around one backward pass: the gradients handed over in it are summed across ranks,
        and the main stream waits for the sums at its end."""
        self.expected = self.L
        try:
            yield
            if self.expected != 1:
                raise RuntimeError(f"the schedule handed over the gradients of layers {self.L}..{self.expected + 1} "
                                   f"only; every rank must sum all of them")
            self.join()
        finally:
            self.expected = None

    def ready(self, stream, l):
        """(6)(7) of layer l are enqueued on ``stream``: the communication stream waits for them and, at
        the end of a bucket, sums it. Outside a pass (a calibration) nothing is summed."""
        if self.expected is None:
            return
        if l != self.expected:
            raise RuntimeError(f"the schedule handed over the gradients of layer {l} where layer {self.expected} was "
                               "due: collectives must leave in the same order on every rank, L first")
        self.expected = l - 1
        self.wait_for_gradients(stream, l)
        if l in self.buckets:
            name, part = self.buckets[l]
            self.backend.launch(self.stream, name, self._sum, name, part)

    def wait_for_gradients(self, stream, l):
        """Guard read after write: the sum of layer l reads (6)(7) of layer l, written on ``stream``."""
        self.backend.record(stream, self.done[l])
        self.backend.wait(self.stream, self.done[l])

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
        leapfrog-bench)."""
        with self.pass_():
            for l in range(self.L, 1, -1):
                self.ready(self.main, l)

    def _sum(self, what, part):
        with self.comm.watch(f"the sum of {what}"):
            self.engine(part)
