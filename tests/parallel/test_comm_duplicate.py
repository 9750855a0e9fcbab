"""The sums of a step go over a duplicate of the program's communicator, never over the communicator
itself: under ``mpiexec`` (``tests/harness/mpi_comm_cases.py``), the communication stream's thread calls MPI only
on a communicator that compares ``CONGRUENT`` to ``COMM_WORLD`` (and ``IDENT`` to itself), the world only
the program's thread; and a sum and a gather the program's thread runs over the world while a step's
sums are in flight give what they should, as do the step's; and each backend sums over a duplicate of its own."""

import json
import sys

import numpy as np

import mpi_comm_cases
import mpirun
from leapfrog_gpu import MLP, Leapfrog

RANKS = 2

pytestmark = mpirun.needs_mpi


def run(case, tmp_path):
    """What each rank of ``mpi_comm_cases`` ``case`` wrote: ``[(told, parameters)]`` in rank order."""
    mpirun.run(RANKS, sys.executable, "tests/harness/mpi_comm_cases.py", case, tmp_path, timeout=90)
    return [(json.loads((tmp_path / f"rank{r}.json").read_text()), dict(np.load(tmp_path / f"rank{r}.npz")))
            for r in range(RANKS)]


def test_the_sums_of_a_step_go_over_a_duplicate_of_the_world(tmp_path):
    for rank, (told, _) in enumerate(run("calls", tmp_path)):
        calls = [tuple(call) for call in told["calls"]]
        assert {what for _, what, _ in calls if what.startswith("Compare(itself)")} == {"Compare(itself): IDENT"}
        off_the_program_thread = {(versus, what) for versus, what, program in calls if not program}
        assert off_the_program_thread == {("CONGRUENT", "Allreduce")}, (
            f"rank {rank}: MPI calls of the communication stream's thread, by how their communicator compares "
            f"to COMM_WORLD: {sorted(off_the_program_thread)}")


def test_collectives_of_the_program_while_sums_are_in_flight(tmp_path):
    ranks = run("concurrent", tmp_path)
    for rank, (told, _) in enumerate(ranks):
        assert told == {"sum": [3.0], "gather": [0, 1]}, f"rank {rank}: {told}"
    with MLP(mpi_comm_cases.SIZES, dtype="float64", seed=mpi_comm_cases.SEED, backend="numpy") as net:
        for x, y in mpi_comm_cases.data(3):
            net.sgd_step(x, y, mpi_comm_cases.ETA, Leapfrog(2))
        want = net.weights + net.biases
    for rank, (_, parameters) in enumerate(ranks):
        got = [parameters[str(i)] for i in range(len(want))]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=f"rank {rank}")


def test_each_backend_sums_over_its_own_duplicate(tmp_path):
    """Two networks on two backends, stepped in turn: each equals itself trained alone (over one duplicate, the
    two communication streams' sums met in another order on each rank: a network got the other's sums). A
    third backend, made once the first is closed, takes its duplicate: two made in all, and the communicator's own
    for its barrier at exit."""
    batches = mpi_comm_cases.data(2 * mpi_comm_cases.TURNS)
    runs = {"first": (0, batches[:mpi_comm_cases.TURNS]), "second": (1, batches[mpi_comm_cases.TURNS:]),
            "third": (2, batches[:1])}
    ranks = run("two_backends", tmp_path)
    for name, (seed, steps) in runs.items():
        with MLP(mpi_comm_cases.SIZES, dtype="float64", seed=mpi_comm_cases.SEED + seed, backend="numpy") as net:
            for x, y in steps:
                net.sgd_step(x, y, mpi_comm_cases.ETA, Leapfrog(2))
            want = net.weights + net.biases
        for rank, (told, parameters) in enumerate(ranks):
            assert told == {"duplicates": 3}, f"rank {rank}: {told}"
            for i, b in enumerate(want):
                np.testing.assert_allclose(parameters[f"{name}/{i}"], b, rtol=1e-12, atol=1e-14,
                                           err_msg=f"rank {rank}, {name}")
