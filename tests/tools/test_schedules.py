"""Each network's schedules by name (``leapfrog_gpu.tools.schedules``): the names, the schedules they make,
the one-line refusal, and every bench (``leapfrog-bench --model mlp``, ``rnn``; profiling/dag_bench.py) taking
exactly those names."""

import re
import sys
from pathlib import Path

import pytest

from leapfrog_gpu import BPTT, DagDoubling, DagJacobi, LevelSets, Leapfrog, NaumovJacobi, NaumovRNN, NaumovScan
from leapfrog_gpu import Sequential, TimeScan, Wavefront
from leapfrog_gpu.tools.bench import command as bench
from leapfrog_gpu.tools.schedules import make_schedule, make_solver, names_type, refusal, schedule_names, takes_k

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "profiling"))

import dag_bench  # noqa: E402

NAMES = {
    "mlp": {"sequential": Sequential, "leapfrog": Leapfrog, "naumov-scan": NaumovScan, "naumov-jacobi": NaumovJacobi},
    "rnn": {"bptt": BPTT, "leapfrog": Leapfrog, "wavefront": Wavefront, "timescan": TimeScan, "naumov-rnn": NaumovRNN},
    "dag": {"sequential": Sequential, "leapfrog": Leapfrog, "level-sets": LevelSets, "dag-jacobi": DagJacobi,
            "dag-doubling": DagDoubling},
}
"""What ``leapfrog-train --schedule`` and ``leapfrog-bench --schedule`` take, per ``--model``, baseline first."""
BOUNDED = {"naumov-scan", "naumov-jacobi", "timescan", "naumov-rnn", "dag-jacobi", "dag-doubling"}
"""The names whose schedules hold buffers past the weights', and take the commands' memory limit."""
TINY = {"mlp": ["--sizes", "6", "--layers", "4", "--batch", "1", "--k", "2", "--blas-threads", "1", "--no-torch"],
        "rnn": ["--sizes", "3", "--tau", "3", "--batch", "1", "--no-torch"],
        "dag": ["--sizes", "3", "--depths", "4", "--batch", "1", "--time", "backward"]}


@pytest.mark.parametrize("model", NAMES)
def test_each_name_makes_its_schedule_with_k_fused_and_a_memory_limit(model):
    assert schedule_names(model) == tuple(NAMES[model])
    for name, cls in NAMES[model].items():
        schedule = make_schedule(model, name, k=3, fused=True, memory_limit=12345)
        assert type(schedule) is cls and schedule.fused and takes_k(model, name) == (schedule.k == 3)
        assert getattr(schedule, "memory_limit", None) == (12345 if name in BOUNDED else None), name


@pytest.mark.parametrize("model, name, limited", [("dag", "jacobi", False), ("dag", "newton", True),
                                                  ("rnn", "newton", True), ("rnn", "quasi-newton", True)])
def test_each_forward_solver_takes_the_memory_limit_where_it_holds_buffers_and_is_made_without_it_else(
        model, name, limited):
    """``ForwardJacobi`` holds no buffers past the network's and takes no memory_limit: --memory-limit with it
    raised a TypeError out of leapfrog-train."""
    solver = make_solver(model, name, memory_limit=12345)
    assert getattr(solver, "memory_limit", None) == (12345 if limited else None)


def test_an_unknown_name_is_refused_in_one_line_naming_the_valid_ones():
    line = "unknown RNN schedule 'sequential'; choose from bptt, leapfrog, wavefront, timescan, naumov-rnn"
    assert refusal("rnn", "sequential") == line and refusal("rnn", "timescan") is None
    with pytest.raises(ValueError) as error:
        make_schedule("rnn", "sequential")
    assert str(error.value) == line
    with pytest.raises(ValueError, match="unknown model 'cnn'; choose from mlp, rnn, dag"):
        schedule_names("cnn")
    assert names_type("dag")("leapfrog,level-sets") == ["leapfrog", "level-sets"]


def test_one_pass_is_the_mlps_sequential_and_leapfrog_only():
    assert make_schedule("mlp", "leapfrog", k=2, one_pass=True).one_pass
    for model, name in (("mlp", "naumov-scan"), ("rnn", "leapfrog"), ("dag", "sequential")):
        with pytest.raises(ValueError, match="one_pass applies to the MLP's sequential and leapfrog"):
            make_schedule(model, name, one_pass=True)


def printed_schedules(model, out):
    """The schedule of each row that ``model``'s bench printed (the DAG's backward rows)."""
    if model == "mlp":
        return [line.split()[0].rstrip("*") for line in out.splitlines()
                if re.match(r"[a-z-]+\*? +\d+ +\d+ ", line)]
    if model == "rnn":  # the backward rows (the step rows' names start with "step ")
        return [line.split()[3] for line in out.splitlines() if re.match(r" +3 +3 +1 +(?!step )", line)]
    return [line.split()[1] for line in out.splitlines() if line.startswith("  backward ")]


def run(model, argv, tmp_path):
    """``leapfrog-bench --model model ...``, or the DAG's ``python profiling/dag_bench.py ...`` (its JSON in
    ``tmp_path``): the exit status."""
    if model == "dag":
        return dag_bench.main([*argv, "--json", str(tmp_path / "r.json")])
    return bench.main(["--model", model, *argv])


@pytest.mark.parametrize("model", NAMES)
def test_every_bench_takes_the_names_of_its_model_and_prints_them(model, capsys, tmp_path):
    """Every name of the model's schedules, and a row for each under that name; the baseline first."""
    argv = ["--backend", "numpy", "--schedule", ",".join(NAMES[model]), "--repeats", "1", *TINY[model]]
    assert run(model, argv, tmp_path) == 0
    assert printed_schedules(model, capsys.readouterr().out) == list(NAMES[model])


@pytest.mark.parametrize("model", NAMES)
def test_every_bench_refuses_another_models_name_with_the_same_line(model, capsys, tmp_path):
    other = {"mlp": "bptt", "rnn": "sequential", "dag": "naumov-scan"}[model]
    with pytest.raises(SystemExit) as stop:
        run(model, ["--backend", "numpy", "--schedule", f"leapfrog,{other}"], tmp_path)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.endswith(f"{refusal(model, other)}\n"), err
