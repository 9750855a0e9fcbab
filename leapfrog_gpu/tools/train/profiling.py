"""A window of training steps for Nsight Systems (``leapfrog-train --profile-steps A:B``), or for
the stream timeline (``leapfrog-train --timeline FILE.png``).

    nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop \\
        leapfrog-train --backend cupy --profile-steps 20:30

The window holds steps A..B-1, counted from 0 over the whole run. On the cupy backend the
CUDA profiler starts before step A and stops after step B-1 (cudaProfilerStart/Stop through
``cupyx.profiler.profile``), with the device synchronized at both ends so that the capture holds
exactly those steps. Each step of the window is an NVTX range ``step N`` (``leapfrog_gpu.backends.annotate``:
emitted under nsys, or with ``LEAPFROG_NVTX=1``). The numpy backend has no CUDA profiler: there the
window only adds the NVTX ranges.

With a timeline path, every launch of the window's steps is stamped (``backends.timing.Timeline``),
and once its last step has run, the chart and its JSON are written (``leapfrog_gpu.tools.timeline``).
"""

import contextlib

from ...backends import annotate, timing
from .. import timeline


class ProfileWindow:
    """Brackets steps ``steps`` (a range, or ``None`` for no window) of a run on ``backend``.

    ``timeline``: ``None``, or a dict with ``path`` (the chart, FILE.png), ``title`` (the network it
    names), ``label`` (its panel's) and ``about`` (what its JSON records beside the intervals);
    ``self.summary`` then holds the timeline's medians once written.
    """

    def __init__(self, steps, backend, timeline=None):
        self.steps, self.backend = steps, backend
        self.cuda = steps is not None and backend.name == "cupy"
        self._profiler = contextlib.ExitStack()
        self._running = False
        self.timeline = timeline
        self._stamps = None if timeline is None else timing.Timeline(backend)
        self.summary = None

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
        with annotate.range(f"step {n}"), (contextlib.nullcontext() if self._stamps is None
                                             else self._stamps.step(n)):
            yield
        if n == self.steps[-1]:
            self.close()
            if self._stamps is not None:
                self._save_timeline()

    def _save_timeline(self):
        t = self.timeline
        panel = {"label": t["label"], "intervals": self._stamps.intervals()}
        self.summary = timeline.save(t["path"], [panel], t["about"], t["title"])[0]["analysis"]["summary"]

    def close(self):
        """Stop the profiler if it runs (the last step was reached, or the run ended early)."""
        if self._running:
            self.backend.synchronize()
            self._profiler.close()
            self._running = False
