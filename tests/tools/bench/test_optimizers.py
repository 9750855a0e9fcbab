"""leapfrog-bench --optimizer: a heading and rows per optimizer, ours beside torch.optim's (a fused step torch
refuses is a row that says so), the verdicts; and PyTorch's anchor step is the same update as ours."""

import json

import numpy as np
import pytest

from helpers import bench_table, run_bench
from leapfrog_gpu.mlp.network import MLP
from leapfrog_gpu.tools.bench import measure as bench_measure, torch_anchor
from leapfrog_gpu.core.torch_io import INSTALL

torch = pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})",
                            exc_type=ImportError)

TINY = ["--backend", "numpy", "--sizes", "12", "--layers", "3", "--batch", "1,3", "--k", "2", "--blas-threads", "1",
        "--repeats", "2", "--warmup", "1"]


def _run(tmp_path, *more):
    """What the bench prints, what profiling/bench_table.py prints of its records (with the verdicts), and the
    records."""
    path = tmp_path / "r.json"
    out = run_bench(TINY + ["--optimizer", "sgd,momentum,adam,adamw", "--json", str(path), *more])
    return out, bench_table(path), json.loads(path.read_text())["records"]


def test_rows_for_each_optimizer_ours_and_torch_optims(tmp_path):
    out, judged, records = _run(tmp_path, "--graph")
    for name in bench_measure.OPTIMIZERS:
        rows = [r for r in records if r["optimizer"] == name]
        ours = {(r["schedule"], r["graph"]) for r in rows if not r["schedule"].startswith("torch")}
        assert ours == {(s, g) for s in ("sequential", "leapfrog") for g in (False, True)}
        fused = {f"torch-{name}-fused"} if torch_anchor.fused_refusal("cpu", bench_measure.OPTIMIZERS[name]) is None else set()
        assert {r["schedule"] for r in rows if r["schedule"].startswith("torch")} == (
            {f"torch-{name}-foreach"} | fused | ({"torch-autograd"} if name == "sgd" else set()))
        assert all(r["step_ms"]["median"] > 0 and r["step_speedup_vs_best_sequential"] > 0 for r in rows)
        if name != "sgd":
            assert f"N=12 L=3 B=1 float32, optimizer {name}" in out and f"torch-{name}-foreach" in out
            assert f"N=12 L=3 B=3 {name}: " in judged
    adam = next(r for r in records if r["optimizer"] == "adam" and r["schedule"] == "sequential")
    sgd = next(r for r in records if r["optimizer"] == "sgd" and r["schedule"] == "sequential")
    assert adam["bytes_per_step"] > sgd["bytes_per_step"]  # Adam's moments are read and written too
    assert "the best own step against PyTorch's best step by the same optimizer:" in judged


def test_a_fused_step_torch_refuses_is_a_row_that_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_anchor, "fused_refusal", lambda device, rule: "torch refuses fused=True here")
    out, judged, records = _run(tmp_path)
    refused = [r for r in records if "refused" in r]
    assert {(r["schedule"], r["B"]) for r in refused} == {(f"torch-{name}-fused", b) for name in bench_measure.OPTIMIZERS
                                                          for b in (1, 3)}
    assert all("step_ms" not in r for r in refused)
    assert out.count("refused: torch refuses fused=True here") == len(refused)
    assert "N=12 L=3 B=1 adam: " in judged and "as fast as torch-adam-foreach" in judged


def test_one_pass_rows_for_every_optimizer(tmp_path):
    out, _, records = _run(tmp_path, "--one-pass")
    for name in bench_measure.OPTIMIZERS:
        assert {r["schedule"] for r in records if r["optimizer"] == name and r["one_pass"]} == {"sequential",
                                                                                                  "leapfrog"}
    assert "sequential+one-pass" in out and "leapfrog+one-pass" in out


def test_a_bad_optimizer_is_refused():
    with pytest.raises(SystemExit):
        run_bench(TINY + ["--optimizer", "lion"])


@pytest.mark.parametrize("name", list(bench_measure.OPTIMIZERS))
@pytest.mark.parametrize("how", ["foreach", "fused"])
def test_the_anchors_step_is_our_update(name, how):
    """Same network, same batch, float64: PyTorch's step by torch.optim leaves the parameters ours leave, to
    1e-12, at each of three steps (Adam's bias corrections change with t)."""
    sizes, rule = [5, 7, 3], bench_measure.OPTIMIZERS[name]
    if how == "fused" and torch_anchor.fused_refusal("cpu", rule):
        pytest.skip(f"torch lacks fused {name} on the CPU")
    x, y = bench_measure.host_batch(sizes, 4, "float64", seed=1)
    with MLP(sizes, activation="sigmoid", dtype="float64", backend="numpy", seed=1) as net:
        start = [p.detach().numpy().copy() for p in net.to_torch().parameters()]
        anchor = torch_anchor.Step(net.to_torch(), x, y, rule, how)
        for _ in range(3):
            anchor.step()
            net.train_step(x, y, rule)
            ours = net.parameters()
            theirs = [p.detach().numpy() for p in anchor.params]
            for i, l in enumerate((2, 3)):
                np.testing.assert_allclose(ours[l]["w"], theirs[2 * i], rtol=0, atol=1e-12)
                np.testing.assert_allclose(ours[l]["b"], theirs[2 * i + 1], rtol=0, atol=1e-12)
        assert not np.allclose(start[0], theirs[0], rtol=0, atol=1e-9)  # the step moved them
