"""The run ends with one line that counts the skipped tests by reason (``conftest.py``), not a bare
count of skips."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import NO_GPU
from leapfrog_gpu.backends import cuda_available
from leapfrog_gpu.core.torch_io import INSTALL

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TWIN = "the NumPy twin of a fused op is the pair of twins it fuses"
SELECTION = {  # test: its reason to skip here, or None where it runs
    "tests/kernels/test_kernels.py::test_gradients_are_bitwise_nabla_b_and_nabla_w[twin-33-31-3-f32]": TWIN,
    "tests/kernels/test_kernels.py::test_gradients_are_bitwise_nabla_b_and_nabla_w[twin-33-31-3-f64]": TWIN,
    "tests/backends/test_backends.py::test_cupy_backend_streams_are_non_blocking": None if cuda_available() else NO_GPU,
    "tests/tools/bench/test_bench.py::test_torch_anchor_computes_our_gradients":
        None if importlib.util.find_spec("torch") else f"the PyTorch anchor needs torch ({INSTALL})",
    "tests/core/test_fitting.py::test_cross_entropy_is_finite_when_a_sigmoid_saturates_and_nan_when_the_network_is": None,
}


@pytest.mark.parametrize("processes", [["-p", "no:xdist"], ["-n", "2"]], ids=["one-process", "xdist"])
def test_the_run_ends_with_the_skips_counted_by_reason(processes, request):
    """In one process, and under pytest-xdist, whose workers send their reports to the process that
    prints the summary."""
    if "-n" in processes and not request.config.pluginmanager.hasplugin("xdist"):
        pytest.skip("needs pytest-xdist (the test extra)")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *processes, *SELECTION],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    summary = [line for line in lines if line.startswith("skipped by reason: ")]
    assert len(summary) == 1 and lines.index(summary[0]) >= len(lines) - 2, done.stdout  # at the end
    counts = {}
    for reason in SELECTION.values():
        if reason is not None:
            counts[reason] = counts.get(reason, 0) + 1
    parts = summary[0].removeprefix("skipped by reason: ").split("; ")
    assert parts[0] == f"2 {TWIN}" and sorted(parts) == sorted(f"{n} {reason}" for reason, n in counts.items())


@pytest.mark.skipif(cuda_available(), reason="with a usable GPU the tests that need one run")
def test_without_a_gpu_every_gpu_test_is_skipped_for_one_reason():
    """One line of the summary for the GPU that is absent, whichever module a GPU test is in."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-m", "gpu"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = int(re.search(r"(\d+) skipped", done.stdout.splitlines()[-1]).group(1))
    assert f"skipped by reason: {skipped} {NO_GPU}" in done.stdout.splitlines(), done.stdout[-2000:]
