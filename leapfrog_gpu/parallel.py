"""Data parallelism across processes (docs/design.md §5): the communicator, and the sums of the gradients.

Every rank holds the whole network and computes on a contiguous share of each batch's columns; the
gradients (6)(7) are summed across ranks before the update, which divides by the whole batch, so that
P ranks compute what one process computes on that batch. ``world()`` is the program's communicator:
the MPI world (through mpi4py) when the program runs under ``mpiexec`` with more than one process,
else a one-process ``Communicator`` with which a network runs exactly as without one.

A network built with ``MLP(..., comm=world())`` on more than one rank checks at construction that
every rank builds the same network (a digest of its definition) and takes rank 0's parameters. In a
pass, each layer's gradients go to a ``Reducer`` as soon as the schedule has produced them: the
communication stream (one per backend, the only one that communicates) waits for that layer's event,
then sums its gradients across ranks, layer L first, in the same order on every rank. Consecutive
layers go together in buckets of at most ``bucket_bytes``; the main stream waits for the last sum
before the update.

MPI calls that wait for the other ranks are watched: one still waiting after ``timeout`` seconds
means that another rank died, failed or hangs; the watching rank then prints one line and aborts the
job (``MPI_Abort``) rather than wait forever.
"""

import contextlib
import hashlib
import json
import os
import sys
import threading
import time

import numpy as np

from .backends import collective

DEFAULT_BUCKET_BYTES = 0
"""Gradients of consecutive layers summed by one collective, up to this many bytes: 0, one collective
per layer (on the CPU of docs/performance.md no bucket size beat another beyond noise)."""
DEFAULT_TIMEOUT = 120.0
"""Seconds an MPI call may wait for the other ranks before the job is aborted."""
LAUNCHERS = (("PMI_SIZE", "PMI_RANK"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
             ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"))
"""Environment variables in which MPI launchers (MPICH and Intel MPI, Open MPI, MVAPICH) give the
number of processes and the rank; without them the program runs alone and mpi4py is not imported."""
PEER_LOST = 4
"""Exit status of a rank that gave up waiting for the others."""
ABORT_GRACE = 0.5
"""Seconds a rank waits between its last line and ``MPI_Abort``: mpiexec forwards each rank's stderr
through a pipe, and an abort ends the job at once, which can lose the line still in the pipe."""


def world(name="leapfrog_gpu", timeout=DEFAULT_TIMEOUT, bucket_bytes=DEFAULT_BUCKET_BYTES):
    """The communicator of this program: MPI's world under a launcher with more than one process,
    else a one-process ``Communicator``.

    ``name`` starts the line a rank prints when it gives up waiting (``timeout`` seconds) for the
    others. Raises RuntimeError when a launcher started several processes but mpi4py is missing, or
    belongs to another MPI library than the launcher (each process would then train alone).
    """
    launched = _launcher(0)
    if launched <= 1:
        return Communicator(bucket_bytes=bucket_bytes)
    try:
        from mpi4py import MPI
    except ImportError:
        raise RuntimeError(f"a launcher started {launched} processes, but mpi4py is not installed: "
                           "pip install 'leapfrog_gpu[mpi]'") from None
    if MPI.COMM_WORLD.Get_size() != launched:
        library = " ".join(MPI.Get_library_version().split()[:3])
        raise RuntimeError(f"a launcher started {launched} processes, but MPI sees {MPI.COMM_WORLD.Get_size()}: "
                           f"mpiexec and mpi4py come from different MPI libraries; use the mpiexec of {library}")
    if MPI.Query_thread() < MPI.THREAD_SERIALIZED:  # the communication stream calls MPI from its own thread
        raise RuntimeError(f"MPI gives thread level {MPI.Query_thread()}; the communication stream needs "
                           "MPI_THREAD_SERIALIZED or more (mpi4py asks for MPI_THREAD_MULTIPLE unless "
                           "mpi4py.rc.thread_level says otherwise)")
    return MpiCommunicator(MPI.COMM_WORLD, name=name, timeout=timeout, bucket_bytes=bucket_bytes)


def launcher_rank():
    """This process's rank as its launcher gives it (0 without one), known before MPI starts."""
    return _launcher(1)


def _launcher(which):
    for variables in LAUNCHERS:
        value = os.environ.get(variables[which], "")
        if value.isdigit():
            return int(value)
    return 1 - which  # alone: one process, rank 0


class Communicator:
    """One process: rank 0 of 1. Every collective returns this rank's own value; nothing is summed.

    Subclasses (``MpiCommunicator``) talk to other ranks through the few primitives below
    (``allgather``, ``bcast``, ``broadcast``, ``sum``, ``barrier``, ``engine``, ``watch``, ``abort``);
    the rest is written on top of them.

    Args:
        bucket_bytes: gradients of consecutive layers that one collective sums, at most (0: each layer
            on its own; a layer larger than the bucket is summed alone).
    """

    rank, size, local_rank = 0, 1, 0

    def __init__(self, bucket_bytes=DEFAULT_BUCKET_BYTES):
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 0:
            raise ValueError(f"bucket_bytes must be an integer >= 0 (0: one collective per layer); "
                             f"got {bucket_bytes!r}")
        self.bucket_bytes = bucket_bytes

    def __repr__(self):
        return f"{type(self).__name__}(rank {self.rank} of {self.size}, bucket_bytes={self.bucket_bytes})"

    @property
    def reduces(self):
        """Whether a network built with this communicator sums its gradients across ranks."""
        return self.size > 1

    # -- primitives -----------------------------------------------------------------------------------

    def allgather(self, value):
        """Every rank's ``value`` (picklable), in rank order."""
        return [value]

    def bcast(self, value):
        """Rank 0's ``value`` (picklable)."""
        return value

    def broadcast(self, arrays):
        """Overwrite each NumPy array of ``arrays`` with rank 0's, in place."""

    def sum(self, values):
        """The sum over ranks of ``values`` (numbers), as a float64 array."""
        return np.array(values, dtype=np.float64)

    def barrier(self):
        """Return once every rank has called it; a rank that waits sleeps, and leaves the cores to the
        others (a benchmark's idle ranks)."""

    def engine(self, backend):
        """The callable that sums a flat gradient buffer of ``backend`` in place on the communication
        stream (``backends.collective``)."""
        raise RuntimeError("a one-process Communicator sums nothing")

    def watch(self, what):
        """A context around a call that waits for the other ranks (``what`` names it)."""
        return contextlib.nullcontext()

    def abort(self, status):
        """End every rank of the job with exit status ``status``."""
        _flush()
        os._exit(status)

    # -- built on them --------------------------------------------------------------------------------

    def share(self, count):
        """This rank's contiguous share of ``count`` items, as a slice: the first ``count mod size`` ranks
        take one more (a rank may take none)."""
        base, extra = divmod(count, self.size)
        start = self.rank * base + min(self.rank, extra)
        return slice(start, start + base + (self.rank < extra))

    @contextlib.contextmanager
    def together(self, *kinds):
        """Run the block on every rank; an exception of ``kinds`` raised in it on any rank is raised on
        every rank once all of them have run it: the lowest failing rank's, its message prefixed by
        that rank unless every rank failed alike. ``kinds`` must be built from one message. No
        collective may run inside the block (a rank that failed before it would never join it)."""
        if self.size == 1:
            yield
            return
        failure = None
        try:
            yield
        except kinds as error:
            failure = (type(error), str(error))
        failures = self.allgather(failure)
        failed = [(rank, f) for rank, f in enumerate(failures) if f is not None]
        if failed:
            rank, (kind, message) = failed[0]
            alike = len(failed) == self.size and all(f == failed[0][1] for _, f in failed)
            raised = kind(message if alike else f"rank {rank}: {message}")
            raised.every_rank = True  # every rank raises it: nobody is left waiting
            raise raised

    def check_same(self, what, description):
        """Raise ValueError on every rank unless all ranks give the same ``description`` (a JSON-able
        dict): the digests are compared first, and only on a mismatch the keys that differ named."""
        if self.size == 1:
            return
        text = json.dumps(description, sort_keys=True, default=str)
        digests = self.allgather(hashlib.sha256(text.encode()).hexdigest())
        if len(set(digests)) == 1:
            return
        descriptions = self.allgather(description)
        rank = next(r for r, d in enumerate(digests) if d != digests[0])
        first, other = descriptions[0], descriptions[rank]
        keys = sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))
        differences = "; ".join(f"{key}: {other.get(key)!r} on rank {rank}, {first.get(key)!r} on rank 0"
                                for key in keys)
        raise ValueError(f"every rank must use the same {what}, but they differ in {differences}")


class MpiCommunicator(Communicator):
    """The ranks of an mpi4py communicator (``world()`` gives ``MPI.COMM_WORLD``'s).

    Collectives that the communication stream runs during a step go over a duplicate of ``comm``, so
    that they never mix with those the program's thread runs (loss sums, broadcasts). Every call that
    waits for the other ranks is watched (``timeout``).
    """

    def __init__(self, comm, name="leapfrog_gpu", timeout=DEFAULT_TIMEOUT, bucket_bytes=DEFAULT_BUCKET_BYTES):
        super().__init__(bucket_bytes)
        from mpi4py import MPI

        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0; got {timeout!r}")
        self._mpi, self._comm = MPI, comm
        self.rank, self.size, self.name, self.timeout = comm.Get_rank(), comm.Get_size(), name, float(timeout)
        self._watchdog = _Watchdog(self.timeout, self._give_up)
        with self.watch("setting up MPI"):
            self._steps = comm.Dup()
            node = comm.Split_type(MPI.COMM_TYPE_SHARED)
            self.local_rank = node.Get_rank()
            node.Free()
        self._engines = {}

    def allgather(self, value):
        with self.watch("a gather over every rank"):
            return self._comm.allgather(value)

    def bcast(self, value):
        with self.watch("a broadcast from rank 0"):
            return self._comm.bcast(value, root=0)

    def broadcast(self, arrays):
        with self.watch("the broadcast of rank 0's parameters"):
            for array in arrays:
                self._comm.Bcast(array, root=0)

    def sum(self, values):
        array = np.array(values, dtype=np.float64)
        with self.watch("the sum of a metric over every rank"):
            self._comm.Allreduce(self._mpi.IN_PLACE, array, op=self._mpi.SUM)
        return array

    def barrier(self):
        with self.watch("a barrier"):
            request = self._comm.Ibarrier()
            while not request.Test():
                time.sleep(1e-3)

    def engine(self, backend):
        """MPI for the NumPy backend; NCCL for CuPy, its unique id broadcast from rank 0 (once per kind)."""
        if backend.name not in self._engines:
            if backend.name == "cupy":
                unique_id = self.bcast(collective.nccl_unique_id() if self.rank == 0 else None)
                with self.watch("setting up NCCL"):
                    self._engines[backend.name] = collective.NcclSum(backend.xp, self.size, self.rank, unique_id)
            else:
                self._engines[backend.name] = collective.MpiSum(self._steps)
        return self._engines[backend.name]

    def watch(self, what):
        return self._watchdog.watch(what)

    def abort(self, status):
        _flush()
        time.sleep(ABORT_GRACE)
        self._comm.Abort(status)

    def _give_up(self, what):
        print(f"{self.name}: error: rank {self.rank} of {self.size}: {what} has waited {self.timeout:g} s for the "
              "other ranks: one of them died, failed or hangs; stopping the job", file=sys.stderr, flush=True)
        self.abort(PEER_LOST)


class _Watchdog:
    """Calls ``expire(what)`` from its own thread once a watched call has run for ``timeout`` seconds
    (a thread blocked inside MPI cannot be interrupted otherwise)."""

    def __init__(self, timeout, expire):
        self.timeout, self._expire = timeout, expire
        self._lock = threading.Lock()
        self._open = {}
        self._thread = None

    @contextlib.contextmanager
    def watch(self, what):
        token = object()
        with self._lock:
            self._open[token] = (time.monotonic() + self.timeout, what)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="leapfrog-watchdog", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                del self._open[token]

    def _run(self):
        period = min(0.5, self.timeout / 4)
        while True:
            time.sleep(period)
            now = time.monotonic()
            with self._lock:
                late = [what for deadline, what in self._open.values() if deadline <= now]
            if late:
                self._expire(late[0])
                return


def _flush():
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


# -- what a network does with a communicator ------------------------------------------------------------


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
    weights, biases = [_host(w) for w in net.weights], [_host(b) for b in net.biases]
    comm.broadcast(weights + biases)
    net.set_parameters(weights, biases)


def _host(array):
    return np.array(array.get() if hasattr(array, "get") else array)  # a contiguous host copy


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


def reducer(net, plan):
    """The ``Reducer`` of ``plan``, or None when ``net`` runs alone."""
    return None if net.comm is None else Reducer(net, plan)


def reducing(plan):
    """A context around one backward pass on ``plan``: the gradients that the schedule hands over in it
    are summed across ranks, and the main stream waits for the sums at its end."""
    return contextlib.nullcontext() if plan.reducer is None else plan.reducer.pass_()


class Reducer:
    """Sums one plan's gradients across ranks on the communication stream, bucket by bucket.

    The plan's ``nabla_w[l]`` and ``nabla_b[l]`` become views into one flat buffer laid out in the order
    in which every schedule hands them over, layer L first: [nabla_w^L, nabla_b^L, nabla_w^{L-1}, ...].
    A bucket is then one contiguous slice, summed in place by one collective, without a copy.

    Events: ``done[l]`` (G_l) is recorded on the stream that computed (6)(7) of layer l, and the
    communication stream waits for it (read after write); ``reduced`` (R) is recorded after the last
    sum, and the main stream waits for it before the update reads the sums (read after write) and before
    the next pass rewrites the buffers (write after read).
    """

    def __init__(self, net, plan):
        backend, xp = net.backend, net.backend.xp
        self.comm, self.backend, self.main, self.L = net.comm, backend, plan.main, net.L
        self.stream = backend.comm_stream()
        self.engine = self.comm.engine(backend)
        self.flat = xp.full(sum(net.n[l] * (net.n[l - 1] + 1) for l in net.layers), np.nan, dtype=net.dtype)
        start = {}
        offset = 0
        for l in range(net.L, 1, -1):
            n, m = net.n[l], net.n[l - 1]
            start[l] = offset
            plan.nabla_w[l] = self.flat[offset:offset + n * m].reshape(n, m)
            plan.nabla_b[l] = self.flat[offset + n * m:offset + n * (m + 1)]
            offset += n * (m + 1)
        self.buckets = {}  # the last layer of a bucket -> (name, its part of the flat buffer)
        for group in buckets(net.sizes, np.dtype(net.dtype).itemsize, self.comm.bucket_bytes):
            last = group[-1]
            stop = start[last] + net.n[last] * (net.n[last - 1] + 1)
            name = f"allreduce[{group[0]}]" if len(group) == 1 else f"allreduce[{group[0]}..{last}]"
            self.buckets[last] = (name, self.flat[start[group[0]]:stop])
        self.done = {l: backend.event(f"G_{l}") for l in net.layers}
        self.reduced = backend.event("R")
        self.expected = None  # the layer the open pass hands over next; None outside a pass

    @contextlib.contextmanager
    def pass_(self):
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
