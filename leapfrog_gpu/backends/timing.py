"""Timing on a backend: a piece of work (warm up, repeat, summarise by median, p20 and p80), and the
timeline, every launch stamped on its own stream (``Timeline``).

On the host (NumPy backend) a repeat is the wall time of ``fn()`` followed by ``synchronize()``,
from ``time.perf_counter``. On a GPU it is the time between two CUDA events recorded on the backend's
main stream around ``fn()``: every schedule joins its workers into the main stream, so the second
event completes only once the workers have finished too.

A kernel shorter than Python's launch of it is timed by ``measure_launches``: many launches back to back
between one pair of events, so that the device's time per launch is apart from the host's time to issue one
(where the two are close, the device waited on Python: the figure is the launch rate, not the kernel's).
"""

import collections
import contextlib
import time

import numpy as np


def measure(backend, fn, repeats, warmup):
    """Run ``fn()`` ``warmup`` times, then time it ``repeats`` times; return the times in ms."""
    return measure_interleaved(backend, [fn], repeats, warmup)[0]


def measure_interleaved(backend, fns, repeats, warmup, contexts=None, rotate=False, settle=False):
    """Time each of ``fns`` ``repeats`` times, round-robin (one repeat of each in turn), so that a
    change of load during the run shifts every one alike; return one array of ms per function.

    ``contexts``, if given, holds one context-manager factory per function, entered around each of
    its calls, outside the timed interval (for example a BLAS thread limit). With ``rotate`` each
    round starts one function later than the last, so that no function always runs after the same
    one (whose memory traffic would leave the caches cold for it). With ``settle`` each timed call
    follows an untimed call of the same function: it is timed after itself, as a loop runs it, not in
    what another left behind (other threads still spinning or asleep, caches, a thread's core).
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1; got {repeats!r}")
    contexts = contexts or [contextlib.nullcontext] * len(fns)
    once = _device_time if backend.name == "cupy" else _host_time
    for _ in range(warmup):
        for fn, context in zip(fns, contexts):
            with context():
                fn()
                backend.synchronize()
    times = np.empty((len(fns), repeats))
    for i in range(repeats):
        first = i % len(fns) if rotate else 0
        for j in [*range(first, len(fns)), *range(first)]:
            with contexts[j]():
                if settle:
                    fns[j]()
                    backend.synchronize()
                times[j, i] = once(backend, fns[j])
    return list(times)


def measure_in_blocks(backend, fns, keys, repeats, warmup, contexts=None, block=5, settle=False):
    """Like ``measure_interleaved`` (``settle`` as there), but the functions that share a key (a BLAS
    setting) take turns among themselves for ``block`` repeats before the next key's turn, and keys
    alternate until each function has ``repeats`` times. Each block starts with untimed calls (``warmup``
    in the first block, one later), so one setting's after-effects (BLAS threads still spinning) stay out
    of the next setting's times, while alternating blocks still spreads slow drifts of load over all.
    """
    contexts = contexts or [contextlib.nullcontext] * len(fns)
    groups = [[i for i, key in enumerate(keys) if key == k] for k in dict.fromkeys(keys)]
    times = [[] for _ in fns]
    done = 0
    while done < repeats:
        count = min(block, repeats - done)
        for group in groups:
            part = measure_interleaved(backend, [fns[i] for i in group], count, warmup if done == 0 else 1,
                                       [contexts[i] for i in group], settle=settle)
            for i, ms in zip(group, part):
                times[i].extend(ms)
        done += count
    return [np.array(t) for t in times]


def measure_launches(backend, fn, repeats, warmup, launches=20):
    """Time ``launches`` calls of ``fn()`` back to back, ``repeats`` times, after ``warmup`` calls: on a GPU
    between one pair of events on the main stream, on the host up to the ``synchronize()`` after the last.
    Returns ``(per_launch_ms, issue_ms)``: arrays over the repeats of the elapsed time divided by
    ``launches``, and of the host's time to issue one launch (the calls' wall time before any wait)."""
    if isinstance(launches, bool) or not isinstance(launches, int) or launches < 1:
        raise ValueError(f"launches must be an integer >= 1; got {launches!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1; got {repeats!r}")
    for _ in range(warmup):
        fn()
    backend.synchronize()
    per_launch, issue = np.empty(repeats), np.empty(repeats)
    for i in range(repeats):
        if backend.name == "cupy":
            cupy = backend.xp
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(backend.main)
            began = time.perf_counter()
            for _ in range(launches):
                fn()
            issue[i] = time.perf_counter() - began
            end.record(backend.main)
            end.synchronize()
            per_launch[i] = cupy.cuda.get_elapsed_time(start, end) / launches
        else:
            began = time.perf_counter()
            for _ in range(launches):
                fn()
            issue[i] = time.perf_counter() - began
            backend.synchronize()
            per_launch[i] = (time.perf_counter() - began) * 1e3 / launches
        issue[i] *= 1e3 / launches
    return per_launch, issue


def _host_time(backend, fn):
    start = time.perf_counter()
    fn()
    backend.synchronize()
    return (time.perf_counter() - start) * 1e3


def _device_time(backend, fn):
    cupy = backend.xp
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(backend.main)
    fn()
    end.record(backend.main)
    end.synchronize()  # one repeat at a time: the next one's host work does not hide in this one
    return cupy.cuda.get_elapsed_time(start, end)


def copy_bandwidth(backend, nbytes=1 << 27, repeats=20, warmup=3, launches=1):
    """Device-to-device (host-to-host on NumPy) copy bandwidth in GB/s, read plus write: a
    ``summary`` of GB/s over the repeats, each ``launches`` copies between one pair of events
    (``measure_launches``)."""
    xp = backend.xp
    src = xp.ones(nbytes // 4, dtype=np.float32)
    dst = xp.empty_like(src)
    backend.synchronize()
    ms, _ = measure_launches(backend, lambda: backend.launch(backend.main, "copy", xp.copyto, dst, src), repeats,
                             warmup, launches)
    return summary(2 * src.nbytes / (ms * 1e6))


def summary(times_ms):
    """``{"median", "p20", "p80"}`` of a sample of times, in ms."""
    p20, median, p80 = np.percentile(np.asarray(times_ms), (20, 50, 80))
    return {"median": float(median), "p20": float(p20), "p80": float(p80)}


# -- the timeline: every launch stamped on its own stream ---------------------------------------------


Interval = collections.namedtuple("Interval", "step stream name start end")
"""One launch of a timeline: its step, stream name (``main``, ``worker0``, ...), launch name, and
start and end in ns from the timeline's first stamp."""


class Stamp:
    """One launch being stamped: ``start`` and ``end`` are marks of the backend's clock (ns on the
    host, CUDA events on the GPU), ``None`` until taken."""

    __slots__ = ("step", "stream", "name", "start", "end")

    def __init__(self, step, stream, name):
        self.step, self.stream, self.name = step, stream, name
        self.start = self.end = None


@contextlib.contextmanager
def unstamped(backend):
    """A block whose launches no ``Timeline`` stamps: passes a step makes of its own that are not the step's (a
    calibration's), inside a step that one records."""
    timeline, backend.timeline = backend.timeline, None
    try:
        yield
    finally:
        backend.timeline = timeline


class Timeline:
    """Stamps every ``backend.launch`` made inside ``with timeline.step(): ...``, on its own stream.

    Host streams take ``time.perf_counter_ns()`` on the stream's thread just before and after the
    operation; CUDA streams record a timing event on the stream before and after the launch's work.
    Outside ``step()`` the backend's ``timeline`` attribute is ``None`` and a launch pays one test for it.

        timeline = Timeline(backend)
        for _ in range(5):
            with timeline.step():
                net.sgd_step(x, y, eta, schedule)
        timeline.intervals()    # synchronizes; [Interval(step, stream, name, start, end), ...]
    """

    def __init__(self, backend):
        self.backend = backend
        self.stamps = []
        self.next_step = 0
        self._step = None

    def __repr__(self):
        return f"Timeline({self.backend!r}, stamps={len(self.stamps)})"

    @contextlib.contextmanager
    def step(self, n=None):
        """Stamp what is launched in the block as step ``n`` (default: the step after the last one)."""
        if self.backend.timeline is not None:
            raise RuntimeError("a timeline is already recording on this backend; end its step() first")
        self._step = self.next_step if n is None else n
        self.next_step = self._step + 1
        self.backend.timeline = self
        try:
            yield self._step
        finally:
            self.backend.timeline = None

    def stamp(self, stream, name):
        """A new ``Stamp`` of the current step, for the backend to fill."""
        stamp = Stamp(self._step, stream, name)
        self.stamps.append(stamp)
        return stamp

    def intervals(self):
        """Wait for the backend, then every completed launch as an ``Interval``, in launch order, times
        in ns from the earliest start. A launch that raised (no end stamp) is left out."""
        self.backend.synchronize()
        done = [s for s in self.stamps if s.end is not None]
        if not done:
            return []
        elapsed, origin = self.backend.elapsed_ns, done[0].start
        times = [(elapsed(origin, s.start), elapsed(origin, s.end)) for s in done]
        zero = min(start for start, _ in times)
        return [Interval(s.step, s.stream, s.name, start - zero, end - zero) for s, (start, end) in zip(done, times)]
