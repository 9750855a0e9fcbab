"""A window of training steps for Nsight Systems (``leapfrog-train --profile-steps A:B``).

    nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop \\
        leapfrog-train --backend cupy --profile-steps 20:30

Steps are counted from 0 over the whole run; the window holds steps A..B-1. On the cupy backend the
CUDA profiler starts before step A and stops after step B-1 (cudaProfilerStart/Stop through
``cupyx.profiler.profile``), with the device synchronized at both ends so that the capture holds
exactly those steps. Each step of the window is an NVTX range ``step N`` (``leapfrog_gpu.backends.annotate``:
emitted under nsys, or with ``LEAPFROG_NVTX=1``). The numpy backend has no CUDA profiler: there the
window only adds the NVTX ranges.
"""

import contextlib

from ..backends import annotate


def parse_steps(text):
    """``"A:B"`` as ``range(A, B)``, 0 <= A < B; a ``ValueError`` naming the form otherwise."""
    first, colon, last = text.partition(":")
    try:
        start, stop = int(first), int(last)
    except ValueError:
        start = stop = None
    if not colon or start is None or not 0 <= start < stop:
        raise ValueError(f"must be A:B with integers 0 <= A < B (steps A..B-1, counted from 0); got {text!r}")
    return range(start, stop)


class ProfileWindow:
    """Brackets steps ``steps`` (a range, or ``None`` for no window) of a run on ``backend``."""

    def __init__(self, steps, backend):
        self.steps, self.backend = steps, backend
        self.cuda = steps is not None and backend.name == "cupy"
        self._profiler = contextlib.ExitStack()
        self._running = False

    def step(self, n):
        """A context manager around step ``n``."""
        if self.steps is None or n not in self.steps:
            return contextlib.nullcontext()
        return self._step(n)

    @contextlib.contextmanager
    def _step(self, n):
        if self.cuda and n == self.steps.start:
            import cupyx.profiler

            self.backend.synchronize()
            self._profiler.enter_context(cupyx.profiler.profile())
            self._running = True
        with annotate.range(f"step {n}"):
            yield
        if n == self.steps[-1]:
            self.close()

    def close(self):
        """Stop the profiler if it runs (the last step was reached, or the run ended early)."""
        if self._running:
            self.backend.synchronize()
            self._profiler.close()
            self._running = False
