"""Graph mode in the tools: ``leapfrog-train --graph``, ``leapfrog-bench --graph`` (graph rows beside the
eager ones, and the verdicts on the GPU targets, profiling/verdicts.py) and the PyTorch CUDA-graph anchor."""

import json
import sys
from pathlib import Path

import pytest

from helpers import SMALL, assert_bitwise_equal, cli, gpu, one_error_line, parameters, render_table, run_bench
from leapfrog_gpu.core.torch_io import INSTALL

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "profiling"))
import verdicts  # noqa: E402


@pytest.mark.parametrize("schedule", [["--schedule", "leapfrog"], ["--schedule", "sequential", "--fused"]])
def test_training_with_graph_is_bitwise_the_eager_training(tmp_path, capsys, schedule):
    """Two epochs of digits (45 steps each, the last batch of an epoch smaller: two graphs)."""
    eager, graph = tmp_path / "eager", tmp_path / "graph"
    assert cli(*SMALL, *schedule, "--epochs", 2, "--checkpoint-dir", eager) == 0
    assert cli(*SMALL, *schedule, "--epochs", 2, "--graph", "--checkpoint-dir", graph) == 0
    assert_bitwise_equal(parameters(eager)[0], parameters(graph)[0])
    assert parameters(graph)[1]["config"]["graph"] is True


def test_training_with_graph_says_so_and_stops_on_a_non_finite_gradient(tmp_path, capsys):
    assert cli("--hidden", "3x16", "--epochs", 1, "--graph") == 0
    assert "Leapfrog(k=2) as a graph |" in capsys.readouterr().out
    args = ["--hidden", "3x16", "--activation", "relu", "--cost", "quadratic", "--quiet", "--graph"]
    assert cli(*args, "--epochs", 2, "--lr", 1e20, "--check-finite") == 3
    assert "holds NaN or Inf; update refused, parameters unchanged" in one_error_line(capsys)


@pytest.fixture(scope="module")
def graph_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "r.json"
    stdout = run_bench(["--backend", "numpy", "--sizes", "20", "--layers", "4", "--batch", "1,3", "--k", "1,2",
                        "--schedule", "leapfrog,naumov-jacobi", "--blas-threads", "1", "--repeats", "3",
                        "--warmup", "1", "--no-torch", "--graph", "--json", str(path)])
    return stdout, json.loads(path.read_text())


def test_bench_graph_rows_beside_the_eager_ones(graph_report, tmp_path):
    stdout, report = graph_report
    records = report["records"]
    eager = [r for r in records if not r["graph"]]
    graph = [r for r in records if r["graph"]]
    assert [(r["N"], r["B"], r["schedule"], r["k"]) for r in graph] == [(r["N"], r["B"], r["schedule"], r["k"])
                                                                       for r in eager]
    for r in graph:
        twin = next(e for e in eager if (e["B"], e["schedule"], e["k"]) == (r["B"], r["schedule"], r["k"]))
        assert r["backward_ms"] is None and r["measured_saving"] is None and r["step_ms"]["median"] > 0
        assert r["graph_speedup"] == pytest.approx(twin["step_ms"]["median"] / r["step_ms"]["median"])
        sequential = next(s for s in graph if (s["B"], s["schedule"]) == (r["B"], "sequential"))
        assert r["step_speedup"] == pytest.approx(sequential["step_ms"]["median"] / r["step_ms"]["median"])
    assert "leapfrog[graph]" in stdout and "graph vs eager: the step vs the same eager step" in " ".join(stdout.split())
    judged, _ = render_table(report, tmp_path)  # profiling/bench_table.py, with the verdicts
    judged = judged[judged.index("graph mode against its GPU targets"):].split("\n\n")[0].splitlines()
    assert len(judged) == 3 and all("torch-autograd: not measured" in line for line in judged[1:])
    assert all("vs sequential[graph] (target >= 1.3x" in line and "the bytes floor" in line for line in judged[1:])


def test_bench_table_renders_graph_rows(graph_report, tmp_path):
    _, rows = render_table(graph_report[1], tmp_path)
    assert len(rows) == len(graph_report[1]["records"])
    assert sum(" graph |" in row for row in rows) == len(rows) // 2


def test_graph_verdicts_compare_with_every_baseline():
    def record(schedule, graph, ms, k=0):
        return {"N": 1024, "L": 32, "B": 32, "schedule": schedule, "graph": graph, "k": k, "fused": False,
                "auto": False, "best_sequential": False, "step_ms": {"median": ms}, "floor_ms": 0.5}

    records = [record("torch-autograd", False, 4.0), record("torch-cuda-graph", True, 1.2),
               record("sequential", True, 1.5), record("leapfrog", True, 1.25, k=2), record("leapfrog", True, 1.0, k=4)]
    (line,) = verdicts.graph_verdicts(records).splitlines()[1:]
    assert "k=4" in line and "4.00x vs torch-autograd (target >= 3.0x)" in line
    assert "1.20x vs torch-cuda-graph (target >= 1.5x, NOT MET)" in line
    assert "1.50x vs sequential[graph] (target >= 1.3x)" in line and "2.00x the bytes floor" in line


def test_the_torch_cuda_graph_anchor_needs_a_gpu():
    pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    from leapfrog_gpu import MLP
    from leapfrog_gpu.tools.bench import measure, torch_anchor

    x, y = measure.host_batch([5, 7, 3], 4, "float32")
    with MLP([5, 7, 3], backend="numpy") as net, pytest.raises(ValueError, match="graph=True needs a module on a CUDA"):
        torch_anchor.Step(net.to_torch(), x, y, measure.OPTIMIZERS["sgd"], graph=True)


@gpu
@pytest.mark.gpu
def test_the_torch_cuda_graph_anchor_trains_like_the_eager_one():
    """Replays of PyTorch's captured step move the parameters as its eager steps do; the bench times it."""
    pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    from leapfrog_gpu import MLP
    from leapfrog_gpu.backends import get_backend
    from leapfrog_gpu.tools.bench import measure, runner, torch_anchor

    x, y = measure.host_batch([33, 65, 17], 8, "float64")
    with get_backend("cupy") as backend, MLP([33, 65, 17], dtype="float64", backend=backend) as net:
        eager, graph = (torch_anchor.Step(net.to_torch(), x, y, measure.OPTIMIZERS["sgd"], graph=captured, warmup=3)
                        for captured in (False, True))
        assert graph.graph and graph.cuda and graph.params[0].is_cuda
        for _ in range(3 + 4):  # the warm-up ran three eager steps on the graphed copy
            eager.step()
        for _ in range(4):
            graph.step()
        for p, q in zip(eager.params, graph.params, strict=True):
            assert float((p - q).detach().abs().max()) < 1e-12
        assert float((eager.params[0] - net.to_torch()[0].weight).detach().abs().max()) > 0  # moved
        step = runner.interleaved(backend, {"graph": graph.step}, 3)["graph"]["ms"]
    assert step.shape == (3,) and (step > 0).all()
