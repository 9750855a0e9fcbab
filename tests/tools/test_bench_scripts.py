"""The studies that left ``leapfrog-bench`` for profiling/: the stream timeline of its configurations
(``bench_timeline.py``), the data-parallel table (``parallel_bench.py``; its runs under mpiexec are in
tests/tools/test_commands_parallel.py), the check of autotune's choice (``autotune_check.py``), PyTorch's
compiled step (``torch_compile.py``) and DEER's problem (``rnn_bench.py``); the DAG's benchmark
(``dag_bench.py``) is tests/tools/test_dag_bench.py's."""

import errno
import io
import json
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from helpers import bench_table
from leapfrog_gpu.core.torch_io import INSTALL

pytestmark = pytest.mark.slow

PROFILING = Path(__file__).resolve().parents[2] / "profiling"
sys.path.insert(0, str(PROFILING))

import autotune_check  # noqa: E402
import bench_table as tables  # noqa: E402  (helpers.bench_table runs it as a script)
import bench_timeline  # noqa: E402
import parallel_bench  # noqa: E402
import rnn_bench  # noqa: E402

TIMELINE = "python profiling/bench_timeline.py"


def run(script, argv):
    """Run ``script.main(argv)`` in this process, which must exit 0; return what it printed."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert script.main(argv) == 0
    return out.getvalue()


def refusal(script, argv, capsys):
    """The one line ``script.main(argv)`` writes on stderr, exiting 2."""
    with pytest.raises(SystemExit) as exit_info:
        script.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    return err


# -- bench_timeline.py ------------------------------------------------------------------------------------


def test_timeline_of_every_configuration_and_json_lines_as_they_come(tmp_path):
    """--timeline: every configuration stamped, its cost and analysis in the record, a chart panel each;
    --jsonl: the header line, then exactly the records of --json."""
    argv = ["--backend", "numpy", "--sizes", "24", "--layers", "4", "--batch", "3", "--k", "1,2",
            "--blas-threads", "1", "--repeats", "3", "--warmup", "1", "--no-torch", "--json", str(tmp_path / "r.json"),
            "--jsonl", str(tmp_path / "r.jsonl"), "--timeline", str(tmp_path / "t.png")]
    stdout = run(bench_timeline, argv)
    records = json.loads((tmp_path / "r.json").read_text())["records"]
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert lines[0]["command"] == f"{TIMELINE} " + " ".join(argv) and "machine" in lines[0]
    assert lines[1:] == records
    assert len(records) == 3
    for r in records:
        t = r["timeline"]
        assert t["steps"] == 3
        assert t["cost"] == pytest.approx(t["step_ms_stamped"]["median"] / t["step_ms_plain"]["median"])
        assert set(t["busy_ms"]) == {"main"} | {f"worker{j}" for j in range(r["k"])}
        assert (t["worker_overlap"] is None) == (r["k"] == 0)
    saved = json.loads((tmp_path / "t.json").read_text())
    assert [p["label"] for p in saved["panels"]] == ["sequential, BLAS 1", "leapfrog k=1, BLAS 1",
                                                     "leapfrog k=2, BLAS 1"]
    assert all({row[0] for row in p["intervals"]} == {1, 2, 3} for p in saved["panels"])  # the warm-up step left out
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = [line for line in stdout.replace("\n  ", " ").splitlines()
               if line.startswith(("sequential k=", "leapfrog k="))]
    assert len(printed) == 3
    assert all("worker time overlapping main" in line and "backward speed-up vs sequential " in line
               for line in printed)
    twice = tmp_path / "twice.jsonl"  # two runs appended to one file, as the device check does
    twice.write_text((tmp_path / "r.jsonl").read_text() * 2)
    out = bench_table(twice)
    assert out.count(f"Command: `{TIMELINE} --backend numpy --sizes 24") == 2 and out.count("\nTimeline") == 2
    rows = [line for line in out.splitlines() if line.startswith("| ") and line.count("|") == 10]
    assert len(rows) == 2 * (1 + 3) and rows[1].startswith("| sequential | 0 | 1 |")  # a header and 3 rows, twice


def test_graph_rows_are_printed_and_kept_but_not_stamped(tmp_path):
    """--graph with --timeline and --jsonl: each network's rows are printed, its eager configurations
    stamped and its records appended, in that order; a graph step is one launch, so its row has no
    timeline and the chart no panel for it."""
    argv = ["--backend", "numpy", "--sizes", "20", "--layers", "4", "--batch", "2", "--k", "2", "--blas-threads", "1",
            "--repeats", "3", "--warmup", "1", "--no-torch", "--graph", "--jsonl", str(tmp_path / "r.jsonl"),
            "--timeline", str(tmp_path / "t.png")]
    stdout = run(bench_timeline, argv)
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()][1:]
    assert [(r["schedule"], r["graph"]) for r in records] == [("sequential", False), ("leapfrog", False),
                                                              ("sequential", True), ("leapfrog", True)]
    assert [r["graph"] for r in records if "timeline" in r] == [False, False]
    assert [p["label"] for p in json.loads((tmp_path / "t.json").read_text())["panels"]] == [
        "sequential, BLAS 1", "leapfrog k=2, BLAS 1"]
    lines = stdout.splitlines()
    foot = lines.index(next(line for line in lines if line.startswith("* best sequential")))
    rows = [i for i, line in enumerate(lines[:foot]) if line.split()[:1] in (
        ["sequential*"], ["leapfrog"], ["sequential[graph]"], ["leapfrog[graph]"])]
    heading = max(i for i in range(rows[0]) if lines[i].startswith("N="))  # then its costs, on a line or two
    assert len(rows) == 4 and "leapfrog[graph]" in lines[rows[-1]] and lines[heading] == "N=20 L=4 B=2 float32"
    assert rows[-1] < lines.index(next(line for line in lines if line.startswith("timeline (")))
    assert "graph mode against its GPU targets" in bench_table(tmp_path / "r.jsonl")  # the verdicts, by profiling


def test_the_timeline_chart_names_its_network_and_runs_one_blas_thread_per_stream(tmp_path, figures):
    """Without --blas-threads the numpy run takes one BLAS thread per stream, its rows and its panels."""
    run(bench_timeline, ["--backend", "numpy", "--sizes", "16", "--layers", "4", "--batch", "3", "--k", "2",
                         "--repeats", "2", "--warmup", "1", "--no-torch", "--quiet", "--json", str(tmp_path / "r.json"),
                         "--timeline", str(tmp_path / "t.png")])
    title = "leapfrog-bench: MLP [16] * 4, batch 3, sigmoid, float32, numpy; a panel per schedule"
    assert [figure.get_suptitle() for figure in figures] == [title]
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["title"] == title and [p["label"] for p in saved["panels"]] == ["sequential, BLAS 1",
                                                                               "leapfrog k=2, BLAS 1"]
    assert {r["blas_threads"] for r in json.loads((tmp_path / "r.json").read_text())["records"]} == {1}


def test_each_optimizer_is_stamped_by_its_own_steps_and_named_in_its_panels(tmp_path, monkeypatch):
    """--optimizer sgd,adam: each record's plain and stamped steps are its optimizer's (a network each, as the
    rows are measured), so Adam's panels stamp Adam's launches (``lr, 1 / B, t``, ``step done``) and SGD's
    SGD's (``eta / B``); the panels, the printed lines and bench_table.py's rows name the optimizer."""
    rules = []

    class Spied(bench_timeline.MLP):
        def train_step(self, x, y, optimizer, *args, **kwargs):
            rules.append((id(self), type(optimizer).__name__))
            return super().train_step(x, y, optimizer, *args, **kwargs)

    monkeypatch.setattr(bench_timeline, "MLP", Spied)
    stdout = run(bench_timeline, ["--backend", "numpy", "--sizes", "12", "--layers", "3", "--batch", "1", "--k",
                                  "2", "--repeats", "2", "--warmup", "1", "--no-torch", "--optimizer", "sgd,adam",
                                  "--json", str(tmp_path / "r.json"), "--timeline", str(tmp_path / "t.png")])
    assert [kind for _, kind in dict.fromkeys(rules)] == ["SGD", "Adam"]  # each network one optimizer's steps
    assert len({net for net, _ in rules}) == 2
    panels = json.loads((tmp_path / "t.json").read_text())["panels"]
    assert [p["label"] for p in panels] == ["sequential, BLAS 1, sgd", "leapfrog k=2, BLAS 1, sgd",
                                            "sequential, BLAS 1, adam", "leapfrog k=2, BLAS 1, adam"]
    for p in panels:
        launched = {name for _, _, name, _, _ in p["intervals"]}
        adam = p["label"].endswith("adam")
        assert ("lr, 1 / B, t" in launched, "step done" in launched, "eta / B" in launched) == (adam, adam, not adam)
    assert [line.split(":")[0] for line in stdout.splitlines() if " k=" in line and " blas=1 " in line] == [
        "sequential k=0 blas=1 sgd", "leapfrog k=2 blas=1 sgd", "sequential k=0 blas=1 adam",
        "leapfrog k=2 blas=1 adam"]
    out = bench_table(tmp_path / "r.json").splitlines()
    for cells, best in ((18, " (best seq)"), (10, "")):  # the records' table (N, L and B first), the timeline's
        rows = [line.split(" | ")[3 if cells == 18 else 0].strip("| ") for line in out
                if line.startswith("| ") and line.count("|") == cells]
        assert rows[1:] == [f"sequential{best}, sgd", "leapfrog, sgd", f"sequential{best}, adam", "leapfrog, adam"]


def test_the_timeline_table_names_a_one_pass_row_as_the_bench_does():
    """A one-pass record carries ``fused: true`` too (its update is fused by the one pass): its timeline row reads
    ``+one-pass``, as the bench's lines and the records' table say, not ``+fused``."""
    def stamped(schedule, k, fused, one_pass):
        timeline = {"busy_ms": {"main": 0.5}, "step_ms_plain": {"median": 1.0, "p20": 1.0, "p80": 1.0}, "cost": 1.0,
                    "worker_overlap": None, "main_idle_ms": 0.1}
        return {"N": 8, "L": 3, "B": 1, "schedule": schedule, "k": k, "fused": fused, "one_pass": one_pass,
                "graph": False, "blas_threads": 1, "timeline": timeline}

    records = [stamped("sequential", 0, True, True), stamped("leapfrog", 2, True, True),
               stamped("leapfrog", 2, True, False), stamped("leapfrog", 2, False, False)]
    rows = tables.timeline_table(records).splitlines()[4:]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == [
        "sequential+one-pass", "leapfrog+one-pass", "leapfrog+fused", "leapfrog"]


@pytest.mark.parametrize("argv, message", [
    (["--timeline", "/nonexistent-folder/t.png"], "the folder /nonexistent-folder does not exist"),
    (["--sizes", "8,9", "--timeline", "t.png"], "--timeline charts one network: give one value each to --sizes"),
    (["--timeline", "t.txt"], "--timeline t.txt: the chart is written as PNG: give a name ending in .png (its "
                              "intervals go beside it, in .json)"),
    (["--sizes", "8", "--layers", "3", "--batch", "1", "--blas-threads", "2", "--timeline", "t.png"],
     "--blas-threads: the timeline runs one BLAS thread per stream"),
    ([], "the following arguments are required: --timeline"),
    (["--timeline", "t.png", "--json", "t.json"], "--json and --timeline's .json name one file, t.json: give each its own"),
    (["--timeline", "t.png", "--jsonl", "t.json"], "--jsonl and --timeline's .json name one file, t.json"),
    (["--timeline", "t.png", "--plot", "t.png"], "--plot and --timeline name one file, t.png: give each its own"),
])
def test_the_timeline_refuses_a_bad_option_in_one_line(capsys, tmp_path, argv, message):
    err = refusal(bench_timeline, ["--backend", "numpy", *argv], capsys)
    assert err.startswith(f"{TIMELINE}: error:") and message in err and not list(tmp_path.iterdir())


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, whose every write fails (Linux)")
def test_a_timeline_that_cannot_be_written_once_measured_is_exit_5_and_one_line(tmp_path, capsys):
    """--timeline a link to /dev/full (a full disk): as leapfrog-bench's --plot, exit status 5 and one line (not a
    traceback and 1), the records measured kept in --json; --help lists --timeline under 5."""
    (tmp_path / "t.png").symlink_to("/dev/full")
    argv = ["--backend", "numpy", "--sizes", "8", "--layers", "3", "--batch", "1", "--k", "2", "--repeats", "1",
            "--warmup", "0", "--no-torch", "--quiet", "--json", str(tmp_path / "r.json"), "--timeline",
            str(tmp_path / "t.png")]
    with redirect_stdout(io.StringIO()):
        assert bench_timeline.main(argv) == 5
    assert capsys.readouterr().err == (f"{TIMELINE}: error: cannot write --timeline {tmp_path / 't.png'} "
                                       f"({os.strerror(errno.ENOSPC)})\n")
    assert len(json.loads((tmp_path / "r.json").read_text())["records"]) == 2
    help_text = bench_timeline.parser().format_help()
    assert "5    --json, --jsonl, --plot, --timeline or stdout could not be written" in help_text


def test_the_timeline_without_matplotlib_is_a_cli_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    err = refusal(bench_timeline, ["--backend", "numpy", "--sizes", "24", "--layers", "3", "--batch", "1",
                                   "--timeline", str(tmp_path / "r.png")], capsys)
    assert "--timeline needs matplotlib: pip install -e '.[plot]'" in err  # as docs/training.md says it
    assert not list(tmp_path.iterdir())


# -- parallel_bench.py --------------------------------------------------------------------------------------


def test_the_data_parallel_table_never_prints_a_negative_share_hidden():
    """Noise can make a data-parallel step wait longer than its sums took: "none", not -56 %."""
    stats = {"median": 2.0, "p20": 1.9, "p80": 2.1}
    records = [{"N": 8, "L": 3, "B": 2, "P": 2, "dtype": "float32", "schedule": "leapfrog", "k": 2, "bucket_mb": 0,
                "blas_threads": 1, "step_ms": stats, "local_slowest_ms": 1.0, "sums_slowest_ms": sums,
                "sums_gbps": 1.0, "exposed_ms": 1.0, "hidden": 1 - 1.0 / sums, "one_ms": stats, "speedup": 1.0}
               for sums in (0.64, 2.0, 4.0)]
    lines = parallel_bench.table(records).splitlines()[1:]  # below the line that says which way speed-ups point
    end = lines[0].index(" hidden") + len(" hidden")  # the column's cells end where its title does
    assert [line[:end].split()[-1] for line in lines[2:5]] == ["none", "50%", "75%"]
    assert "-56%" not in "\n".join(lines) and "none: the step waited as long as the sums took" in lines[-1]


def test_the_data_parallel_study_needs_mpiexec_and_says_its_options(capsys):
    err = refusal(parallel_bench, ["--backend", "numpy", "--bucket-mb", "1"], capsys)
    assert err == ("python profiling/parallel_bench.py: error: run it under mpiexec -n P with P > 1: it measures "
                   "what the sums across ranks cost\n")
    with pytest.raises(SystemExit) as exit_info:
        parallel_bench.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exit_info.value.code == 0 and "--bucket-mb MB[,MB...]" in out and "--fused" in out
    assert "BUCKET_MB" not in out and "BLAS_THREADS" not in out


# -- autotune_check.py --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fused", [False, True])
def test_autotunes_choice_is_timed_against_the_best_sequential_step(tmp_path, fused):
    """A record per network: the configuration tune picked, its speed-up over the best sequential step and
    whether it is within noise of it (its p20 at most that step's p80), and the line that says so."""
    argv = ["--backend", "numpy", "--sizes", "12,24", "--layers", "3", "--batch", "1,5", "--k", "1,2",
            "--blas-threads", "1,2", "--repeats", "3", "--warmup", "1", "--json", str(tmp_path / "a.json")]
    stdout = run(autotune_check, argv + ["--fused"] * fused)
    records = json.loads((tmp_path / "a.json").read_text())["records"]
    assert [(r["N"], r["B"]) for r in records] == [(12, 1), (12, 5), (24, 1), (24, 5)]
    for r, line in zip(records, stdout.splitlines(), strict=True):
        assert (r["schedule"], r["k"] > 0) in (("sequential", False), ("leapfrog", True))
        assert r["blas_threads"] in (1, 2) and r["best_sequential_blas_threads"] in (1, 2) and r["fused"] == fused
        assert r["speedup"] == r["best_sequential_ms"]["median"] / r["step_ms"]["median"]
        assert r["auto_within_noise"] == (r["step_ms"]["p20"] <= r["best_sequential_ms"]["p80"])
        verdict = "within noise of" if r["auto_within_noise"] else "SLOWER than"
        assert line == (f"auto chose {r['schedule']} k={r['k']} blas={r['blas_threads']} at N={r['N']} L=3 "
                        f"B={r['B']}: step {r['speedup']:.2f}x as fast as the best sequential, {verdict} it")


# -- torch_compile.py ---------------------------------------------------------------------------------------


def test_the_compiled_step_is_the_eager_step():
    """The compiled step of torch_compile.py moves the parameters as the eager torch.optim step does."""
    pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    import torch_compile
    from leapfrog_gpu import MLP
    from leapfrog_gpu.tools.bench import measure, torch_anchor

    x, y = measure.host_batch([5, 7, 3], 4, "float64")
    with MLP([5, 7, 3], dtype="float64", backend="numpy") as net:
        eager = torch_anchor.Step(net.to_torch(), x, y, measure.OPTIMIZERS["sgd"], "foreach")
        compiled = torch_compile.CompiledStep(net.to_torch(), x, y, warmup=0)
        for step in (eager, compiled):
            step.step()
        for p, q in zip(eager.params, compiled.params, strict=True):
            assert float((p - q).detach().abs().max()) < 1e-12
        assert float((eager.params[0] - net.to_torch()[0].weight).detach().abs().max()) > 0  # moved


# -- rnn_bench.py --deer --------------------------------------------------------------------------------------


def test_deers_problem_is_a_named_row_with_newtons_iterations(monkeypatch, tmp_path):
    pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    monkeypatch.setitem(rnn_bench.DEER, "N", [3])
    monkeypatch.setitem(rnn_bench.DEER, "tau", [12])
    out = tmp_path / "deer.json"
    stdout = run(rnn_bench, ["--deer", "--repeats", "1", "--repeats-long", "1", "--torch-threads", "1,2",
                             "--out", str(out)])
    lines = [line for line in stdout.splitlines() if "DEER" in line]
    names = [line[15:].split("  ")[0] for line in lines]
    assert names == ["DEER step bptt", "DEER step timescan+newton", "DEER step timescan+quasi-newton",
                     "DEER step torch nn.GRU 1t", "DEER step torch nn.GRU 2t"], lines
    rows = json.loads(out.read_text())["rows"]
    assert all(row["problem"] == "deer" and row["cell"] == "gru" and row["inputs"] == 2 for row in rows)
    assert (rows[0]["tau"], rows[0]["B"], rows[0]["L"]) == (12, 16, 3) and rows[1]["iterations"] >= 1
