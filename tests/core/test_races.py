"""The race detector (``tests/harness/races.py``) over every schedule of every network: two SGD steps enqueued back
to back, and no two launches that nothing orders touch one buffer where one of them writes it. On the NumPy
backend and on the CuPy stand-in, eager and as a graph, alone and summing across two mirrored ranks, at
several k; and the optimizers with a state (momentum, Adam), fused, in the one-pass sweep and not, at B = 4
and B = 1 (where the host forms nabla_w inside its compiled updates), whose state only its unit's update
touches; every optimizer's rules with ``check_finite=True``, on every chain and across ranks. Then each race
it must find, planted, found and named: a removed wait of docs/design.md §2 and §5, workers sharing one scratch
buffer, and the one-pass sweep streaming through a worker's scratch."""

import numpy as np
import pytest

from helpers import install_standin, patched_ops
from leapfrog_gpu import (BPTT, SGD, Adam, AdamW, DagDoubling, DagJacobi, Leapfrog, LevelSets, NaumovJacobi, NaumovRNN,
                          NaumovScan, RNN, Sequential, TimeScan, Wavefront)
from leapfrog_gpu.backends import ops_numpy
from leapfrog_gpu.core import plan
from leapfrog_gpu.core.handoff import Handoff
from leapfrog_gpu.mlp import plan as mlp_plan
from leapfrog_gpu.mlp.plan import MLPPlan
from leapfrog_gpu.parallel.reducer import Reducer
from networks import IN, NAMES, OUT, Mirror, network, network_batch
from races import Recorder, buffer_names, host_backend, races, report

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # the stand-in probes 1 / x on 0


def schedules(name):
    """Every schedule ``name`` runs, plain and fused: the leapfrog at k = 1, 2, 3 (and calibrated, "auto"), the
    others at k = 1 and 2 (and 0 where they take it); the MLP's one-pass backward too."""
    leapfrogs = [Leapfrog(k, fused=fused) for k in (1, 2, 3) for fused in (False, True)]
    if name == "MLP":
        return [Sequential(), Sequential(fused=True), Sequential(one_pass=True), *leapfrogs,
                *(Leapfrog(k, one_pass=True) for k in (1, 2, 3)), Leapfrog("auto"), Leapfrog("auto", fused=True),
                NaumovScan(k=1), NaumovScan(k=2, fused=True), NaumovJacobi(k=1), NaumovJacobi(k=2, fused=True),
                NaumovJacobi(warm_start=True, tol=1e-3)]
    if name == "RNN":
        return [BPTT(), BPTT(fused=True), *leapfrogs, Wavefront(k=0), Wavefront(k=1), Wavefront(k=2, fused=True),
                TimeScan(k=1), TimeScan(k=2, fused=True), NaumovRNN(k=1), NaumovRNN(k=2, fused=True)]
    return [Sequential(), Sequential(fused=True), *leapfrogs, LevelSets(k=1), LevelSets(k=2, fused=True),
            DagJacobi(k=1), DagJacobi(k=2, fused=True), DagDoubling(k=1), DagDoubling(k=2, fused=True)]


def runs_on(backend, name, schedule, mode):
    """Whether the network ``name`` runs ``schedule`` in ``mode`` on ``backend`` (what it refuses is tested
    where it is refused); "kernels" is the CuPy backend's chain on our kernels, for the MLP."""
    if backend == "cupy" and (schedule.one_pass or type(schedule) in (NaumovScan, NaumovJacobi)):
        return False
    if mode == "graph":
        refused = getattr(schedule, "warm_start", False) or schedule.k == "auto" or backend == "cupy" and name != "MLP"
        return not refused
    if mode == "kernels":
        return backend == "cupy" and name == "MLP"
    return mode != "ranks" or not schedule.fused


CASES = [(backend, name, schedule, mode) for backend in ("numpy", "cupy")
         for mode in ("eager", "graph", "ranks", "kernels") for name in NAMES for schedule in schedules(name)
         if runs_on(backend, name, schedule, mode)]


OPTIMIZERS = {"momentum": SGD(0.5, momentum=0.9, nesterov=True, weight_decay=0.01), "adam": Adam(0.01),
              "decay": SGD(0.5, weight_decay=0.01)}
OPTIMIZER_CASES = [(backend, name, schedule, mode, kind) for backend in ("numpy", "cupy") for mode in ("eager", "graph")
                   for name in NAMES for schedule in (Sequential(), Leapfrog(2), Leapfrog(2, fused=True),
                                                      *([Leapfrog(2, one_pass=True)] if name == "MLP" else []))
                   for kind in OPTIMIZERS if runs_on(backend, name, schedule, mode)]


def recorded_steps(backend, name, schedule, mode="eager", prepare=None, optimizer=None, sizes=(4, 4), **options):
    """The races of SGD steps of network ``name`` on ``backend`` under ``schedule``, enqueued back to back, one a
    batch of each of ``sizes`` (``mode``: "eager", or "kernels" on a backend of that chain; "graph"; "ranks": as
    rank 1 of two mirrored ranks, bucketed at k = 2, then a third step on one column, of which this rank's share
    is empty), and what the recorder could not see (``Recorder.unseen``, ``Recorder.strays``); ``prepare(net)``
    runs before the steps; ``optimizer``: the steps' (None: ``SGD(0.5)``); ``options``: the network's."""
    comm = Mirror(rank=1, bucket_bytes=1 << 20 if schedule.k == 2 else 0) if mode == "ranks" else None
    with Recorder(backend) as recorder:
        net = network(name, backend, comm=comm, **options)
        if prepare is not None:
            prepare(net)
        for step, size in enumerate((4, 4, 1) if comm else sizes):
            net.train_step(*network_batch(name, size, seed=step), optimizer or SGD(0.5), schedule,
                           graph=mode == "graph")
        net.synchronize()
    names = buffer_names(net)
    return races(recorder, names), recorder.unseen(names) + recorder.strays()


def cupy_backend(monkeypatch, chain="cublas"):
    install_standin(monkeypatch, "main-first")
    from leapfrog_gpu.backends.cuda import CupyBackend

    return CupyBackend(chain)


@pytest.mark.parametrize("backend, name, schedule, mode", CASES,
                         ids=[f"{b}-{n}-{s!r}-{m}".replace(" ", "") for b, n, s, m in CASES])
def test_no_two_launches_race(backend, name, schedule, mode, monkeypatch):
    chain = "kernels" if mode == "kernels" else "cublas"
    with (host_backend() if backend == "numpy" else cupy_backend(monkeypatch, chain)) as made:
        found, unseen = recorded_steps(made, name, schedule, mode)
    assert not found, f"{len(found)} races:\n{report(found)}"
    assert not unseen, "\n".join(unseen)


@pytest.mark.parametrize("schedule", [Leapfrog(1), Leapfrog(2, fused=True)], ids=repr)
def test_no_product_of_a_layer_of_width_one_strays_onto_the_main_stream(schedule, monkeypatch):
    """A width-1 layer's nabla_u is one contiguous row, a product nvmath's handle takes: made on a worker, it must
    run there, not on the handle's stream (the main one), which nothing orders with the worker's update."""
    with cupy_backend(monkeypatch) as made:
        with Recorder(made) as recorder:
            net = RNN([IN, 1, 1, OUT], output="every", seed=1, backend=made)
            for step in range(2):
                net.train_step(*network_batch("RNN", 4, seed=step), Adam(0.01), schedule)
            net.synchronize()
        names = buffer_names(net)
        found, unseen = races(recorder, names), recorder.unseen(names) + recorder.strays()
    assert not found, f"{len(found)} races:\n{report(found)}"
    assert not unseen, "\n".join(unseen)


GATED_SCHEDULES = [BPTT(), Leapfrog(1), Leapfrog(2, fused=True), Leapfrog(3)]


@pytest.mark.parametrize("optimizer", [SGD(0.5), Adam(0.01)], ids=["sgd", "adam"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("schedule", GATED_SCHEDULES, ids=repr)
def test_no_two_launches_of_a_gated_cell_race_on_the_cupy_backend(cell, schedule, optimizer, monkeypatch):
    """Two steps of a GRU and an LSTM on the stand-in, their steps on kernels/gates.cu."""
    with cupy_backend(monkeypatch) as made:
        with Recorder(made) as recorder:
            net = RNN([IN, 6, 5, OUT], cell=cell, output="every", seed=1, backend=made)
            for step in range(2):
                net.train_step(*network_batch("RNN", 4, seed=step), optimizer, schedule)
            net.synchronize()
        names = buffer_names(net)
        found, unseen = races(recorder, names), recorder.unseen(names) + recorder.strays()
    assert not found, f"{len(found)} races:\n{report(found)}"
    assert not unseen, "\n".join(unseen)


@pytest.mark.parametrize("backend, name, schedule, mode, kind", OPTIMIZER_CASES,
                         ids=[f"{b}-{n}-{s!r}-{m}-{k}".replace(" ", "") for b, n, s, m, k in OPTIMIZER_CASES])
def test_no_two_launches_of_an_optimizer_step_race(backend, name, schedule, mode, kind, monkeypatch):
    with host_backend() if backend == "numpy" else cupy_backend(monkeypatch) as made:
        found, unseen = recorded_steps(made, name, schedule, mode, optimizer=OPTIMIZERS[kind], sizes=(4, 4, 1, 1))
    assert not found, f"{len(found)} races:\n{report(found)}"
    assert not unseen, "\n".join(unseen)


def test_an_update_without_momentum_is_no_writer_of_its_gradient(monkeypatch):
    """SGD with weight decay and no momentum on one worker and a reader of the same gradient on another: both only
    read it, so no race (the update's kernel once took the gradient in place of the buffer it does not touch)."""
    with cupy_backend(monkeypatch) as made, Recorder(made) as recorder:
        ops, xp = made.ops, made.xp
        nabla, w, other, controls = xp.ones(16), xp.zeros(16), xp.zeros(16), xp.zeros(8)
        first, second = made.workers(2)
        made.launch(first, "decayed update", ops.momentum_update, w, nabla, None, controls, 0.0, 0.0, False, 0.01)
        made.launch(second, "plain update", ops.sgd_update, other, nabla, controls, None)
        made.synchronize()
    assert not (found := races(recorder)), report(found)


CHECKED_OPTIMIZERS = {"momentum-dampened": SGD(0.5, momentum=0.9, dampening=0.5, weight_decay=0.01),
                      "adamw": AdamW(0.01)}
CHECKED_CASES = [(backend, name, mode, kind) for backend in ("numpy", "cupy")
                 for mode in ("eager", "graph", "ranks", "kernels") for name in NAMES for kind in CHECKED_OPTIMIZERS
                 if runs_on(backend, name, Leapfrog(2), mode)]


@pytest.mark.parametrize("backend, name, mode, kind", CHECKED_CASES,
                         ids=[f"{b}-{n}-{m}-{k}" for b, n, m, k in CHECKED_CASES])
def test_no_two_launches_of_a_checked_optimizer_step_race(backend, name, mode, kind, monkeypatch):
    """``check_finite=True`` (its check, then the update and ``step_done``, each reading the step's controls) with
    the optimizers' other rules, on every chain, summing across ranks too."""
    chain = "kernels" if mode == "kernels" else "cublas"
    with host_backend() if backend == "numpy" else cupy_backend(monkeypatch, chain) as made:
        found, unseen = recorded_steps(made, name, Leapfrog(2), mode, optimizer=CHECKED_OPTIMIZERS[kind],
                                       sizes=(4, 4, 1, 1), check_finite=True)
    assert not found, f"{len(found)} races:\n{report(found)}"
    assert not unseen, "\n".join(unseen)


@pytest.mark.parametrize("backend", ["numpy", "cupy"])
def test_an_optimizer_update_waiting_for_its_own_delta_is_reported(monkeypatch, backend):
    """The fused Adam update of w^3 (and its moments) behind E_3 instead of E_2: it writes w^3 while the chain
    reads it for delta^2."""
    monkeypatch.setattr(plan.Plan, "last_reader", lambda self, l: l)
    with host_backend() if backend == "numpy" else cupy_backend(monkeypatch) as made:
        found = [str(r) for r in recorded_steps(made, "MLP", Leapfrog(2, fused=True), optimizer=Adam(0.01))[0]]
    assert race("update[3] #1 on worker1", True, "w[3]", "delta[2] #1 on main", False) in found


def test_an_inline_optimizer_update_waiting_for_its_own_delta_is_reported(monkeypatch):
    """At B = 1 on the host the fused Adam update of w^3 is one compiled pass (``update_w[3]``), nabla_w formed
    inside it: behind E_3 instead of E_2 it too writes w^3 while the chain reads it for delta^2."""
    monkeypatch.setattr(plan.Plan, "last_reader", lambda self, l: l)
    with host_backend() as made:
        found = [str(r) for r in recorded_steps(made, "MLP", Leapfrog(2, fused=True), optimizer=Adam(0.01),
                                                sizes=(1,))[0]]
    assert race("update_w[3] #1 on worker1", True, "w[3]", "delta[2] #1 on main", False) in found


# -- each race, planted, reported by name ----------------------------------------------------------------


def planted(monkeypatch, backend, name, schedule, mode="eager", prepare=None):
    """The report's lines of ``recorded_steps`` on "numpy" or "cupy" (the stand-in)."""
    with (host_backend() if backend == "numpy" else cupy_backend(monkeypatch)) as made:
        return [str(race) for race in recorded_steps(made, name, schedule, mode, prepare)[0]]


def race(first, writes, buffer, second, second_writes=False):
    """A line of the report: ``first`` (a launch, "delta[3] #1 on main") ``writes`` (or reads) ``buffer``,
    which ``second`` reads (or writes)."""
    verbs = {True: "writes", False: "reads"}
    return f"{first} {verbs[writes]} {buffer} and {second} {verbs[second_writes]} it, with no event between them"


BOTH = pytest.mark.parametrize("backend", ["numpy", "cupy"])
WORKER_READS = {  # with no wait, a worker reads what the chain writes
    "MLP": race("delta[3] #1 on main", True, "delta[3]", "gradients[3] #1 on worker1"),
    "RNN": race("delta[3] #1 on main", True, "delta[3]", "nabla_w[3] #1 on worker1"),
    "DagNet": race("delta[g] #2 on main", True, "g[g]", "gradients[g] #2 on worker0"),
}


@BOTH
def test_a_worker_that_does_not_wait_for_its_unit_is_reported(monkeypatch, backend, network_name):
    """docs/design.md §2, read after write: the worker reads delta^l before the chain has written it."""
    monkeypatch.setattr(Handoff, "wait", lambda self, worker, unit: None)
    assert WORKER_READS[network_name] in planted(monkeypatch, backend, network_name, Leapfrog(2))


JOINS = {  # with no join, the update reads a gradient a worker writes, the next pass rewrites what it reads
    "MLP": [race("gradients[3] #1 on worker1", True, "nabla_w[3]", "update[3] #1 on main"),
            race("gradients[2] #1 on worker0", False, "a[1]", "copy_in #3 on main", True)],
    "RNN": [race("nabla_w[3] #1 on worker1", True, "nabla_w[3]", "update[3] #1 on main"),
            race("nabla_w[2] #1 on worker0", False, "a[1]", "copy_in #3 on main", True)],
    "DagNet": [race("gradients[h] #1 on worker0", False, "x", "copy_in #3 on main", True)],
}


@BOTH
def test_a_missing_join_is_reported(monkeypatch, backend, network_name):
    """docs/design.md §2, write after read at the join."""
    monkeypatch.setattr(Handoff, "join", lambda self: None)
    found = planted(monkeypatch, backend, network_name, Leapfrog(2))
    assert set(JOINS[network_name]) <= set(found), "\n".join(found)


@BOTH
def test_a_fused_update_waiting_for_its_own_delta_is_reported(monkeypatch, backend, network_name):
    """docs/design.md §2, the fused update's write after read: w^l updated while the chain still reads it
    for delta^{l-1}. A DAG hands a fused update off behind the node's own products, its last read, and
    never asks ``last_reader``: nothing to report there."""
    monkeypatch.setattr(plan.Plan, "last_reader", lambda self, l: l)
    found = planted(monkeypatch, backend, network_name, Leapfrog(2, fused=True))
    update = {"MLP": "fused_update[3] #1 on worker1", "RNN": "update[3] #1 on worker1"}.get(network_name)
    assert found == [] if update is None else race(update, True, "w[3]", "delta[2] #1 on main", False) in found


@BOTH
def test_a_captured_fused_update_waiting_for_its_own_delta_is_reported(monkeypatch, backend):
    """The same race in the graph a step captures (its launches are the second of their names): the
    recorder reads the captured launches, and on host streams what they touch when the graph is launched."""
    monkeypatch.setattr(plan.Plan, "last_reader", lambda self, l: l)
    found = planted(monkeypatch, backend, "MLP", Leapfrog(2, fused=True), "graph")
    assert race("fused_update[3] #2 on worker1", True, "w[3]", "delta[2] #2 on main", False) in found


def test_a_one_pass_worker_that_does_not_wait_is_reported(monkeypatch):
    monkeypatch.setattr(Handoff, "wait", lambda self, worker, unit: None)
    found = planted(monkeypatch, "numpy", "MLP", Leapfrog(2, one_pass=True))
    assert race("delta[3]+update[4] #1 on main", True, "delta[3]", "nabla_b[3] #1 on worker1") in found
    assert race("eta / B #1 on main", True, "controls.array", "update_b[3] #1 on worker1") in found


def test_a_one_pass_step_without_the_join_is_reported(monkeypatch):
    monkeypatch.setattr(Handoff, "join", lambda self: None)
    found = planted(monkeypatch, "numpy", "MLP", Leapfrog(2, one_pass=True))
    assert race("update_b[3] #1 on worker1", True, "b[3]", "z[3] #2 on main") in found


def test_one_pass_workers_sharing_one_scratch_are_reported(monkeypatch):
    """The workers' updates of b^l, each through the scratch of layer 2: two workers write it at once, which
    no interleaving of whole launches shows."""
    def share(net):
        plan = net.plan(4)
        plan.scratch = dict.fromkeys(plan.scratch, plan.scratch[2])

    found = planted(monkeypatch, "numpy", "MLP", Leapfrog(2, one_pass=True), prepare=share)
    assert race("update_b[5] #1 on worker1", True, "scratch[2]", "update_b[4] #1 on worker0", True) in found
    assert all(" scratch[2] " in line for line in found), "\n".join(found)


@pytest.mark.parametrize("event, line", [
    ("S_", race("delta[5] #1 on main", True, "delta[5]", "delta[4]+update[5] rows 1:2 #1 on worker0")),
    ("H_", race("delta[3]+update[4] rows 2:4 #1 on worker0", True, "sweep_part", "delta[3] #1 on main"))])
def test_a_sweep_in_halves_missing_a_wait_is_reported(monkeypatch, event, line):
    """An optimizer's sweep at B = 1 in two halves of w's rows: the helper's half not waiting for the chain (S_),
    or the chain adding the helper's part of (5) before it is written (H_)."""
    monkeypatch.setattr(MLPPlan, "event", lambda self, name: self.backend.event(name) if name.startswith(event)
                        else plan.Plan.event(self, name))
    with host_backend() as made:
        found = [str(r) for r in recorded_steps(made, "MLP", Leapfrog(2, one_pass=True), optimizer=Adam(0.01),
                                                sizes=(1,))[0]]
    assert line in found, "\n".join(found)


HALVED_CASES = [(kind, mode) for kind in OPTIMIZERS for mode in ("eager", "graph")]


@pytest.mark.parametrize("kind, mode", HALVED_CASES, ids=[f"{kind}-{mode}" for kind, mode in HALVED_CASES])
def test_no_two_launches_of_an_update_in_halves_race(monkeypatch, kind, mode):
    """Under one worker every layer's update in halves (``MLPPlan.halved``, its least length patched to two
    elements): the worker's bottom half behind the last reader, the main stream's top half behind G_l, once its
    chain is done."""
    monkeypatch.setattr(mlp_plan, "HALVED", 2)
    with host_backend() as made:
        found, unseen = recorded_steps(made, "MLP", Leapfrog(1, fused=True), mode, optimizer=OPTIMIZERS[kind],
                                       sizes=(4, 4, 1, 1))
    assert not found, f"{len(found)} races:\n{report(found)}"
    assert not unseen, "\n".join(unseen)


def test_a_top_half_that_does_not_wait_for_its_gradients_is_reported(monkeypatch):
    """The main stream's half of an update not waiting for G_l: it reads nabla_w^l while the worker writes it."""
    monkeypatch.setattr(mlp_plan, "HALVED", 2)
    monkeypatch.setattr(MLPPlan, "event", lambda self, name: self.backend.event(name) if name.startswith("G_")
                        else plan.Plan.event(self, name))
    with host_backend() as made:
        found = [str(r) for r in recorded_steps(made, "MLP", Leapfrog(1, fused=True), optimizer=Adam(0.01))[0]]
    assert race("gradients[3] #1 on worker0", True, "nabla_w[3]", "update[3] top half #1 on main") in found, \
        "\n".join(found)


def sweep_through(scratch):
    """The one-pass sweep of (5) and the update of w^{l+1}, each block's update through ``scratch``."""
    def sweep(delta, w_next, delta_next, sp, a, controls):
        rows = max(1, scratch.size // w_next.shape[1])
        for r0 in range(0, w_next.shape[0], rows):
            w, block_delta = w_next[r0:r0 + rows], delta_next[r0:r0 + rows]
            ops_numpy.matmul(delta, w.T, block_delta, beta=1.0 if r0 else 0.0)
            block = scratch[: w.size].reshape(w.shape)
            ops_numpy.nabla_w(block, block_delta, a)
            np.multiply(block, controls[0], out=block)
            np.subtract(w, block, out=w)
        ops_numpy.delta_hidden(delta, sp)

    return sweep


def test_the_one_pass_sweep_streaming_through_a_workers_scratch_is_reported(monkeypatch):
    """The sweep of delta^l streaming the update of w^{l+1} through scratch[l+1], which the worker of layer
    l+1 updates b^{l+1} through at the same time."""
    def error_update(self, l, controls):
        self.backend.launch(self.main, f"delta[{l}]+update[{l + 1}]", sweep_through(self.scratch[l + 1]),
                            self.delta[l], self.w[l + 1], self.delta[l + 1], self.sp[l], self.a[l], controls.array)

    monkeypatch.setattr(MLPPlan, "error_update", error_update)
    found = planted(monkeypatch, "numpy", "MLP", Leapfrog(2, one_pass=True))
    assert found[0] == race("update_b[5] #1 on worker1", True, "scratch[5]", "delta[4]+update[5] #1 on main", True)
    assert all(" scratch[" in line for line in found), "\n".join(found)


@BOTH
def test_a_sum_across_ranks_that_does_not_wait_for_its_gradients_is_reported(monkeypatch, backend, network_name):
    """docs/design.md §5, read after write: the communication stream sums a gradient a worker still writes."""
    monkeypatch.setattr(Reducer, "wait_for_gradients", lambda self, unit: None)
    found = planted(monkeypatch, backend, network_name, Leapfrog(1), "ranks")
    gradient = {"MLP": "gradients[3]", "RNN": "nabla_w[3]", "DagNet": "gradients[g]"}[network_name]
    buffer = {"MLP": "nabla_w[3]", "RNN": "nabla_w[3]", "DagNet": "reducer.views[g][w]"}[network_name]
    assert any(line.startswith(f"{gradient} #1 on worker0 writes {buffer} and allreduce[") for line in found), found


@BOTH
def test_an_update_that_does_not_wait_for_the_sums_is_reported(monkeypatch, backend, network_name):
    """docs/design.md §5: the update reads a gradient the communication stream still sums."""
    monkeypatch.setattr(Reducer, "join", lambda self: None)
    found = planted(monkeypatch, backend, network_name, Leapfrog(1), "ranks")
    unit, buffer = {"MLP": ("2", "nabla_w[2]"), "RNN": ("2", "nabla_w[2]"),
                    "DagNet": ("h", "reducer.views[h][w]")}[network_name]
    assert race(f"allreduce[{unit}] #1 on comm", True, buffer, f"update[{unit}] #1 on main") in found, found


def test_an_op_the_recorder_cannot_see_into_is_named():
    """An op that reaches its arrays around NumPy's dispatch (as a C call would) touches nothing the recorder
    sees: the grid's check of what every op was given and did not touch names it."""
    def nabla_b(nabla_b, delta):
        np.sum(np.asarray(delta), axis=1, out=np.asarray(nabla_b))

    with host_backend() as backend:
        backend.ops = patched_ops(nabla_b=nabla_b)
        with Recorder(backend) as recorder:
            net = network("MLP", backend)
            net.sgd_step(*network_batch("MLP"), 0.5, Leapfrog(2, fused=True))
            net.synchronize()
        unseen = recorder.unseen(buffer_names(net))
    assert unseen[:2] == ["nabla_b[5] #1 on worker1 touched nothing of nabla_b[5]",
                          "nabla_b[5] #1 on worker1 touched nothing of delta[5]"], unseen


def test_work_a_launch_enqueues_on_another_stream_is_named(monkeypatch):
    """On the stand-in a launch's work goes on its stream, made current; work it puts on another (as a cuBLAS
    handle bound to the main stream would) is not ordered as the launch is: named, not counted as its."""
    with cupy_backend(monkeypatch) as backend:
        with Recorder(backend) as recorder:
            worker, x = backend.workers(1)[0], backend.xp.zeros(3)

            def elsewhere():
                with backend.main:
                    x.fill(1)

            backend.launch(worker, "elsewhere", elsewhere)
            backend.synchronize()
    assert recorder.strays() == ["elsewhere #1 on worker0 enqueued fill on main"]
    assert recorder.launches()[0].accesses == []
