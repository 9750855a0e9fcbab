"""A command whose reader goes (``leapfrog-train | head -3``) ends quietly: no traceback, exit status 141."""

import subprocess
import sys

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
