"""A race detector over the launches of recorded passes: happens-before from streams and events, never
from the clock (docs/design.md §2).

A ``Recorder`` on a backend logs, in program order, every launch with its stream, every record and wait
of an event, every ``synchronize()`` (a host wait for everything enqueued before it), and, for each
launch, the memory it reads and writes, as NumPy views of that memory:

- on the NumPy backend (serial mode: each launch runs as it is enqueued, or, captured in a graph, when
  the graph is launched), through ``tracked``: every array the backend makes, and every array computed
  from one, says what reads and writes it, the BLAS products included;
- on the CuPy stand-in, from the operations each launch enqueues (``fake_cupy.queues``' observer): a
  kernel reads its ``const`` pointers and writes the others, cuBLAS writes its output, NCCL its buffer.

``races(recorder)`` orders the launches by stream order, each wait after the recording it waits for (the
event's latest at the time of the wait, as ``cudaStreamWaitEvent`` has it) and each ``synchronize()``
after everything before it, and reports every pair that nothing orders where one writes memory that the
other reads or writes (views overlap when they share an element: ``np.shares_memory``), naming both
launches, their streams and the buffer.
"""

import collections

import numpy as np
from numpy.lib.array_utils import byte_bounds

import tracked
from leapfrog_gpu.backends.host import NumpyBackend


class Launch:
    """One launch: its name, its stream, what it touched (``[(view, writes)]``), the arrays it handed an op
    (``given``), its vector clock, and which launch of that name on that stream it is (``gradients[3] #2 on
    worker1``: the second)."""

    __slots__ = ("name", "stream", "on", "accesses", "clock", "count", "given")

    def __init__(self, name, stream, on):
        self.name, self.stream, self.on = name, stream, on  # the stream's name, the stream
        self.accesses, self.clock, self.count, self.given = [], None, 0, []

    def __repr__(self):
        return f"{self.name} #{self.count} on {self.stream}"


class Race(collections.namedtuple("Race", "first second buffer first_writes second_writes")):
    """Two launches nothing orders that touch ``buffer``, at least one of them writing it."""

    def __str__(self):
        def verb(writes):
            return "writes" if writes else "reads"

        return (f"{self.first} {verb(self.first_writes)} {self.buffer} and {self.second} "
                f"{verb(self.second_writes)} it, with no event between them")


class Recorder:
    """Log the launches, records, waits and synchronizations of ``backend`` from now on, and what each
    launch touches: a NumPy backend in serial mode made before the network (``host_backend``), or the CuPy
    backend on the stand-in. ``close()`` (or leaving the ``with`` block) stops."""

    def __init__(self, backend):
        if backend.name == "numpy" and backend.mode != "serial":
            raise ValueError("the recorder reads the host backend's accesses in serial mode only")
        self.backend, self.log, self.current, self.made, self._strays = backend, [], None, [], []
        self._saved = {name: getattr(backend, name) for name in ("launch", "record", "wait", "synchronize")}
        backend.launch, backend.record, backend.wait = self._launch, self._record, self._wait
        backend.synchronize = self._synchronize
        if backend.name == "numpy":
            self._saved["xp"] = backend.xp
            backend.xp, self._stop = tracked.NUMPY, tracked.listen(self)
        else:
            self._saved["copy_in"] = backend.copy_in
            backend.copy_in = self._copy_in
            backend.xp.queues.device.observer = self._observe

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for name, method in self._saved.items():
            setattr(self.backend, name, method)
        if self.backend.name == "numpy":
            self._stop()
        else:
            self.backend.xp.queues.device.observer = None

    def _stream(self, stream):
        if self.backend.name == "numpy":
            return stream.name
        return self.backend._stream_names.get(stream.ptr, f"stream {stream.ptr:#x}")

    def _launch(self, stream, name, fn, *args):
        launch = Launch(name, self._stream(stream), stream)
        launch.given = [_host_view(array) for array in _given(self.backend.ops, fn, args)]
        self.log.append(("launch", launch))

        def run(*given):
            outer, self.current = self.current, launch
            try:
                fn(*given)
            finally:
                self.current = outer

        self._saved["launch"](stream, name, run, *args)

    def _copy_in(self, stream, dst, src):
        """The CuPy backend's copy in, a launch of its own (the host backend's is one already)."""
        self._launch(stream, "copy_in", self._saved["copy_in"], stream, dst, src)

    def _record(self, stream, event):
        self.log.append(("record", self._stream(stream), event))
        self._saved["record"](stream, event)

    def _wait(self, stream, event):
        self.log.append(("wait", self._stream(stream), event))
        self._saved["wait"](stream, event)

    def _synchronize(self):
        self.log.append(("synchronize",))
        self._saved["synchronize"]()

    def touch(self, view, writes):
        if self.current is not None:
            self.current.accesses.append((view, writes))

    def born(self, array):
        """A host array made by the running launch (``made``: its name in a report)."""
        if self.current is not None:
            self.made.append((array, self.current))

    def _observe(self, stream, name, reads, writes):
        """An operation the running launch enqueued on the stand-in: what it touches, unless it went to another
        stream than the launch's (``strays``), whose order the launch's is not."""
        if self.current is not None and stream is not self.current.on:
            self._strays.append((self.current, name, self._stream(stream)))
            return
        for view in reads:
            self.touch(view, False)
        for view in writes:
            self.touch(view, True)

    def unseen(self, names=()):
        """``gradients[3] #1 on worker1 touched nothing of nabla_w[3]``: each array a launch gave one of the
        backend's ops (``ops_numpy``, ``CudaOps``; each of which reads or writes every array it takes) that the
        recorder saw it neither read nor write: the sign of an operation it cannot see into."""
        return [f"{launch} touched nothing of {name(array, names)}" for launch in self.launches()
                for array in launch.given if array.size
                and not any(np.shares_memory(array, view) for view, _ in launch.accesses)]

    def strays(self):
        """``gradients[3] #1 on worker1 enqueued matmul on main``: each operation a launch enqueued on another
        stream than its own (on the stand-in), whose order is not the launch's: left out of its accesses."""
        self.launches()
        return [f"{launch} enqueued {what} on {stream}" for launch, what, stream in self._strays]

    def launches(self):
        """The launches logged so far, each with its vector clock: ``clock[s]`` launches of stream s happen
        before it (itself included)."""
        clocks, base, recorded, launches, counts = {}, {}, {}, [], collections.Counter()
        for entry in self.log:
            if entry[0] == "synchronize":
                base = _join(base, *clocks.values())
                clocks = {stream: dict(base) for stream in clocks}
                continue
            if entry[0] == "launch":
                launch = entry[1]
                clock = clocks.setdefault(launch.stream, dict(base))
                clock[launch.stream] = clock.get(launch.stream, 0) + 1
                launch.clock = dict(clock)
                counts[launch.name, launch.stream] += 1
                launch.count = counts[launch.name, launch.stream]
                launches.append(launch)
                continue
            kind, stream, event = entry
            clock = clocks.setdefault(stream, dict(base))
            if kind == "record":
                recorded[id(event)] = (event, dict(clock))
            elif id(event) in recorded:  # a wait for an event never recorded waits for nothing
                clocks[stream] = _join(clock, recorded[id(event)][1])
        return launches


def _join(*clocks):
    joined = {}
    for clock in clocks:
        for stream, count in clock.items():
            joined[stream] = max(joined.get(stream, 0), count)
    return joined


def ordered(first, second):
    """Whether launch ``first`` happens before launch ``second``."""
    return second.clock.get(first.stream, 0) >= first.clock[first.stream]


def races(recorder, names=()):
    """The ``Race`` of every pair of the recorded launches that nothing orders where one writes memory the
    other touches, in program order, once per pair and buffer; ``names`` (``buffer_names``) names the
    buffers."""
    launches = recorder.launches()
    order = {id(launch): i for i, launch in enumerate(launches)}
    touched = []  # (first byte, last byte + 1, launch, view, writes), each view once per launch
    for launch in launches:
        seen = {}
        for view, writes in launch.accesses:
            if view.size:
                key = (view.__array_interface__["data"][0], view.shape, view.strides)
                seen[key] = (view, writes or seen.get(key, (None, False))[1])
        touched += [(*byte_bounds(view), launch, view, writes) for view, writes in seen.values()]
    touched.sort(key=lambda access: access[0])
    found = {}
    for i, (_, end, a, va, wa) in enumerate(touched):
        for start, _, b, vb, wb in touched[i + 1:]:
            if start >= end:
                break
            if a.stream == b.stream or not (wa or wb) or ordered(a, b) or ordered(b, a) or not np.shares_memory(va, vb):
                continue
            (first, fw), (second, sw) = sorted(((a, wa), (b, wb)), key=lambda pair: order[id(pair[0])])
            buffer = name(va if va.nbytes <= vb.nbytes else vb, names, recorder.made)
            key = (id(first), id(second), buffer)
            if key in found:
                fw, sw = fw or found[key].first_writes, sw or found[key].second_writes
            found[key] = Race(first, second, buffer, fw, sw)
    return sorted(found.values(), key=lambda race: (order[id(race.first)], order[id(race.second)], race.buffer))


def report(found):
    """The races, one a line."""
    return "\n".join(str(race) for race in found)


# -- the buffers' names ------------------------------------------------------------------------------------

SKIPPED = {"backend", "net", "main", "xp", "comm", "engine", "captured", "chosen", "stats", "_events", "layer",
           "self"}
"""Attributes the names' walk does not follow: other objects' own state, or no buffer of the pass."""


def buffer_names(net):
    """``[(name, view)]``: every array of ``net``'s plans (``delta[3]``, ``scratch[2]``, ``reducer.flat``, a
    DAG's ``g[h]``) and of the network itself (``controls.array``), plans first."""
    found, seen = [], set()

    def walk(value, name, depth):
        if _is_array(value):
            found.append((name, _host_view(value)))
        elif depth < 4 and isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{name}[{key}]", depth + 1)
        elif depth < 4 and isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(item, f"{name}[{index}]", depth + 1)
        elif depth < 4 and type(value).__module__.startswith("leapfrog_gpu") and id(value) not in seen:
            seen.add(id(value))
            for attr, item in vars(value).items() if hasattr(value, "__dict__") else ():
                if attr not in SKIPPED:
                    walk(item, f"{name}.{attr.lstrip('_')}" if name else attr.lstrip("_"), depth + 1)

    for plan in net._plans.values():
        walk(plan, "", 0)
    walk(net, "", 0)
    return found


def name(view, names, made=()):
    """The name of the smallest named array holding ``view`` (else of the smallest it overlaps); else its
    shape, and the launch that made it if ``made`` (``Recorder.made``) says."""
    lo, hi = byte_bounds(view)
    holders = []
    for i, (label, array) in enumerate(names):
        if np.shares_memory(view, array):
            start, end = byte_bounds(array)
            holders.append((not start <= lo < hi <= end, array.size, i, label))
    if holders:
        return min(holders)[3]
    makers = [launch for array, launch in made if np.shares_memory(view, array)]
    return f"a {'x'.join(map(str, view.shape))} array" + (f" made by {makers[0]}" if makers else "")


def _given(ops, fn, args):
    """The backend's arrays (not a host batch copied in) that ``fn(*args)`` hands one of ``ops``: ``fn``'s
    arguments if it is an op, the arguments of each ``(op, *arguments)`` in them otherwise."""
    op = getattr(ops, getattr(fn, "__name__", None) or "_", None)
    if op is not None and (op is fn or getattr(op, "__func__", op) is getattr(fn, "__func__", fn)):
        return [arg for arg in args if isinstance(arg, tracked.Tracked) or _is_array(arg) and hasattr(arg, "_a")]
    calls = [call for arg in args for call in (arg if isinstance(arg, list) else [arg])]
    return [array for call in calls if isinstance(call, tuple) and call for array in _given(ops, call[0], call[1:])]


def _is_array(value):
    return isinstance(value, np.ndarray) or type(value).__name__ == "ndarray" and hasattr(value, "_a")


def _host_view(array):
    """The NumPy view of the memory of a host or stand-in array."""
    return array._a if hasattr(array, "_a") else array.view(np.ndarray)


def host_backend():
    """A NumPy backend whose launches a ``Recorder`` can read: serial mode, nothing on it yet."""
    return NumpyBackend(mode="serial")
