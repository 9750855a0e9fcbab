"""Which MPI communicator a step's sums go over, run by every rank under
``mpiexec -n 2 python tests/harness/mpi_comm_cases.py CASE OUT``; ``test_comm_duplicate.py`` reads what each rank
writes to ``OUT/rank{r}.json`` (and ``OUT/rank{r}.npz``).

The program's communicator is ``MPI.COMM_WORLD`` behind ``Recording``, which logs every call made on it,
or on the duplicates made from it, with the thread that made it and how that communicator compares to
``MPI.COMM_WORLD`` (``MPI.Comm.Compare``). Cases:

``calls``       two steps; the log.
``concurrent``  a step, then one whose sums are in flight (rank 1: started, waiting for rank 0) or held back
                (rank 0: its communication stream blocked) while the program's thread sums and gathers
                over the world, then one more; what the sum and the gather gave, and the parameters.
``two_backends`` two networks on two backends stepped in turn, then a third on a new backend once the first's
                is closed; the duplicates made, and the parameters.
"""

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

from leapfrog_gpu import MLP, Leapfrog
from leapfrog_gpu.backends.host import NumpyBackend

SIZES = [7, 13, 5, 11, 3]
BATCH = 6
ETA = 0.5
SEED = 5


def data(steps=2):
    """The global batches of a run: the same on every rank and for the one-process reference."""
    rng = np.random.default_rng(11)
    return [(rng.random((SIZES[0], BATCH)), rng.uniform(0.05, 0.95, (SIZES[-1], BATCH))) for _ in range(steps)]


class Recording:
    """An mpi4py communicator whose every call goes to ``calls`` as ``[how it compares to COMM_WORLD,
    method, whether the program's thread made it]``, after one entry of how it compares to itself;
    ``Dup()`` returns a ``Recording`` too."""

    def __init__(self, comm, calls):
        from mpi4py import MPI

        names = {MPI.IDENT: "IDENT", MPI.CONGRUENT: "CONGRUENT", MPI.SIMILAR: "SIMILAR", MPI.UNEQUAL: "UNEQUAL"}
        self._comm, self._calls = comm, calls
        self._versus_world = names[MPI.Comm.Compare(comm, MPI.COMM_WORLD)]
        calls.append([self._versus_world, f"Compare(itself): {names[MPI.Comm.Compare(comm, comm)]}", True])

    def __getattr__(self, name):
        method = getattr(self._comm, name)
        if not callable(method):
            return method

        def call(*args, **kwargs):
            self._calls.append([self._versus_world, name, threading.current_thread() is threading.main_thread()])
            result = method(*args, **kwargs)
            return Recording(result, self._calls) if name == "Dup" else result

        return call


def calls(comm, log):
    with NumpyBackend() as backend, MLP(SIZES, dtype="float64", seed=SEED, backend=backend, comm=comm) as net:
        for x, y in data():
            net.sgd_step(x, y, ETA, Leapfrog(2))
        net.synchronize()
    return {"calls": log}, {}


def concurrent(comm):
    first, (x, y), third = data(3)
    with NumpyBackend() as backend, MLP(SIZES, dtype="float64", seed=SEED, backend=backend, comm=comm) as net:
        net.sgd_step(*first, ETA, Leapfrog(2))
        net.synchronize()  # the plan of this batch size exists: the steps below wait for nothing
        held = threading.Event()
        if comm.rank == 0:
            backend.launch(backend.comm_stream(), "held back", held.wait)
        net.sgd_step(x, y, ETA, Leapfrog(2))
        if comm.rank != 0:
            time.sleep(0.3)  # rank 1's sums have started, and wait for rank 0's
        told = {"sum": comm.sum([comm.rank + 1.0]).tolist(), "gather": comm.allgather(comm.rank)}
        held.set()
        net.sgd_step(*third, ETA, Leapfrog(2))
        parameters = {str(i): p for i, p in enumerate(net.weights + net.biases)}
    return told, parameters


def two_backends(comm, log):
    """Networks ``first`` and ``second``, each on a backend of its own, stepped in turn with this rank's own
    pauses between (the two communication streams reach their sums in another order on each rank), then
    ``third`` on a new backend once ``first``'s is closed; the parameters of each, and how many duplicates of the
    world were made."""
    pause, batches = np.random.default_rng(comm.rank), data(2 * TURNS)
    parameters = {}
    with NumpyBackend() as other:
        with NumpyBackend() as backend:
            first = MLP(SIZES, dtype="float64", seed=SEED, backend=backend, comm=comm)
            second = MLP(SIZES, dtype="float64", seed=SEED + 1, backend=other, comm=comm)
            for turn in range(TURNS):
                first.sgd_step(*batches[turn], ETA, Leapfrog(2))
                time.sleep(pause.random() * 2e-3)
                second.sgd_step(*batches[TURNS + turn], ETA, Leapfrog(2))
            parameters.update(named("first", first))
        with NumpyBackend() as backend, MLP(SIZES, dtype="float64", seed=SEED + 2, backend=backend, comm=comm) as third:
            third.sgd_step(*batches[0], ETA, Leapfrog(2))
            parameters.update({**named("third", third), **named("second", second)})
    return {"duplicates": sum(what == "Dup" for _, what, _ in log)}, parameters


TURNS = 12
"""Steps of each network in ``two_backends``."""


def named(name, net):
    return {f"{name}/{i}": p for i, p in enumerate(net.weights + net.biases)}


def main(case, out):
    from mpi4py import MPI

    from leapfrog_gpu.parallel.comm import MpiCommunicator

    log = []
    comm = MpiCommunicator(Recording(MPI.COMM_WORLD, log), timeout=30)
    told, parameters = {"calls": lambda: calls(comm, log), "concurrent": lambda: concurrent(comm),
                        "two_backends": lambda: two_backends(comm, log)}[case]()
    np.savez(Path(out) / f"rank{comm.rank}.npz", **parameters)
    (Path(out) / f"rank{comm.rank}.json").write_text(json.dumps(told))


if __name__ == "__main__":
    main(*sys.argv[1:])
