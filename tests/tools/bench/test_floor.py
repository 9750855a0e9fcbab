"""leapfrog-bench's floor per schedule and its one-pass rows: each record against the bytes of its own update,
the verdicts against PyTorch and the floor (profiling/verdicts.py), and PyTorch's steps with a fused optimizer."""

import json
import re
import sys
from pathlib import Path

import pytest

from helpers import bench_table, run_bench
from leapfrog_gpu import Leapfrog, Sequential
from leapfrog_gpu.backends import get_backend
from leapfrog_gpu.tools.bench import runner, torch_anchor, traffic
from leapfrog_gpu.core.torch_io import INSTALL

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "profiling"))
import verdicts  # noqa: E402

ONE_PASS = ["--backend", "numpy", "--sizes", "12", "--layers", "4", "--batch", "1,3", "--k", "2", "--blas-threads",
            "1,2", "--repeats", "2", "--warmup", "1", "--one-pass"]


def test_the_bytes_of_each_update():
    """Each weight matrix moves 6, 4 or 3 times a step; the rest of the traffic is the same."""
    sizes, batch, itemsize = [7, 5, 3], 2, 4
    weights = 5 * 7 + 3 * 5
    plain, fused, one_pass = (traffic.step_bytes(sizes, batch, itemsize, u) for u in ("plain", "fused", "one-pass"))
    assert plain == traffic.step_bytes(sizes, batch, itemsize)
    assert (plain - fused, fused - one_pass) == (2 * weights * itemsize, weights * itemsize)
    assert [traffic.update_of(s) for s in (Sequential(), Leapfrog(2, fused=True), Leapfrog(2, one_pass=True))] == [
        "plain", "fused", "one-pass"]


def test_one_pass_rows_and_their_floors(tmp_path):
    path = tmp_path / "r.json"
    stdout = run_bench(ONE_PASS + ["--no-torch", "--json", str(path)])
    records = json.loads(path.read_text())["records"]
    assert {(r["schedule"], r["k"], r["update"]) for r in records} == {
        ("sequential", 0, "plain"), ("leapfrog", 2, "plain"), ("sequential", 0, "one-pass"),
        ("leapfrog", 2, "one-pass")}
    for r in records:
        step_bytes = traffic.step_bytes([12] * 4, r["B"], 4, r["update"])
        assert r["bytes_per_step"] == step_bytes
        assert r["floor_ms"] == pytest.approx(step_bytes / (r["copy_gbps"] * 1e6))
        assert r["floor_speedup"] == pytest.approx(r["floor_ms"] / r["step_ms"]["median"])  # > 1: under the floor
        forward = sum((12 * 12 + 12 * r["B"] + 12 + 3 * 12 * r["B"]) * 4 for _ in range(3))  # (2)(3): w, a, b in; z, a, sp out
        assert r["forward_floor_ms"] == pytest.approx(forward / (r["copy_gbps"] * 1e6))
    for batch in (1, 3):  # one best sequential configuration per network, a plain one
        best = [r for r in records if r["B"] == batch and r["best_sequential"]]
        assert [(r["schedule"], r["one_pass"]) for r in best] == [("sequential", False)]
    assert "sequential+one-pass" in stdout and "leapfrog+one-pass" in stdout and "vs floor" in stdout
    assert re.search(r"\(speed-up vs its floor [\d.]+x\), per layer f1", " ".join(stdout.split()))  # the forward's
    judged = bench_table(path)
    judged = " ".join(judged[judged.index("the best step against PyTorch"):].split())  # lines joined
    assert "N=12 L=4 B=1:" in judged and "(target <= 1.3x" in judged and "N=12 L=4 B=3:" in judged


def test_the_verdicts_name_every_ratio_and_whether_it_is_met():
    def record(schedule, ms, floor, B=1, **more):
        return {"N": 8, "L": 3, "B": B, "schedule": schedule, "k": 0, "step_ms": {"median": ms}, "floor_ms": floor,
                "graph": False, **more}

    lines = verdicts.floor_verdicts([
        record("sequential", 2.0, 1.0, one_pass=True), record("torch-autograd", 4.0, 2.0),
        record("torch-sgd-fused", 2.5, 2.0), record("torch-compile", 3.0, 2.0), record("torch-compile", 1.0, 2.0),
        record("sequential", 5.0, 1.0, B=64), record("torch-sgd-foreach", 5.5, 2.0, B=64)]).splitlines()
    assert lines[1] == ("N=8 L=3 B=1: sequential+one-pass k=0 2 ms; 1.25x as fast as torch-sgd-fused 2.5 ms "
                        "(target >= 1.5x, NOT MET); 0.50x as fast as torch-compile 1 ms; 2.00x its bytes floor 1 ms "
                        "(target <= 1.3x, NOT MET)")
    assert lines[2] == ("N=8 L=3 B=64: sequential k=0 5 ms; 1.10x as fast as torch-sgd-foreach 5.5 ms (target >= 1.2x, "
                        "NOT MET); 5.00x its bytes floor 1 ms")


@pytest.mark.parametrize("given", [["--optimizer", "adam"], ["--optimizer=adam"],
                                   ["--one-pass", "--optimizer=sgd,adam"]])
def test_a_run_gets_the_verdicts_its_command_asks_for_in_either_spelling(given):
    """``--optimizer adam`` and ``--optimizer=adam`` alike ask for the optimizer's verdict (argparse takes both)."""
    def record(schedule, ms, optimizer="adam"):
        return {"N": 8, "L": 3, "B": 1, "schedule": schedule, "k": 0, "step_ms": {"median": ms}, "floor_ms": 1.0,
                "graph": False, "optimizer": optimizer, "one_pass": schedule == "sequential", "blas_threads": 1}

    records = [record("sequential", 2.0), record("torch-adam-fused", 4.0), record("sequential", 1.0, "sgd"),
               record("torch-sgd-fused", 3.0, "sgd")]
    judged = verdicts.verdicts(" ".join(["leapfrog-bench", "--sizes", "8", *given]), records)
    assert "sequential+one-pass k=0 blas=1 2 ms, 2.00x as fast as torch-adam-fused threads=1 4 ms (target >= 1.5x)" \
        in judged
    assert ("its bytes floor" in judged) == ("--one-pass" in given)
    assert "the best own step" not in verdicts.verdicts("leapfrog-bench --optimizers-file=x", records)


def test_torch_steps_with_each_optimizer(tmp_path):
    pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    from leapfrog_gpu import MLP
    from leapfrog_gpu.tools.bench.measure import OPTIMIZERS, host_batch

    sgd, (x, y) = OPTIMIZERS["sgd"], host_batch([5, 7, 3], 4, "float64")
    fused = torch_anchor.fused_refusal("cpu", sgd) is None
    with MLP([5, 7, 3], dtype="float64", backend="numpy") as net:
        for update in torch_anchor.UPDATES[:2] + torch_anchor.UPDATES[2:] * fused:
            anchor = torch_anchor.Step(net.to_torch(), x, y, sgd, update)
            with get_backend("numpy") as backend:
                step = runner.interleaved(backend, {update: anchor.step}, 2)[update]["ms"]
            backward = anchor.backward_ms(2)
            assert step.shape == backward.shape == (2,) and (step > 0).all()
        for update, rule in (("adam", sgd), ("loop", OPTIMIZERS["adam"])):
            with pytest.raises(ValueError, match="update must be one of"):
                torch_anchor.Step(net.to_torch(), x, y, rule, update)
    path = tmp_path / "r.json"
    run_bench(ONE_PASS + ["--json", str(path)])
    records = json.loads(path.read_text())["records"]
    torch = [r for r in records if r["schedule"].startswith("torch")]
    fused = {"torch-sgd-fused"} if torch_anchor.fused_refusal("cpu", OPTIMIZERS["sgd"]) is None else set()
    names = {"torch-autograd", "torch-sgd-foreach"} | fused
    ours = {r["blas_threads"] for r in records if not r["schedule"].startswith("torch")}
    assert {(r["schedule"], r["blas_threads"]) for r in torch} == {(n, t) for n in names for t in ours}  # as ours
    copies = {r["blas_threads"]: r["copy_gbps"] for r in records
              if r["schedule"] == "sequential" and not r["graph"] and not r["one_pass"]}
    assert copies[1] != copies[2]  # each thread count's copy, measured apart
    for r in torch:  # PyTorch writes nabla_w and reads it again: the plain step's floor, at its own threads' GB/s
        assert r["update"] == "plain" and r["floor_ms"] > 0 and r["floor_speedup"] > 0
        assert r["copy_gbps"] == copies[r["blas_threads"]]
        assert r["floor_ms"] == pytest.approx(r["bytes_per_step"] / (copies[r["blas_threads"]] * 1e6))

