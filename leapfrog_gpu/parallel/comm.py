"""Data parallelism's transport (docs/design.md §5): the communicator of the program and its watchdog.

Every rank holds the whole network and computes on a contiguous share of each batch's columns; the
gradients (6)(7) are summed across ranks before the update, which divides by the whole batch, so that
P ranks compute what one process computes on that batch. ``world()`` is the program's communicator:
the MPI world (through mpi4py) when the program runs under ``mpiexec`` with more than one process,
else a one-process ``Communicator`` with which a network runs exactly as without one. What a network
does with it, joining it and summing its gradients, is ``leapfrog_gpu.parallel.reducer``.

MPI calls that wait for the other ranks are watched: one still waiting after ``timeout`` seconds
means that another rank died, failed or hangs; the watching rank then prints one line and aborts the
job (``MPI_Abort``) rather than wait forever.
"""

import atexit
import contextlib
import hashlib
import json
import math
import numbers
import os
import pickle
import sys
import threading
import time
import weakref

import numpy as np

from ..backends import collective
from .launcher import launcher_size

DEFAULT_BUCKET_BYTES = 0
"""Gradients of consecutive layers summed by one collective, up to this many bytes: 0, one collective
per layer (on the CPU of docs/performance.md no bucket size beat another beyond noise)."""
DEFAULT_TIMEOUT = 120.0
"""Seconds an MPI call may wait for the other ranks before the job is aborted."""
PEER_LOST = 4
"""Exit status of a rank that gave up waiting for the others."""
DRAIN_SECONDS = 5.0
"""Seconds a rank that an exception ends waits for the sums it has queued before it ends the job."""
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
    launched, timeout = launcher_size(), _seconds(timeout)  # refused alike with one process and with several
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
        said = f"bucket_bytes must be an integer >= 0 (0: one collective per layer); got {bucket_bytes!r}"
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, numbers.Integral):
            raise TypeError(said)
        if bucket_bytes < 0:
            raise ValueError(said)
        self.bucket_bytes = int(bucket_bytes)
        self.unpaired = None  # why the ranks' collectives no longer pair up (``unpair``), or None

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
        """Return once every rank has called it; a rank that waits sleeps, and leaves the cores to the others."""

    def use_own_device(self, backend):
        """Make this rank's own GPU current (its local rank, modulo the GPUs of its machine) when
        ``backend`` is ``"cupy"``: one GPU per process, as NCCL demands ("Duplicate GPU detected"). Every
        command calls it before it creates a CuPy backend, whose streams belong to the device current then."""
        if backend == "cupy":
            collective.use_local_device(self.local_rank)

    def engine(self, backend):
        """The callable that sums a flat gradient buffer of ``backend`` in place on the communication
        stream (``backends.collective``)."""
        raise RuntimeError("a one-process Communicator sums nothing")

    def watch(self, what):
        """A context around a call that waits for the other ranks (``what`` names it)."""
        return contextlib.nullcontext()

    def abort(self, status, quiet=False):
        """End every rank of the job with exit status ``status``; ``quiet``: without MPI's own line about it
        (the caller has said why)."""
        _flush()
        os._exit(status)

    # -- built on them --------------------------------------------------------------------------------

    def unpair(self, why):
        """Mark the ranks' collectives as no longer paired: ``why``, a step that failed on this rank's streams, skipped
        its sums, in which the other ranks wait. The first mark stands."""
        self.unpaired = self.unpaired or why

    def check_paired(self):
        """Raise a RuntimeError once ``unpair`` has marked this communicator: a later sum of this rank would pair with
        the other ranks' sums of the failed step, so no network sums over it again."""
        if self.unpaired:
            raise RuntimeError(f"{self.unpaired}, and its sums of the gradients, in which the other ranks wait, "
                               "never left it: a later step's would pair with theirs, so no network sums over this "
                               "communicator again; end the job (a rank left waiting gives up after the "
                               "communicator's timeout) and resume it from its last checkpoint")

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
        that rank unless every rank failed alike, as the first of ``kinds`` it is of, which must be built from one
        message. No collective may run inside the block (a rank that failed before it would never join it)."""
        if self.size == 1:
            yield
            return
        failure = None
        try:
            yield
        except kinds as error:  # raised again as the kind it is of: NumPy's MemoryError takes more than a message
            failure = (next(kind for kind in kinds if isinstance(error, kind)), str(error))
        failures = self.allgather(failure)
        failed = [(rank, f) for rank, f in enumerate(failures) if f is not None]
        if failed:
            rank, (kind, message) = failed[0]
            alike = len(failed) == self.size and all(f == failed[0][1] for _, f in failed)
            raised = kind(message if alike else f"rank {rank}: {message}")
            raised.every_rank = True  # every rank raises it: nobody is left waiting
            try:
                raise raised
            finally:
                del raised  # held here, it would hold its traceback's frames and what they hold

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

    Collectives that a NumPy backend's communication stream runs during a step go over a duplicate of
    ``comm`` of that backend's own (``engine``), so that they never mix with those the program's thread runs (loss
    sums, broadcasts) or another backend's. Every call that waits for the other ranks is watched
    (``timeout``).
    """

    def __init__(self, comm, name="leapfrog_gpu", timeout=DEFAULT_TIMEOUT, bucket_bytes=DEFAULT_BUCKET_BYTES):
        super().__init__(bucket_bytes)
        from mpi4py import MPI

        self._mpi, self._comm = MPI, comm
        self.rank, self.size, self.name, self.timeout = comm.Get_rank(), comm.Get_size(), name, _seconds(timeout)
        self._watchdog = _Watchdog(self.timeout, self._give_up)
        with self.watch("setting up MPI"):
            node = comm.Split_type(MPI.COMM_TYPE_SHARED)
            self.local_rank = node.Get_rank()
            node.Free()
            parting = comm.Dup()  # the ranks' barrier at exit (``_drain``), apart from every other call
        self._made, self._nccl = [], None  # _made: (weak reference to the NumPy backend it serves, engine), in order
        self._callers = []  # the threads that call those engines: the backends' communication streams
        atexit.register(_drain, self._made, self._callers, self.abort, parting)  # before mpi4py's MPI_Finalize

    def allgather(self, value):
        data = np.frombuffer(pickle.dumps(value), dtype=np.uint8)
        sizes = np.zeros(self.size, dtype=np.int64)
        with self.watch("a gather over every rank"):
            _completed(self._comm.Iallgather(np.array([data.size], dtype=np.int64), sizes))
            gathered = np.empty(int(sizes.sum()), dtype=np.uint8)
            _completed(self._comm.Iallgatherv(data, [gathered, sizes]))
        return [pickle.loads(part) for part in np.split(gathered, np.cumsum(sizes)[:-1])]

    def bcast(self, value):
        data = np.frombuffer(pickle.dumps(value), dtype=np.uint8) if self.rank == 0 else None
        size = np.array([0 if data is None else data.size], dtype=np.int64)
        with self.watch("a broadcast from rank 0"):
            _completed(self._comm.Ibcast(size, root=0))
            data = np.empty(int(size[0]), dtype=np.uint8) if data is None else data
            _completed(self._comm.Ibcast(data, root=0))
        return value if self.rank == 0 else pickle.loads(data)

    def broadcast(self, arrays):
        with self.watch("the broadcast of rank 0's parameters"):
            _completed(*[self._comm.Ibcast(array, root=0) for array in arrays])

    def sum(self, values):
        array = np.array(values, dtype=np.float64)
        with self.watch("the sum of a metric over every rank"):
            _completed(self._comm.Iallreduce(self._mpi.IN_PLACE, array, op=self._mpi.SUM))
        return array

    def barrier(self):
        with self.watch("a barrier"):
            _completed(self._comm.Ibarrier())

    def engine(self, backend):
        """NCCL for CuPy, one communicator that every CuPy backend shares (each enqueues its sums from the program's
        thread, in program order on every rank), its unique id broadcast from rank 0. MPI for the NumPy backend, over
        a duplicate of the communicator of the backend's own, made when its first network joins (every rank alike):
        the communication streams of two backends, threads, would reach their sums in another order on another rank.
        The duplicate of a backend stopped (or gone) on every rank serves the next."""
        if backend.name == "cupy":
            if self._nccl is None:
                unique_id = self.bcast(collective.nccl_unique_id() if self.rank == 0 else None)
                with self.watch("setting up NCCL"):
                    self._nccl = collective.NcclSum(backend.xp, self.size, self.rank, unique_id)
            return self._nccl
        engine = next((engine for served, engine in self._made if served() is backend), None)
        if engine is None:
            idle = [i for i, (served, _) in enumerate(self._made) if getattr(served(), "stopped", True)]
            common = set.intersection(*map(set, self.allgather(idle)))  # on every rank alike
            slot = min(common) if common else len(self._made)
            if common:
                engine = self._made[slot][1]
            else:
                with self.watch("duplicating the communicator"):
                    engine = collective.MpiSum(self._comm.Dup())
            self._made[slot:slot + 1] = [(weakref.ref(backend), engine)]
            self._callers.append(backend.comm_stream().thread)  # None: the backend runs its streams on the caller
        return engine

    def watch(self, what):
        return self._watchdog.watch(what)

    def abort(self, status, quiet=False):
        _flush()
        time.sleep(ABORT_GRACE)
        if quiet:  # MPI_Abort writes its own line to stderr
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
        self._comm.Abort(status)

    def _give_up(self, what):
        print(f"{self.name}: error: rank {self.rank} of {self.size}: {what} has waited {self.timeout:g} s for the "
              "other ranks: one of them died, failed or hangs; stopping the job", file=sys.stderr, flush=True)
        self.abort(PEER_LOST)


class _Watchdog:
    """Calls ``expire(what)`` from its own thread once a watched call has run for ``timeout`` seconds (a thread
    blocked inside MPI cannot be interrupted otherwise); the thread ends once no call is watched."""

    def __init__(self, timeout, expire):
        self.timeout, self._expire = timeout, expire
        self._lock, self._open, self._thread = threading.Lock(), {}, None

    @contextlib.contextmanager
    def watch(self, what):
        token = object()
        with self._lock:
            self._open[token] = (time.monotonic() + self.timeout, what)
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="leapfrog-watchdog", daemon=True)
                with contextlib.suppress(RuntimeError):  # Python 3.12.0-1 start none at exit: the call goes unwatched
                    thread.start()
                    self._thread = thread
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
                if not self._open:
                    self._thread = None
                    return
            if late:
                self._expire(late[0])
                return


def _seconds(timeout):
    """``timeout`` as a float of seconds > 0 (inf: never give up); a TypeError for no number, else a ValueError."""
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds > 0; got {timeout!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be a number of seconds > 0; got {timeout!r}")
    return float(timeout)


def _drain(made, callers, abort, parting):
    """At exit, before MPI is finalized: the backends that ``made`` serves finish their queued sums (a stream still in
    MPI as the process ends crashes it) and the streams of those released end (``callers``); then the ranks meet in a
    barrier over ``parting``. A program that an exception ends may have queued other sums than the others, which may
    wait in calls it never joins: its streams get ``DRAIN_SECONDS``, and so do the others to reach the barrier (they
    failed alike, or ended); else the job is ended (``abort``, the traceback printed)."""
    failed = getattr(sys, "last_value", None) is not None  # set as an uncaught exception is printed
    for served, _ in made:
        if (backend := served()) is None:
            continue
        if failed:
            backend.release()  # no wait: its threads end behind what they have queued, waited for below
        else:
            backend.close()
    for thread in callers:
        if thread is not None:
            thread.join(DRAIN_SECONDS if failed else None)
            if thread.is_alive():
                abort(1, quiet=True)
    if not _completed(parting.Ibarrier(), within=DRAIN_SECONDS if failed else math.inf):
        abort(1, quiet=True)


def _flush():
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _completed(*requests, within=math.inf):
    """Wait for the collectives ``requests``, asleep between tests: the cores go to the ranks still working, and Ctrl-C
    is raised at once, between two tests, where a blocking collective would hold it until every rank joins (every
    collective of the program's thread waits so: ``allgather`` and ``bcast`` send their pickles as bytes). False
    where they are not done ``within`` seconds."""
    end = time.monotonic() + within
    while requests and not type(requests[0]).Testall(list(requests)):
        if time.monotonic() > end:
            return False
        time.sleep(1e-3)
    return True
