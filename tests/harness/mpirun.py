"""``mpiexec`` from a test: every launch has a time limit that ends all its ranks, and a failure shows
what the ranks wrote on stderr."""

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MPIEXEC = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")

needs_mpi = pytest.mark.skipif(MPIEXEC is None or importlib.util.find_spec("mpi4py") is None,
                               reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'")

ENV = {
    "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1",  # a rank that waits sleeps rather than spins: more ranks than cores here
    "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
}


def launch(ranks, *command, options=(), env=None):
    """Start ``mpiexec -n ranks command`` (``options`` before ``-n``) with stdout and stderr piped."""
    return subprocess.Popen([MPIEXEC, *options, "-n", str(ranks), *map(str, command)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, **ENV, **(env or {})})


def finish(process, timeout):
    """Wait for ``process`` at most ``timeout`` seconds (a guard against a hang); return ``(returncode, stdout,
    stderr)``. Past the limit every rank is killed and the test fails with their stderr."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(process)
        out, err = process.communicate()
        pytest.fail(f"mpiexec ran past {timeout} s and was killed; the ranks' stderr:\n{err}\nstdout:\n{out}")
    return process.returncode, out, err


def run(ranks, *command, timeout=60, options=(), env=None):
    """Run to the end; fail the test unless every rank exits 0. Return stdout."""
    returncode, out, err = finish(launch(ranks, *command, options=options, env=env), timeout)
    assert returncode == 0, f"mpiexec -n {ranks} {' '.join(map(str, command))} exited {returncode}:\n{err}"
    return out


def kill(process):
    """SIGKILL mpiexec and every process below it."""
    for pid in [process.pid, *descendants(process.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def descendants(pid):
    """Every live process below ``pid`` (from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def rank_pids(process, ranks, timeout=30):
    """``{rank: pid}`` of the ranks that ``process`` (an mpiexec) started, once all of them run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {}
        for pid in descendants(process.pid):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            rank = next((v[len(b"PMI_RANK="):] for v in environ if v.startswith(b"PMI_RANK=")), None)
            if rank is not None:
                found[int(rank)] = pid
        if len(found) == ranks:
            return found
        time.sleep(0.1)
    pytest.fail(f"the {ranks} ranks did not all start within {timeout} s")
