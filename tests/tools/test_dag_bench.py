"""profiling/dag_bench.py, the DAG's benchmark, on tiny DAGs: every record field, a row for every backward
schedule and forward solver, speed-ups over the sequential record of the same pass and network, refusals, the
table within 100 columns, the progress bar, bad options, Ctrl-C and the CuPy stand-in."""

import datetime
import io
import json
import sys
from pathlib import Path

import pytest

from helpers import STANDIN_ORDERS, install_standin
from leapfrog_gpu.backends import get_backend
from leapfrog_gpu.tools.bench import runner
from leapfrog_gpu.tools.schedules import schedule_names

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "profiling"))

import dag_bench  # noqa: E402

FIELDS = ("kind", "N", "D", "B", "k", "dtype", "backend", "pass", "schedule", "repeats", "ms", "speedup", "stats")
STATS = ("rounds", "flops", "bytes", "memory_bytes", "sequential_rounds", "sequential_flops", "sequential_bytes")
TINY = ["--backend", "numpy", "--kind", "residual,dense", "--sizes", "3,5", "--depths", "4", "--batch", "2",
        "--repeats", "3", "--warmup", "1"]
ROWS = [("backward", name) for name in schedule_names("dag")]
FORWARD_ROWS = [("forward", "sequential"), ("forward", "forward-jacobi"), ("forward", "forward-newton")]
"""The forward rows, after the backward rows."""


def bench(argv, tmp_path):
    """``python profiling/dag_bench.py ...`` in this process, its JSON in ``tmp_path``: its exit status."""
    return dag_bench.main([*argv, "--json", str(tmp_path / "r.json")])


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("dag") / "r.json"
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", out)
        assert dag_bench.main([*TINY, "--json", str(path)]) == 0
    return out.getvalue(), json.loads(path.read_text())


def test_records_hold_every_field_and_a_row_for_every_solver_and_schedule(report):
    records = report[1]["records"]
    networks = {(r["kind"], r["N"]) for r in records}
    assert networks == {("residual", 3), ("residual", 5), ("dense", 3), ("dense", 5)}
    for network in networks:
        rows = [r for r in records if (r["kind"], r["N"]) == network]
        assert [(r["pass"], r["schedule"]) for r in rows] == ROWS + FORWARD_ROWS
    for r in records:
        for field in FIELDS:
            assert field in r, field
        for name in STATS:
            assert name in r["stats"], (r["schedule"], name)
        assert 0 < r["ms"]["p20"] <= r["ms"]["median"] <= r["ms"]["p80"]
        assert (r["D"], r["B"], r["k"], r["dtype"], r["backend"], r["repeats"]) == (4, 2, 2, "float32", "numpy", 3)
    assert report[1]["command"].startswith("python profiling/dag_bench.py --backend numpy")


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
    speedups = [r.get("speedup") for r in dag_bench.with_speedups(records)]
    assert speedups == [1 / 3, 1.0, 1.0, 1 / 6, 1.0, 4 / 6, None, None]  # > 1: faster than sequential


def test_the_table_gives_the_sequential_orders_time_over_each_rows(tmp_path, capsys):
    assert bench(["--sizes", "3", "--depths", "4", "--batch", "1", "--repeats", "2"], tmp_path) == 0
    title, header, _, *lines = capsys.readouterr().out.splitlines()
    assert title == dag_bench.TITLE and title.startswith("speed-up vs seq: ") and title.endswith("(> 1: faster)")
    assert "speed-up vs seq" in header
    records = json.loads((tmp_path / "r.json").read_text())["records"]
    base = {r["pass"]: r["ms"]["median"] for r in records if r["schedule"] == "sequential"}
    for line, r in zip(lines, records):
        cells = line.split()  # pass, schedule, median, [p20-p80], speed-up, ...
        assert cells[:2] == [r["pass"], r["schedule"]]
        assert cells[4] == runner.ratio(base[r["pass"]] / r["ms"]["median"])


def test_a_block_solver_over_the_memory_limit_or_the_depth_is_refused_before_allocating():
    with get_backend("numpy") as backend:
        refused = dag_bench.measure("residual", 3, 4, 2, backend, repeats=1, warmup=0, memory_limit=100)
        skipped = dag_bench.measure("residual", 3, 4, 2, backend, repeats=1, warmup=0, max_block_depth=3)
    for records, why in ((refused, "needs "), (skipped, "skipped: D > --max-block-depth 3")):
        out = {r["schedule"]: r for r in records if "refused" in r}
        assert sorted(out) == ["dag-doubling", "dag-jacobi", "forward-newton"]
        for r in out.values():
            assert r["refused"].startswith(why) and r["stats"]["memory_bytes"] > 100 and "speedup" not in r
            assert len(dag_bench.format_row(r)) <= 100


def test_the_forward_solvers_report_their_rounds_and_a_block_solver_is_refused_before_allocating():
    with get_backend("numpy") as backend:
        records = dag_bench.measure("residual", 3, 4, 2, backend, repeats=2, warmup=1, memory_limit=2**20)
        limited = dag_bench.measure("residual", 3, 4, 2, backend, repeats=1, warmup=0, memory_limit=100)
    rows = {(r["pass"], r["schedule"]): r for r in records}
    assert [key for key in rows if key[0] == "forward"] == FORWARD_ROWS
    assert rows["forward", "forward-jacobi"]["stats"]["sweeps"] == 4
    newton = rows["forward", "forward-newton"]["stats"]
    assert 1 <= newton["iterations"] <= 4 and newton["rounds"] == 2 * newton["iterations"]
    assert rows["forward", "sequential"]["speedup"] == 1.0
    assert rows["forward", "forward-jacobi"]["speedup"] == (rows["forward", "sequential"]["ms"]["median"]
                                                            / rows["forward", "forward-jacobi"]["ms"]["median"])
    out = {r["schedule"]: r for r in limited if "refused" in r}
    assert sorted(out) == ["dag-doubling", "dag-jacobi", "forward-newton"]
    newton = out["forward-newton"]
    assert newton["refused"].startswith("needs ") and newton["stats"]["memory_bytes"] > 100


def test_the_script_runs_on_numpy_and_ends_with_its_foot(tmp_path, capsys):
    assert bench(["--sizes", "2", "--depths", "3", "--batch", "1", "--repeats", "1"], tmp_path) == 0
    records = json.loads((tmp_path / "r.json").read_text())["records"]
    assert [(r["pass"], r["schedule"]) for r in records] == ROWS + FORWARD_ROWS
    assert {r["backend"] for r in records} == {"numpy"}
    assert capsys.readouterr().out.endswith(f"{dag_bench.LEGEND}\n{dag_bench.FORWARD}\n")


def test_the_table_fits_100_columns(report):
    printed = report[0].splitlines()
    assert printed[:2] == [dag_bench.TITLE, dag_bench.HEADER]
    assert printed[2] == "residual DAG, N=3 D=4 B=2, float32, numpy, k=2"
    assert len(printed) == 2 + 4 * (1 + len(ROWS + FORWARD_ROWS)) + len(dag_bench.LEGEND.splitlines()) + 1
    widest = _record("residual", 4096, "forward", "forward-newton", 99999.9, speedup=123456.7,
                     stats={"rounds": 99999, "iterations": 9999, "flops": 1e12, "sequential_flops": 1.0,
                            "memory_bytes": 2**50})
    widest["ms"]["p80"] = 10 * widest["ms"]["median"]  # noisy: marked "!"
    refused = _record("dense", 4096, "backward", "dag-doubling", stats={"memory_bytes": 2**50},
                      refused=f"needs {2**30:.1f} MiB > --memory-limit 65536 MiB")
    lines = printed + [dag_bench.format_row(widest), dag_bench.format_row(refused)]
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)


def test_the_script_runs_it_and_the_progress_bar_goes_to_stderr(monkeypatch, capsys, tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    argv = ["--sizes", "2", "--depths", "2", "--batch", "1", "--repeats", "1"]
    for quiet, shown in (([], True), (["--quiet"], False)):
        terminal = Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert bench(argv + quiet, tmp_path) == 0
        assert ("measuring" in terminal.getvalue()) == shown
        assert capsys.readouterr().out.startswith(f"{dag_bench.TITLE}\n{dag_bench.HEADER}\n")


def test_time_backward_gives_the_backward_rows_alone(tmp_path, capsys):
    assert bench(["--sizes", "2", "--depths", "2", "--batch", "1", "--repeats", "1", "--time", "backward"],
                 tmp_path) == 0
    records = json.loads((tmp_path / "r.json").read_text())["records"]
    assert [(r["pass"], r["schedule"]) for r in records] == ROWS
    assert capsys.readouterr().out.endswith(f"{dag_bench.LEGEND}\n")


@pytest.mark.parametrize("argv", [["--sizes", "0"], ["--depths", "x"], ["--kind", "tree"], ["--k", "0"],
                                  ["--repeats", "0"], ["--warmup", "-1"], ["--backend", "gpu"], ["--time", "step"],
                                  ["--memory-limit", "0"], ["--json", "/no/such/folder/r.json"], ["--layers", "3"]])
def test_a_bad_option_exits_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        dag_bench.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("python profiling/dag_bench.py: error: ")


def test_a_second_run_of_the_day_writes_beside_the_first_not_over_it(monkeypatch, capsys, tmp_path):
    """The default --json, results/dag_bench_cpu_<UTC date>.json, is there already: the run writes -2, the next -3,
    the first run's file as it was; --help says so."""
    monkeypatch.setattr(dag_bench, "HERE", tmp_path)
    (tmp_path / "results").mkdir()
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    first = tmp_path / "results" / f"dag_bench_cpu_{date}.json"
    first.write_text("a run of the day\n")
    for _ in range(2):
        assert dag_bench.main(["--sizes", "2", "--depths", "2", "--batch", "1", "--repeats", "1", "--warmup", "0",
                               "--time", "backward", "--quiet"]) == 0
    assert first.read_text() == "a run of the day\n"
    assert {path.name for path in first.parent.iterdir()} == {
        f"dag_bench_cpu_{date}{suffix}.json" for suffix in ("", "-2", "-3")}
    assert json.loads((first.parent / f"dag_bench_cpu_{date}-3.json").read_text())["records"]
    assert "the first name free with -2, -3 ... before its suffix" in " ".join(dag_bench.parser().format_help().split())


def test_ctrl_c_ends_a_run_with_exit_130_and_one_line(monkeypatch, capsys, tmp_path):
    measure, calls = dag_bench.measure, []

    def ctrl_c_at_the_second(*args, **options):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measure(*args, **options)

    monkeypatch.setattr(dag_bench, "measure", ctrl_c_at_the_second)
    assert bench(["--sizes", "2,3,4", "--depths", "2", "--batch", "1", "--repeats", "1"], tmp_path) == 130
    out, err = capsys.readouterr()
    assert err.splitlines()[1:] == ["python profiling/dag_bench.py: interrupted with 1 of 3 networks measured"]
    assert err.startswith("python profiling/dag_bench.py: about ") and " s left for 2 more networks" in err
    assert "N=2 D=2" in out and "N=3" not in out and not (tmp_path / "r.json").exists()


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # the stand-in probes 1 / x on zeros
def test_the_cupy_backend_on_the_stand_in(monkeypatch, capsys, tmp_path):
    install_standin(monkeypatch, STANDIN_ORDERS[0])
    assert bench(["--backend", "cupy", "--sizes", "3", "--depths", "3", "--batch", "1", "--repeats", "1", "--warmup",
                  "0", "--quiet"], tmp_path) == 0
    out = capsys.readouterr().out
    assert "residual DAG, N=3 D=3 B=1, float32, cupy, k=2" in out and out.count("x ") >= len(ROWS + FORWARD_ROWS)
