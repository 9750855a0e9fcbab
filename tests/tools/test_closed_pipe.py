"""A command whose reader goes (``leapfrog-train | head -3``) ends quietly: no traceback, exit status 141, as does
every profiling script that prints a table or a report; one started with stdout closed runs, its lines dropped."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import build_export, standin_env
from leapfrog_gpu.tools import CLOSED_PIPE

pytestmark = pytest.mark.slow

PROFILING = Path(__file__).resolve().parents[2] / "profiling"
RESULTS = PROFILING / "results"


@pytest.mark.parametrize("module, argv", [
    ("leapfrog_gpu.tools.train", ["--hidden", "2x8", "--epochs", "30", "--backend", "numpy"]),
    ("leapfrog_gpu.tools.bench", ["--backend", "numpy", "--sizes", "8,9,10,11,12,13", "--layers", "3", "--batch",
                                  "2", "--k", "2", "--repeats", "1"]),
])
def test_a_closed_pipe_ends_the_command_quietly(module, argv):
    """The command ends with 141 and nothing on stderr, and its ``--help`` says what 141 means."""
    helped = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert "  141  stdout closed (| head): stopped at the line it could not write" in helped.stdout
    child = subprocess.Popen([sys.executable, "-m", module, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline()  # as head -1 does: read a line, then close the pipe
    child.stdout.close()
    stderr = child.stderr.read()
    assert (child.wait(timeout=120), stderr) == (CLOSED_PIPE, "")


@pytest.mark.parametrize("module, argv", [
    ("leapfrog_gpu.tools.train", ["--hidden", "8", "--epochs", "1", "--backend", "numpy"]),
    ("leapfrog_gpu.tools.bench", ["--backend", "numpy", "--no-torch", "--sizes", "8", "--layers", "2", "--batch", "1",
                                  "--k", "2", "--repeats", "1"]),
])
def test_a_command_started_with_stdout_closed_runs_its_lines_dropped(module, argv):
    """Started with no stdout at all (``>&-``: Python's ``sys.stdout`` is None), the command runs to its end, its
    lines dropped as ``print`` drops them: exit status 0 and nothing on stderr (its flush at the end raised)."""
    child = subprocess.run([sys.executable, "-m", module, *argv], stderr=subprocess.PIPE, text=True, timeout=120,
                           preexec_fn=lambda: os.close(1))
    assert (child.returncode, child.stderr) == (0, "")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, whose every write fails (Linux)")
@pytest.mark.parametrize("module, prog, argv", [
    ("leapfrog_gpu.tools.train", "leapfrog-train", ["--hidden", "8", "--epochs", "1", "--backend", "numpy"]),
    ("leapfrog_gpu.tools.bench", "leapfrog-bench", ["--backend", "numpy", "--no-torch", "--sizes", "8", "--layers",
                                                    "2", "--batch", "1", "--k", "2", "--repeats", "1"]),
])
def test_a_stdout_that_cannot_be_written_is_said_in_one_line(module, prog, argv):
    """``> /dev/full`` (a full disk under stdout): exit status 5, as for any file the command cannot write, and one
    line, not a traceback."""
    with open("/dev/full", "w") as full:
        child = subprocess.run([sys.executable, "-m", module, *argv], stdout=full, stderr=subprocess.PIPE, text=True,
                               timeout=120)
    assert (child.returncode, child.stderr) == (5, f"{prog}: error: cannot write to stdout (No space left on device)\n")


def test_a_profiling_table_whose_reader_goes_ends_quietly(tmp_path):
    """``bench_table.py FILE | head -1`` (``tools.guarded``, as the commands): exit status 141 and nothing on stderr,
    over more lines than a pipe holds, so that the script is still writing when its reader goes."""
    run = json.loads((RESULTS / "bench_cpu.json").read_text())
    lines = [json.dumps({key: value for key, value in run.items() if key != "records"})]
    lines += [json.dumps(r) for r in run["records"]]
    (tmp_path / "many.jsonl").write_text("\n".join(lines * 200) + "\n")  # 200 runs: some 600 kB of tables
    child = subprocess.Popen([sys.executable, str(PROFILING / "bench_table.py"), str(tmp_path / "many.jsonl")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().startswith("Command: `leapfrog-bench ")
    child.stdout.close()
    stderr = child.stderr.read()
    assert (child.wait(timeout=120), stderr) == (CLOSED_PIPE, "")


@pytest.mark.parametrize("script, args", [
    ("bench_table.py", ["{results}/bench_cpu.json"]),
    ("rnn_tables.py", ["{results}/rnn_bench_cpu_2026-12-03.json"]),
    ("parallel_table.py", ["{results}/bench_cpu_parallel_1.json"]),
    ("verdicts.py", ["{results}/bench_cpu_graph.json"]),
    ("plot_metrics.py", ["{results}/adding_gru_tau100_bptt_cpu_2026-12-05.jsonl", "-o", "{tmp}/curves.png"]),
    ("kernel_model.py", ["--readme"]),
    ("overlap.py", ["{tmp}/trace.sqlite"]),
    ("naumov_crossover.py", ["--L", "2", "--N", "4", "--B", "1", "--repeats", "1", "--out", "{tmp}/naumov"]),
    ("dag_bench.py", ["--backend", "numpy", "--sizes", "3", "--depths", "4", "--batch", "2", "--repeats", "1",
                      "--warmup", "0", "--json", "{tmp}/dag.json"]),
    ("autotune_check.py", ["--backend", "numpy", "--sizes", "8", "--layers", "2", "--batch", "1", "--repeats", "1"]),
    ("kernels.py", ["--backend", "numpy", "--shapes", "8:8:1", "--repeats", "1"]),
    ("rnn_float32.py", []),
    ("smoke.py", []),  # without a GPU: one line, that the device failed
    ("call_count.py", ["--sizes", "4", "--layers", "3", "--batch", "1", "--k", "2"]),  # these two on the stand-in
    ("graph_nodes.py", ["--repeats", "1"]),
])
def test_a_profiling_script_whose_reader_is_gone_ends_quietly(tmp_path, script, args):
    """A profiling script that prints a table or a report, its stdout a pipe whose reader has gone before its first
    line (closed first: a table that fits a pipe's buffer is written whole before ``| head -1`` closes it): exit
    status 141 and nothing on stderr (``tools.guarded``), not a BrokenPipeError's traceback. The scripts that import
    PyTorch first (seconds each) end as these do: ``test_every_profiling_script_ends_through_the_guard``."""
    if script == "plot_metrics.py":
        pytest.importorskip("matplotlib", reason="plot_metrics.py refuses to run without matplotlib first")
    if script == "overlap.py":
        build_export(tmp_path / "trace.sqlite")
    argv = [sys.executable, str(PROFILING / script), *(arg.format(tmp=tmp_path, results=RESULTS) for arg in args)]
    env = standin_env() if script in ("call_count.py", "graph_nodes.py") else None
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, cwd=tmp_path, env=env)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (CLOSED_PIPE, "")


def test_every_profiling_script_ends_through_the_guard():
    """Every profiling script run as a program ends through ``tools.guarded`` (a closed pipe, Ctrl-C, a full stdout:
    one line or none, not a traceback): its ``if __name__ == "__main__":`` block is ``sys.exit(guarded(main, ...))``
    alone; but image_env.py, whose two lines device_check.sh reads (parallel_bench.py, whose stdout under mpiexec is
    mpiexec's, too: its ranks' Ctrl-C was a traceback each; step_times.py, a script of top-level lines, runs on older
    trees, without ``guarded``, and prints one line at its end)."""
    def guarded_alone(body):
        call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Expr) else None
        return ast.unparse(call).startswith("sys.exit(guarded(main, ") if isinstance(call, ast.Call) else False

    blocks = {path.name: node.body for path in PROFILING.glob("*.py") for node in ast.parse(path.read_text()).body
              if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"}
    assert sorted(name for name, body in blocks.items() if not guarded_alone(body)) == ["image_env.py"]
    assert len(blocks) > 10
