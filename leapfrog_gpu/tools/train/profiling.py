"""A window of training steps A..B-1 (counted from 0 over the whole run) for Nsight Systems (``leapfrog-train
--profile-steps A:B``), or for the stream timeline (``--timeline FILE.png``).

    nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop \\
        leapfrog-train --backend cupy --profile-steps 20:30

On the cupy backend the CUDA profiler starts before step A and stops after step B-1 (``cupyx.profiler.profile``),
the device synchronized at both ends so that the capture holds exactly those steps. Each step of the window is an
NVTX range ``step N`` (``backends.annotate``: emitted under nsys, or with ``LEAPFROG_NVTX=1``); that is all the
numpy backend adds. With a timeline, every launch of the window is stamped (``backends.timing.Timeline``) and its
chart written at the end of the epoch of its last step (``tools.timeline``), outside the epoch's time. A run
resumed inside the window records the rest of it.
"""

import contextlib

from ...backends import annotate, timing
from .. import timeline
from ..cli import writing


class ProfileWindow:
    """Brackets the steps ``steps`` (a range, or ``None`` for no window) of a run on ``backend``. ``timeline``:
    ``None``, or a dict with ``path`` (FILE.png), ``title`` (the network), ``label`` (its panel's, which the steps
    recorded end) and ``about`` (what the JSON records beside the intervals); ``summary`` then holds the timeline's
    medians once written. ``recorded``: the steps of the window this run took, once it reached the window."""

    def __init__(self, steps, backend, timeline=None):
        self.steps, self.backend, self.timeline, self.summary = steps, backend, timeline, None
        self._stamps = None if timeline is None else timing.Timeline(backend)
        self._profiler = None  # an ExitStack while the CUDA profiler runs
        self.recorded = None
        self._done = False  # whether the window's last step has run

    @contextlib.contextmanager
    def step(self, n):
        """Around step ``n``."""
        if self.steps is None or n not in self.steps:
            yield
            return
        if self.recorded is None:
            self.recorded = range(n, self.steps.stop)
        if self.backend.name == "cupy" and n == self.recorded.start:
            import cupyx.profiler

            self.backend.synchronize()
            self._profiler = contextlib.ExitStack()
            self._profiler.enter_context(cupyx.profiler.profile())
        with annotate.range(f"step {n}"), (contextlib.nullcontext() if self._stamps is None else self._stamps.step(n)):
            yield
        if n == self.steps[-1]:
            self.close()
            self._done = True

    def write(self):
        """Once the window has run, write the timeline's chart and its .json (once; ``summary`` then holds its
        medians): after the steps, as drawing takes a second or more, which an epoch's time would count."""
        if self._stamps is None or not self._done or self.summary is not None:
            return
        t, steps = self.timeline, self.recorded
        panel = {"label": f"{t['label']}, steps {steps.start}..{steps.stop - 1}", "intervals": self._stamps.intervals()}
        with writing(f"to --timeline {t['path']}"):  # a full disk, a folder gone: one line, exit status 5
            saved = timeline.save(t["path"], [panel], t["about"], t["title"])
        self.summary = saved[0]["analysis"]["summary"]

    def close(self):
        """Stop the profiler if it runs (the last step was reached, or the run ended early)."""
        if self._profiler is not None:
            self.backend.synchronize()
            self._profiler.close()
            self._profiler = None
