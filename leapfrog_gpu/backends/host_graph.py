"""Capture and replay on host streams: what a CUDA graph is to CUDA streams (docs/design.md §4).

While a capture is open on a ``NumpyBackend``, what is enqueued on the origin stream, and on every
stream that joins the capture, is recorded instead of run: each stream's operations, records and waits,
in order, with the events' recordings counted from the start of the capture. The rules are those of
CUDA stream capture, checked as the items arrive and when the capture ends:

- a stream joins a capture only by waiting on an event recorded in it; anything else enqueued on a
  stream that has not joined is refused (CUDA would run it at once, outside the graph);
- a wait on an event that nothing in the capture records is refused (the graph would depend on work
  outside it);
- every stream that joined is joined back: the origin waits on an event that the stream records after
  its last item (else that item would run outside the step);
- nothing synchronizes with the host, and nothing is copied in from it.

When the capture ends each operation is bound to its arguments (``host_bound``), as a CUDA graph fixes its
kernels' arguments. ``HostGraph.launch()`` enqueues each stream's recorded items again as one entry of that
stream, the events' recordings offset past every earlier one: it plans nothing and checks nothing again.
"""

from .host_bound import bound


class CaptureError(RuntimeError):
    """Work enqueued during a capture breaks a rule of stream capture (see the module docstring)."""


class HostCapture:
    """What one capture has recorded so far; ``graph()`` checks the joins and freezes it.

    ``item`` is the backend's item class (``op``, ``record``, ``wait`` or ``mark``), whose
    ``generation`` here counts the recordings of its event within the capture.
    """

    def __init__(self, origin, item):
        self.origin, self._item = origin, item
        self.items = {origin: []}  # stream -> its items in order; the streams that joined
        self.order = []  # (stream, item), every item in the order it was enqueued
        self.records = {}  # event -> recordings in the capture so far

    def add(self, stream, item):
        """Record an operation or a mark enqueued on ``stream``."""
        if stream not in self.items:
            raise CaptureError(
                f"{stream.name} enqueued {item.name!r} during a capture of {self.origin.name} without having "
                "joined it: a stream joins a capture only by first waiting on an event recorded in it")
        self.items[stream].append(item)
        self.order.append((stream, item))

    def record(self, stream, event):
        count = self.records.get(event, 0) + 1
        self.add(stream, self._item("record", event.name, event=event, generation=count))
        self.records[event] = count

    def wait(self, stream, event):
        count = self.records.get(event, 0)
        if count == 0:
            raise CaptureError(
                f"{stream.name} waits on event {event.name!r} during a capture of {self.origin.name}, but "
                "nothing in the capture records it: the graph would depend on work outside it")
        self.items.setdefault(stream, [])
        self.add(stream, self._item("wait", event.name, event=event, generation=count))

    def graph(self, backend):
        """The ``HostGraph`` of what was recorded, once every stream that joined is joined back, each operation
        bound to its arguments (``host_bound``)."""
        waited = {}
        for item in self.items[self.origin]:
            if item.kind == "wait":
                waited[item.event] = max(waited.get(item.event, 0), item.generation)
        for stream, items in self.items.items():
            last = items[-1] if items else None
            if stream is not self.origin and (last.kind != "record" or waited.get(last.event, 0) < last.generation):
                raise CaptureError(
                    f"{stream.name} is not joined back into {self.origin.name} before the capture ends: "
                    f"{self.origin.name} must wait on an event {stream.name} records after its last item "
                    f"({last.kind} {last.name!r}), or that work would run outside the step")
        ops = {id(item): self._item("op", item.name, bound(item.fn, item.args))
               for items in self.items.values() for item in items if item.kind == "op"}
        items = {stream: [ops.get(id(item), item) for item in listed] for stream, listed in self.items.items()}
        order = [(stream, ops.get(id(item), item)) for stream, item in self.order]
        return HostGraph(backend, items, order, self.records)


class HostGraph:
    """A captured piece of work: ``launch()`` enqueues it again, on the streams it was captured on.

    ``streams`` lists ``(stream, items)``; ``order`` every ``(stream, item)`` as enqueued (the order of
    the ``serial`` mode); ``records`` how many times each event is recorded in one launch.
    """

    def __init__(self, backend, items, order, records):
        self._backend = backend
        self.streams = [(stream, tuple(stream_items)) for stream, stream_items in items.items()]
        self.order = tuple(order)
        self.records = dict(records)

    def __repr__(self):
        count = sum(len(items) for _, items in self.streams)
        return f"HostGraph({count} items on {', '.join(stream.name for stream, _ in self.streams)})"

    def launch(self):
        self._backend.replay(self)
