"""Stream capture on the stand-in: ``Stream.begin_capture(mode)`` (refused on the null stream) and
``end_capture()`` returning a ``Graph``, whose ``launch(stream=None)`` replays what was captured: kernel
launches with the argument values they had (pointers and scalars baked in), copies, ufuncs.

Streams join a capture by waiting on an event recorded in it and must be joined back before
``end_capture`` (else ``cudaErrorStreamCaptureUnjoined``); a capturing stream that waits on an event
recorded outside the capture is refused (stricter than CuPy: that dependency would not be part of the
graph). A replay runs the graph's nodes in an adversarial order that respects the captured dependencies
only. What may not run during a capture is refused where it is modelled: cuBLAS and host transfers in
``arrays``, allocations in ``memory``, synchronizing in ``streams``.

Capture modes, as CUDA has them (``cudaStreamCaptureMode``; CuPy's default is relaxed): a thread that
began a capture in global or thread-local mode, and every thread while a capture in global mode is under
way, may not make a potentially unsafe call (``queues.unsafe``: a host wait or query, an allocation
that reaches ``cudaMalloc``, pinned memory); the call raises ``cudaErrorStreamCaptureUnsupported`` and
invalidates the capture, whose ``end_capture`` then raises ``cudaErrorStreamCaptureInvalidated``. In
relaxed mode those calls pass.

Node priorities: a kernel node keeps the priority of the stream it was captured on. ``Graph`` is
instantiated as CuPy does it, with flags 0, so its nodes run at the priority of the stream it is launched
on; an executable graph made by ``cudaGraphInstantiateWithFlags`` with
``cudaGraphInstantiateFlagUseNodePriority`` (``bindings``) runs each node at its own. ``node_runs()``
says at which priority each node ran.
"""

import functools
import threading

from . import queues
from .queues import CUDARuntimeError, RELAXED


class Node:
    __slots__ = ("index", "name", "fn", "touches", "stream", "deps", "priority")

    def __init__(self, index, name, fn, touches, stream, deps):
        self.index, self.name, self.fn, self.touches = index, name, fn, touches
        self.stream, self.deps, self.priority = stream, deps, stream._priority


class Capture:
    """The graph a capture builds: nodes with the dependencies their streams had when captured."""

    def __init__(self, origin, mode):
        self.origin, self.nodes, self.streams = origin, [], {origin}
        self.mode, self.thread = mode, threading.get_ident()
        self.ended, self.invalidated = False, None

    def add(self, stream, name, fn, touches):
        if self.invalidated is not None:
            raise CUDARuntimeError("cudaErrorStreamCaptureInvalidated",
                                   f"the capture was invalidated by {self.invalidated}")
        node = Node(len(self.nodes), name, fn, touches, stream, frozenset(stream._frontier))
        self.nodes.append(node)
        stream._frontier = {node.index}

    def ancestors(self, indices):
        seen, todo = set(), list(indices)
        while todo:
            for dep in self.nodes[todo.pop()].deps:
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen


def begin(stream, mode=None):
    """``stream.begin_capture(mode)``; ``None`` is CuPy's default, relaxed."""
    mode = RELAXED if mode is None else mode
    if mode not in queues.MODES:
        raise CUDARuntimeError("cudaErrorInvalidValue", f"capture mode {mode!r} is none of {sorted(queues.MODES)}")
    if stream._null:
        raise RuntimeError("cannot capture on the default (legacy) stream")
    if stream._capture is not None:
        raise CUDARuntimeError("cudaErrorIllegalState", f"{stream!r} is capturing already")
    stream._capture, stream._frontier = Capture(stream, mode), set()


def end(stream):
    """``stream.end_capture()``: the ``Graph``, once every stream that joined is joined back."""
    capture = stream._capture
    if capture is None or capture.origin is not stream:
        raise CUDARuntimeError("cudaErrorStreamCaptureUnmatched",
                               f"the capture was not begun on {stream!r}")
    joined = capture.ancestors(stream._frontier) | stream._frontier
    unjoined = [s for s in capture.streams if s is not stream and not s._frontier <= joined]
    for member in capture.streams:
        member._capture = member._frontier = None
    capture.ended = True
    if capture.invalidated is not None:
        raise CUDARuntimeError("cudaErrorStreamCaptureInvalidated",
                               f"the capture was invalidated by {capture.invalidated}")
    if unjoined:
        raise CUDARuntimeError(
            "cudaErrorStreamCaptureUnjoined",
            f"capture sequence contains a fork that was not joined to the primary stream: {unjoined} "
            "(record an event on each, and make the capturing stream wait for it before end_capture)")
    return Graph._from(capture)


def join(stream, event):
    """``stream.wait_event(event)`` for an event last recorded in a capture: ``stream`` joins it."""
    capture, nodes = event._captured
    if capture.ended:
        raise CUDARuntimeError("cudaErrorStreamCaptureIsolation",
                               f"{event!r} was last recorded in a capture that has ended; record it again")
    if stream._capture is None:  # the stream joins the capture
        capture.streams.add(stream)
        stream._capture, stream._frontier = capture, set(nodes)
    elif stream._capture is capture:
        stream._frontier |= nodes
    else:
        raise CUDARuntimeError("cudaErrorStreamCaptureIsolation",
                               "the wait would merge two independent capture sequences")


class GraphExec:
    """An executable graph (``cudaGraphExec_t``): its nodes, and whether they run at their own priorities."""

    def __init__(self, nodes, use_priority):
        self.nodes, self.use_priority = nodes, use_priority
        self.handle = next(queues.device.ids)
        queues.device.handles[self.handle] = self

    def __int__(self):
        return self.handle

    def launch(self, stream):
        queues.device.trace.append(("launch", stream.ptr, "graph"))
        replay = functools.partial(self._replay, stream)
        if stream._capture is not None:
            stream._capture.add(stream, "graph", replay, ())
            return
        queues.before(stream)
        queues.push(stream, queues.Item("graph", "graph", replay))

    def _replay(self, stream):
        """Every node once its dependencies have run, the ready ones taken in the device's order."""
        done, remaining = set(), list(self.nodes)
        while remaining:
            ready = [node for node in remaining if node.deps <= done]
            lane = queues.pick({node.stream for node in ready})
            node = next(node for node in ready if node.stream is lane)
            queues.check_touches(node.name, f"a graph node captured on {lane!r}", node.touches)
            priority = node.priority if self.use_priority else stream._priority
            queues.device.node_runs.append((node.name, node.stream.ptr, priority))
            node.fn()
            done.add(node.index)
            remaining.remove(node)


class Graph:
    """``cupy.cuda.Graph``: made by ``Stream.end_capture()``, instantiated with flags 0 as CuPy does;
    ``graph`` and ``graphExec`` are its handles; ``launch(stream)`` replays it."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("currently this class cannot be initiated by the user and must be created "
                                  "via stream capture")

    @classmethod
    def _from(cls, capture):
        graph = object.__new__(cls)
        graph._nodes = tuple(capture.nodes)
        graph.graph = next(queues.device.ids)
        queues.device.handles[graph.graph] = graph
        graph._exec = GraphExec(graph._nodes, use_priority=False)
        graph.graphExec = graph._exec.handle
        return graph

    def launch(self, stream=None):
        self._exec.launch(queues.device.stack[-1] if stream is None else stream)

    def upload(self, stream=None):
        pass


def node_runs():
    """``(node name, ptr of the stream it was captured on, priority it ran at)`` of every graph node run
    since ``reset``."""
    return list(queues.device.node_runs)
