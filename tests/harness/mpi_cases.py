"""Data-parallel training cases, run by every rank under ``mpiexec -n P python tests/harness/mpi_cases.py OUT``.

Each rank trains every case of ``cases(P)`` (an MLP, an RNN or a DagNet; by SGD or Adam, in eager steps or
as graphs, the update fused or not) and writes its parameters to
``OUT/rank{r}.npz`` (keys ``case/i``, the arrays of ``parameters()`` in order) and what it was told to
``OUT/rank{r}.json``; ``test_parallel.py``
compares the ranks with each other and with one process trained on the whole batches (``train``,
without a communicator). The cases are defined here once, for both sides.
"""

import json
import sys
from pathlib import Path

import numpy as np

from leapfrog_gpu import (RNN, MLP, SGD, Adam, DagJacobi, Leapfrog, LevelSets, NaumovJacobi, NaumovScan, Sequential,
                          TimeScan)
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.dag.network import residual

STEPS = 20
SMALL = [7, 13, 5, 11, 3]  # odd widths, depth 5
WIDE = [16, 300, 257, 10]  # sums of 150-600 KB: MPI's algorithms for long messages
RESIDUAL = [7, 9, 9, 9, 3]  # with a skip connection per hidden layer: a DAG with Add nodes
BUCKETS = {"per-layer": 0, "400B": 400, "one": 1 << 30}
SCHEDULES = {"sequential": Sequential(), "leapfrog1": Leapfrog(1), "leapfrog2": Leapfrog(2), "leapfrog3": Leapfrog(3),
             "naumov-scan": NaumovScan(k=2), "naumov-jacobi": NaumovJacobi(k=2), "time-scan": TimeScan(k=2),
             "level-sets": LevelSets(k=2), "dag-jacobi": DagJacobi(k=2), "leapfrog2-fused": Leapfrog(2, fused=True)}
TAU = 4
"""The RNN's sequence length: its batches are (TAU, n_1, B), its targets at every step (TAU, n_L, B)."""
ETA = 0.1  # at 0.5, float32 runs of tiny uneven batches drift 7e-5 apart in 20 steps; at 0.1, under 4e-7
OPTIMIZERS = {"sgd": SGD(ETA), "adam": Adam(0.01)}
STEP_MODES = {"fused": ("leapfrog2-fused", False), "graph": ("leapfrog2", True), "fused+graph": ("leapfrog2-fused", True)}
"""The schedule and graph mode of each way of running a step beside the eager, unfused one."""


def cases(ranks):
    """``{name: case}``; a case gives sizes, dtype, schedule, bucket and the global batch of each step:
    B = 3 per rank, or uneven batches and batches smaller than the ranks ("uneven"). In float64 every
    schedule meets every bucket setting; float32 repeats the plain two. Each network runs fused steps, graph
    steps and both (``STEP_MODES``), by SGD and by Adam, on 8 uneven batches."""
    whole = [3 * ranks] * STEPS
    uneven = [3 * ranks + 1, 3 * ranks - 1, ranks - 1, 1] * (STEPS // 4)
    found = {}
    mlp = ("sequential", "leapfrog1", "leapfrog2", "leapfrog3", "naumov-scan", "naumov-jacobi")
    for dtype, schedules in (("float64", mlp), ("float32", ("sequential", "leapfrog2"))):
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
    for network, schedules in (("rnn", ("leapfrog2", "time-scan")), ("dag", ("leapfrog2", "level-sets", "dag-jacobi"))):
        for schedule in schedules:
            for dtype in ("float64", "float32"):
                found[f"{network}/{dtype}/{schedule}/uneven"] = dict(
                    network=network, sizes=RESIDUAL if network == "dag" else SMALL, dtype=dtype, schedule=schedule,
                    bucket="400B", batches=uneven)
    for network, sizes in (("mlp", SMALL), ("rnn", SMALL), ("dag", RESIDUAL)):
        for mode, (schedule, graph) in STEP_MODES.items():
            for optimizer in OPTIMIZERS:
                found[f"{network}/float64/{mode}/{optimizer}"] = dict(
                    network=network, sizes=sizes, dtype="float64", schedule=schedule, graph=graph,
                    optimizer=optimizer, bucket="400B", batches=uneven[:8])
    return found


def data(sizes, batches, dtype, network="mlp"):
    """The global batches of a run: the same on every rank and for the one-process reference; sequences of
    ``TAU`` steps, with a target at each, for an RNN."""
    rng = np.random.default_rng(len(batches))
    steps = (TAU,) if network == "rnn" else ()
    for count in batches:
        yield (rng.random((*steps, sizes[0], count)).astype(dtype),
               rng.uniform(0.05, 0.95, (*steps, sizes[-1], count)).astype(dtype))


def network(case, seed, backend, comm):
    """The case's network: an MLP, an RNN with an output at every step, or a residual DagNet."""
    options = dict(activation="tanh", dtype=case["dtype"], seed=seed, backend=backend, comm=comm)
    kind = case.get("network", "mlp")
    if kind == "rnn":
        return RNN(case["sizes"], output="every", **options)
    if kind == "dag":
        return residual(case["sizes"], skip=1, **options)
    return MLP(case["sizes"], **options)


def train(case, comm=None, seed=5):
    """Train one case; return the arrays of its ``parameters()`` in order (host copies)."""
    backend = NumpyBackend(chaos=case.get("chaos"))
    with backend, network(case, seed, backend, comm) as net:
        for x, y in data(case["sizes"], case["batches"], case["dtype"], case.get("network", "mlp")):
            net.train_step(x, y, OPTIMIZERS[case.get("optimizer", "sgd")], SCHEDULES[case["schedule"]],
                           graph=case.get("graph", False))
        return [np.array(array) for named in net.parameters().values() for array in named.values()]


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
