"""``profiling/call_count.py`` on the CuPy stand-in: the calls
an eager step makes into CuPy equal what ``plan.py`` and the schedules enqueue, counted launch by launch
below (``expected``), so that a change in a step's launches, events or copies fails here; the counts
agree with the stand-in's own trace; and the counting leaves the backend and CuPy as it found them."""

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from helpers import STANDIN_ORDERS, batch, install_standin, schedule_id
from leapfrog_gpu import MLP, Leapfrog, Sequential

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "profiling"))
import call_count  # noqa: E402

SIZES = [5, 7, 4, 3]  # L = 4: three layers, l = 2..4


@pytest.fixture
def standin(monkeypatch):
    """The stand-in under one order: the counts do not depend on how its queues interleave."""
    return install_standin(monkeypatch, STANDIN_ORDERS[0])


def expected(L, schedule, chain="cublas", check_finite=False):
    """The ``call_count.Counts`` of one eager ``sgd_step``, from what it enqueues; n = L - 1 layers."""
    n, fused = L - 1, schedule.fused
    busy = len({l % schedule.k for l in range(2, L + 1)}) if schedule.k else 0  # workers that own a layer
    cublas = chain == "cublas"
    enter = (1  # Controls.set_rate: one launch, a fill of eta / B
             + n  # MLPPlan.forward: (2)(3) of each layer, one launch each
             + n  # MLPPlan.error: (4) for l = L, (5) below it, one launch each
             + (2 * n if fused else n)  # MLPPlan.gradients: (6)(7) in one launch; fused: nabla_b, then the update
             + (0 if fused else n)  # MLPPlan.update: w and b of each layer in one launch
             + (1 if check_finite else 0))  # MLPPlan.check_gradients: one launch for every gradient
    kernel = (n  # forward: bias_activation after cuBLAS, or forward_gemm/gemv
              + 1 + (n - 1)  # error: delta_output; delta_hidden after cuBLAS, or backward_gemm/gemv
              + (3 * n if fused else n)  # gradients: rank_update_bias/outer_bias; fused: bias_sum, sgd_update
                                         # of b, rank_update_sgd/outer_sgd
              + (0 if fused else n)  # update: sgd_update_layer, w and b in one kernel
              + (2 * n if check_finite else 0))  # check_finite of nabla_w and nabla_b per layer
    return call_count.Counts(
        matmul=(n + (n - 1)) if cublas else 0,  # (2) of each layer and (5) below L, on cuBLAS
        kernel=kernel,
        fill=1,  # Controls.set_rate's set_element
        copy=2,  # MLPPlan.load: x into a^1, y
        record=2 + (n + busy if schedule.k else 0),  # the staging buffers' copies; E_l of each layer, F_j
        wait=n + busy if schedule.k else 0,  # each worker waits E_l (E_{l-1} fused); main waits each F_j
        sync=2,  # each copy first waits for the copy out of its staging buffer two steps ago
        enter=enter,
    )


SCHEDULES = [Sequential(), Sequential(fused=True), Leapfrog(1), Leapfrog(2), Leapfrog(2, fused=True), Leapfrog(3),
             Leapfrog(5, fused=True)]


@pytest.mark.parametrize("chain", ["cublas", "kernels"])
@pytest.mark.parametrize("B", [1, 3], ids=lambda B: f"B={B}")
@pytest.mark.parametrize("schedule", SCHEDULES, ids=schedule_id)
def test_an_eager_step_calls_what_the_plan_and_the_schedule_enqueue(standin, schedule, B, chain):
    from leapfrog_gpu.backends.cuda import CupyBackend

    x, y = batch(SIZES, B)
    with CupyBackend(chain=chain) as backend, MLP(SIZES, dtype="float64", backend=backend) as net:
        assert call_count.count_step(net, x, y, schedule) == expected(len(SIZES), schedule, chain)


def test_the_check_of_the_gradients_is_one_launch_more(standin):
    x, y = batch(SIZES, 3)
    with MLP(SIZES, dtype="float64", backend="cupy", check_finite=True) as net:
        assert call_count.count_step(net, x, y, Leapfrog(2)) == expected(len(SIZES), Leapfrog(2), check_finite=True)


def test_the_counts_of_l_32_leapfrog_2(standin):
    """L = 32, Leapfrog(2): 61 matmuls, 124 raw launches, 35 records, 33 waits, 125 stream enters, 258
    calls; fused, 155 raw launches and 125 enters (the widths do not change a count). Before (6) went
    into the (7) kernel and w and b into one update kernel, the unfused step made 186 raw launches, 156
    enters and 320 calls (docs/performance.md)."""
    sizes = [4] * 32
    x, y = batch(sizes, 2)
    with MLP(sizes, dtype="float64", backend="cupy") as net:
        counts = call_count.count_step(net, x, y, Leapfrog(2))
        fused = call_count.count_step(net, x, y, Leapfrog(2, fused=True))
    assert (counts.matmul, counts.kernel, counts.record, counts.wait, counts.enter, counts.calls) == (61, 124, 35, 33,
                                                                                                      125, 258)
    assert (fused.kernel, fused.enter, fused.calls) == (155, 125, 289)
    assert counts == expected(32, Leapfrog(2)) and fused == expected(32, Leapfrog(2, fused=True))


def test_the_counts_agree_with_the_standins_trace(standin):
    """What the stand-in itself traced during the step: its raw kernel launches, records and waits."""
    x, y = batch(SIZES, 3)
    with MLP(SIZES, dtype="float64", backend="cupy") as net, call_count.counting(net.backend) as counts:
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        net.synchronize()
        counts.clear()
        start = len(standin.trace())
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        traced = [kind for kind, _, _ in standin.trace()[start:]]
        assert (counts["kernel"], counts["record"], counts["wait"]) == (
            traced.count("launch"), traced.count("record"), traced.count("wait"))
        net.synchronize()


def test_counting_leaves_the_backend_and_cupy_as_it_found_them(standin):
    from leapfrog_gpu.backends.cuda import CupyBackend

    stream_methods, event_methods = dict(vars(standin.Stream)), dict(vars(standin.Event))
    with CupyBackend() as backend:
        xp, ops = backend.xp, backend.ops
        with pytest.raises(RuntimeError, match="inside"), call_count.counting(backend) as counts:
            backend.launch(backend.main, "fill", backend.ops.set_element, backend.xp.zeros(2), 0, 1.0)
            assert backend.ops is not ops and counts["fill"] == 1 and counts["enter"] == 1
            raise RuntimeError("inside")
        assert backend.xp is xp and backend.ops is ops and "copy_in" not in vars(backend)
    assert dict(vars(standin.Stream)) == stream_methods and dict(vars(standin.Event)) == event_methods


def test_the_script_prints_a_table_within_100_columns_and_writes_the_counts(standin, tmp_path):
    path = tmp_path / "r.json"
    out = io.StringIO()
    with redirect_stdout(out):
        assert call_count.main(["--sizes", "4", "--layers", "4", "--batch", "2", "--k", "2", "--json", str(path)]) == 0
    out = out.getvalue()
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("host calls per eager step"))
    assert max(map(len, lines[start:])) <= 100
    written = json.loads(path.read_text())
    assert written["command"].startswith("python profiling/call_count.py --sizes 4") and written["date"].endswith(
        "+00:00") and written["machine"]["device"]  # the header docs/performance.md promises
    counts = written["call_counts"]
    assert [(r["schedule"], r["k"]) for r in counts] == [("sequential", 0), ("leapfrog", 2)]
    leapfrog = counts[1]
    assert {kind: leapfrog[kind] for kind in call_count.KINDS} == vars(expected(4, Leapfrog(2)))
    row = next(line for line in lines[start:] if line.startswith("leapfrog "))
    assert row.split()[1:] == [str(leapfrog[t]) for t in ("k", *call_count.TITLES)]


def test_the_script_counts_calls_into_cupy_only(capsys):
    with pytest.raises(SystemExit) as exit_:
        call_count.main(["--backend", "numpy"])
    assert exit_.value.code == 2 and capsys.readouterr().err.count("\n") == 1

