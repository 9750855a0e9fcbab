"""Data-parallel training cases, run by every rank under ``mpiexec -n P python tests/mpi_cases.py OUT``.

Each rank trains every case of ``cases(P)`` and writes its parameters to ``OUT/rank{r}.npz`` (keys
``case/i``, weights then biases) and what it was told to ``OUT/rank{r}.json``; ``test_parallel.py``
compares the ranks with each other and with one process trained on the whole batches (``train``,
without a communicator). The cases are defined here once, for both sides.
"""

import json
import sys
from pathlib import Path

import numpy as np

from leapfrog_gpu import MLP, Leapfrog, NaumovJacobi, NaumovScan, Sequential
from leapfrog_gpu.backends.host import NumpyBackend

STEPS = 20
SMALL = [7, 13, 5, 11, 3]  # odd widths, depth 5
WIDE = [16, 300, 257, 10]  # sums of 150-600 KB: MPI's algorithms for long messages
BUCKETS = {"per-layer": 0, "400B": 400, "one": 1 << 30}
SCHEDULES = {"sequential": Sequential(), "leapfrog1": Leapfrog(1), "leapfrog2": Leapfrog(2), "leapfrog3": Leapfrog(3),
             "naumov-scan": NaumovScan(k=2), "naumov-jacobi": NaumovJacobi(k=2)}
ETA = 0.1  # at 0.5, float32 runs of tiny uneven batches drift 7e-5 apart in 20 steps; at 0.1, under 4e-7


def cases(ranks):
    """``{name: case}``; a case gives sizes, dtype, schedule, bucket and the global batch of each step:
    B = 3 per rank, or uneven batches and batches smaller than the ranks ("uneven"). In float64 every
    schedule meets every bucket setting; float32 repeats the plain two."""
    whole = [3 * ranks] * STEPS
    uneven = [3 * ranks + 1, 3 * ranks - 1, ranks - 1, 1] * (STEPS // 4)
    found = {}
    for dtype, schedules in (("float64", SCHEDULES), ("float32", ("sequential", "leapfrog2"))):
        for schedule in schedules:
            for bucket in BUCKETS:
                found[f"{dtype}/{schedule}/{bucket}"] = dict(sizes=SMALL, dtype=dtype, schedule=schedule,
                                                             bucket=bucket, batches=whole)
        found[f"{dtype}/leapfrog2/uneven"] = dict(sizes=SMALL, dtype=dtype, schedule="leapfrog2", bucket="400B",
                                                  batches=uneven)
        found[f"{dtype}/leapfrog2/wide"] = dict(sizes=WIDE, dtype=dtype, schedule="leapfrog2", bucket="400B",
                                                batches=[4 * ranks] * 6)
    found["float64/leapfrog3/chaos"] = dict(sizes=SMALL, dtype="float64", schedule="leapfrog3", bucket="400B",
                                            batches=uneven[:8], chaos=7)
    return found


def data(sizes, batches, dtype):
    """The global batches of a run: the same on every rank and for the one-process reference."""
    rng = np.random.default_rng(len(batches))
    for count in batches:
        yield (rng.random((sizes[0], count)).astype(dtype),
               rng.uniform(0.05, 0.95, (sizes[-1], count)).astype(dtype))


def train(case, comm=None, seed=5):
    """Train one case; return its weights and biases (host copies)."""
    backend = NumpyBackend(chaos=case.get("chaos"))
    with backend, MLP(case["sizes"], activation="tanh", dtype=case["dtype"], seed=seed, backend=backend,
                      comm=comm) as net:
        for x, y in data(case["sizes"], case["batches"], case["dtype"]):
            net.sgd_step(x, y, ETA, SCHEDULES[case["schedule"]])
        return [np.array(p) for p in net.weights + net.biases]


def main(out):
    from mpi4py import MPI

    from leapfrog_gpu.parallel.comm import MpiCommunicator

    world = MPI.COMM_WORLD
    rank, ranks = world.Get_rank(), world.Get_size()
    comms = {name: MpiCommunicator(world, timeout=60, bucket_bytes=size) for name, size in BUCKETS.items()}
    results, told = {}, {}
    for name, case in cases(ranks).items():
        seed = 5 if rank == 0 else 100 + rank  # every rank must start from rank 0's parameters
        for i, array in enumerate(train(case, comms[case["bucket"]], seed)):
            results[f"{name}/{i}"] = array
    try:  # a rank that builds another network is refused on every rank
        MLP(SMALL if rank == 0 else SMALL[:-1] + [4], backend="numpy", comm=comms["per-layer"])
    except ValueError as error:
        told["other network"] = str(error)
    np.savez(Path(out) / f"rank{rank}.npz", **results)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(told))


if __name__ == "__main__":
    main(sys.argv[1])
