"""leapfrog-bench --model dag on tiny DAGs: every record field, a row for every backward schedule, speed-ups
over the sequential record of the same network, refusals, the table within 100 columns, the progress bar,
bad options, Ctrl-C and the CuPy stand-in (its forward solvers, by profiling/dag_bench.py:
tests/tools/test_bench_scripts.py)."""

import io
import json
import sys

import pytest

from helpers import STANDIN_ORDERS, install_standin
from leapfrog_gpu.backends import get_backend
from leapfrog_gpu.tools.bench import command as bench, dag as bench_dag
from leapfrog_gpu.tools.schedules import schedule_names

FIELDS = ("kind", "N", "D", "B", "k", "dtype", "backend", "pass", "schedule", "repeats", "ms", "speedup", "stats")
STATS = ("rounds", "flops", "bytes", "memory_bytes", "sequential_rounds", "sequential_flops", "sequential_bytes")
TINY = ["--backend", "numpy", "--kind", "residual,dense", "--sizes", "3,5", "--depths", "4", "--batch", "2",
        "--repeats", "3", "--warmup", "1"]
ROWS = [("backward", name) for name in schedule_names("dag")]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("dag") / "r.json"
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", out)
        assert bench.main(["--model", "dag", *TINY, "--json", str(path)]) == 0
    return out.getvalue(), json.loads(path.read_text())


def test_records_hold_every_field_and_a_row_for_every_solver_and_schedule(report):
    records = report[1]["records"]
    networks = {(r["kind"], r["N"]) for r in records}
    assert networks == {("residual", 3), ("residual", 5), ("dense", 3), ("dense", 5)}
    for network in networks:
        rows = [r for r in records if (r["kind"], r["N"]) == network]
        assert [(r["pass"], r["schedule"]) for r in rows] == ROWS
    for r in records:
        for field in FIELDS:
            assert field in r, field
        for name in STATS:
            assert name in r["stats"], (r["schedule"], name)
        assert 0 < r["ms"]["p20"] <= r["ms"]["median"] <= r["ms"]["p80"]
        assert (r["D"], r["B"], r["k"], r["dtype"], r["backend"], r["repeats"]) == (4, 2, 2, "float32", "numpy", 3)
    assert report[1]["command"].startswith("leapfrog-bench --model dag --backend numpy")


def test_the_rows_report_the_schedules_rounds(report):
    rows = {(r["kind"], r["N"], r["pass"], r["schedule"]): r["stats"] for r in report[1]["records"]}
    stats = {key[2:]: value for key, value in rows.items() if key[:2] == ("residual", 3)}
    assert stats["backward", "sequential"]["rounds"] == 4 and stats["backward", "level-sets"]["rounds"] == 4
    assert stats["backward", "dag-jacobi"]["sweeps"] == 4 and stats["backward", "dag-doubling"]["rounds"] == 2


def test_speedups_are_over_the_sequential_record_of_the_same_network(report):
    records = report[1]["records"]
    for r in records:
        base, = [s for s in records if s["schedule"] == "sequential"
                 and all(s[key] == r[key] for key in ("kind", "N", "D", "B", "pass"))]
        assert r["speedup"] == base["ms"]["median"] / r["ms"]["median"]


def _record(kind, N, pass_, schedule, median=None, **extra):
    record = {"kind": kind, "N": N, "D": 8, "B": 1, "k": 2, "dtype": "float32", "backend": "numpy", "pass": pass_,
              "schedule": schedule, "repeats": 3, **extra}
    if median is not None:
        record["ms"] = {"median": median, "p20": median, "p80": median}
    return record


def test_speedups_on_synthetic_records_match_each_to_its_own_network():
    records = [
        _record("residual", 16, "backward", "dag-jacobi", 6.0),
        _record("dense", 16, "backward", "sequential", 4.0),
        _record("residual", 16, "backward", "sequential", 2.0),
        _record("residual", 16, "forward", "forward-jacobi", 3.0),
        _record("residual", 16, "forward", "sequential", 0.5),
        _record("dense", 16, "backward", "dag-jacobi", 6.0),
        _record("residual", 64, "backward", "dag-jacobi", 5.0),  # its network has no sequential record
        _record("residual", 16, "backward", "dag-doubling", refused="needs 1 MiB"),
    ]
    speedups = [r.get("speedup") for r in bench_dag.with_speedups(records)]
    assert speedups == [1 / 3, 1.0, 1.0, 1 / 6, 1.0, 4 / 6, None, None]  # > 1: faster than sequential


def test_a_block_solver_over_the_memory_limit_or_the_depth_is_refused_before_allocating():
    with get_backend("numpy") as backend:
        refused = bench_dag.measure("residual", 3, 4, 2, backend, repeats=1, warmup=0, memory_limit=100)
        skipped = bench_dag.measure("residual", 3, 4, 2, backend, repeats=1, warmup=0, max_block_depth=3)
    for records, why in ((refused, "needs "), (skipped, "skipped: D > --max-block-depth 3")):
        out = {r["schedule"]: r for r in records if "refused" in r}
        assert sorted(out) == ["dag-doubling", "dag-jacobi"]
        for r in out.values():
            assert r["refused"].startswith(why) and r["stats"]["memory_bytes"] > 100 and "speedup" not in r
            assert len(bench_dag.format_row(r)) <= 100


def test_the_table_fits_100_columns(report):
    printed = report[0].splitlines()
    assert printed[:2] == [bench_dag.TITLE, bench_dag.HEADER]
    assert printed[2] == "residual DAG, N=3 D=4 B=2, float32, numpy, k=2"
    assert len(printed) == 2 + 4 * (1 + len(ROWS)) + len(bench_dag.FOOT.splitlines())
    widest = _record("residual", 4096, "forward", "forward-newton", 99999.9, speedup=123456.7,
                     stats={"rounds": 99999, "iterations": 9999, "flops": 1e12, "sequential_flops": 1.0,
                            "memory_bytes": 2**50})
    widest["ms"]["p80"] = 10 * widest["ms"]["median"]  # noisy: marked "!"
    refused = _record("dense", 4096, "backward", "dag-doubling", stats={"memory_bytes": 2**50},
                      refused=f"needs {2**30:.1f} MiB > --memory-limit 65536 MiB")
    lines = printed + [bench_dag.format_row(widest), bench_dag.format_row(refused)]
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)


def test_leapfrog_bench_model_dag_runs_it_and_the_progress_bar_goes_to_stderr(monkeypatch, capsys):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    argv = ["--model", "dag", "--backend", "numpy", "--sizes", "2", "--depths", "2", "--batch", "1", "--repeats", "1"]
    for quiet, shown in (([], True), (["--quiet"], False)):
        terminal = Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert bench.main(argv + quiet) == 0
        assert ("measuring" in terminal.getvalue()) == shown
        assert capsys.readouterr().out.startswith(f"{bench_dag.TITLE}\n{bench_dag.HEADER}\n")


@pytest.mark.parametrize("argv", [["--sizes", "0"], ["--depths", "x"], ["--kind", "tree"], ["--k", "0"],
                                  ["--repeats", "0"], ["--warmup", "-1"], ["--backend", "gpu"],
                                  ["--memory-limit", "0"], ["--json", "/no/such/folder/r.json"], ["--layers", "3"]])
def test_a_bad_option_exits_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(["--model", "dag", "--backend", "numpy"] + argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("leapfrog-bench --model dag: error: ")


def test_an_unknown_model_exits_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(["--model", "tree"])
    assert stop.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_ctrl_c_ends_a_run_with_exit_130_and_one_line(monkeypatch, capsys):
    measure, calls = bench_dag.measure, []

    def ctrl_c_at_the_second(*args, **options):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measure(*args, **options)

    monkeypatch.setattr(bench_dag, "measure", ctrl_c_at_the_second)
    assert bench.main(["--model", "dag", "--backend", "numpy", "--sizes", "2,3,4", "--depths", "2", "--batch", "1",
                       "--repeats", "1"]) == 130
    out, err = capsys.readouterr()
    assert err.splitlines()[1:] == ["leapfrog-bench --model dag: interrupted with 1 of 3 networks measured"]
    assert err.startswith("leapfrog-bench --model dag: about ") and " s left for 2 more networks" in err
    assert "N=2 D=2" in out and "N=3" not in out


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # the stand-in probes 1 / x on zeros
def test_the_cupy_backend_on_the_stand_in(monkeypatch, capsys):
    install_standin(monkeypatch, STANDIN_ORDERS[0])
    assert bench.main(["--model", "dag", "--backend", "cupy", "--sizes", "3", "--depths", "3", "--batch", "1",
                       "--repeats", "1", "--warmup", "0", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "residual DAG, N=3 D=3 B=1, float32, cupy, k=2" in out and out.count("x ") >= len(ROWS)
