"""A command whose reader goes (``leapfrog-train | head -3``) ends quietly: no traceback, exit status 141; one started
with stdout closed runs, its lines dropped."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from leapfrog_gpu.tools import CLOSED_PIPE

pytestmark = pytest.mark.slow


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
    profiling = Path(__file__).resolve().parents[2] / "profiling"
    run = json.loads((profiling / "results" / "bench_cpu.json").read_text())
    lines = [json.dumps({key: value for key, value in run.items() if key != "records"})]
    lines += [json.dumps(r) for r in run["records"]]
    (tmp_path / "many.jsonl").write_text("\n".join(lines * 200) + "\n")  # 200 runs: some 600 kB of tables
    child = subprocess.Popen([sys.executable, str(profiling / "bench_table.py"), str(tmp_path / "many.jsonl")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().startswith("Command: `leapfrog-bench ")
    child.stdout.close()
    stderr = child.stderr.read()
    assert (child.wait(timeout=120), stderr) == (CLOSED_PIPE, "")
