"""The stand-in's memory: the device pool and pinned host memory.

Memory freed (the last array using it collected) goes back to the pool of the stream that allocated it
and is reused by the next allocation of that size on that stream, as CuPy's per-stream arenas do. The
stand-in also queues a poison on that stream (NaN in every byte), and a later operation, enqueued
before the free, that runs after the poison raises ``UseAfterFreeError``: memory handed back while
another stream still uses it is caught. Fresh memory and ``empty`` are NaN-filled (0xFF bytes). An
allocation on a capturing stream raises ``CaptureAllocationError`` (stricter than CuPy: see the
package's docstring). An allocation the pool cannot serve (``cudaMalloc``) and pinned memory
(``cudaHostAlloc``) are potentially unsafe calls during a capture (``queues.unsafe``).
"""

import ctypes
import weakref

import numpy as np

from . import queues

POISON = 0xFF  # every byte 0xFF: a NaN in float32 and float64, -1 in integers
ROUND = 512  # CuPy's pool rounds allocations up to 512 bytes


class CaptureAllocationError(RuntimeError):
    """An allocation on a capturing stream (see the package's docstring: stricter than CuPy)."""


class Chunk:
    """Pool memory: bytes owned by the pool for the device's life, handed to one array at a time."""

    __slots__ = ("buffer", "stream", "device", "next_generation", "dead")

    def __init__(self, nbytes, stream):
        self.buffer = np.full(nbytes, POISON, dtype=np.uint8)
        self.stream, self.device = stream, queues.device
        self.next_generation = 0
        self.dead = -1  # the last generation whose free the stream has reached
        self.device.chunks.append(self)


class Allocation:
    """One array's hold on a chunk; every view of the array shares it. Freed when collected."""

    __slots__ = ("chunk", "generation", "__weakref__")

    def __init__(self, chunk):
        self.chunk, self.generation = chunk, chunk.next_generation
        chunk.next_generation += 1

    def __del__(self):
        chunk = self.chunk
        if chunk.device is not queues.device:  # a previous device (reset since): nothing to do
            return
        stream, generation, buffer = chunk.stream, self.generation, chunk.buffer

        def poison():
            buffer.fill(POISON)
            chunk.dead = max(chunk.dead, generation)

        if stream._capture is None:
            queues.before(stream)
        queues.push(stream, queues.Item("op", "free", poison))  # the host frees; the stream reaches it in order
        queues.device.free[(stream, chunk.buffer.size)].append(chunk)


def malloc(nbytes):
    """An allocation of at least ``nbytes`` from the pool of the current stream."""
    stream = queues.device.stack[-1]
    if stream._capture is not None:
        raise CaptureAllocationError(
            f"allocation of {nbytes} bytes on {stream!r}, which is capturing: CuPy allows it, but the graph "
            "would keep using memory that returns to the pool when the array is freed; allocate every "
            "buffer before begin_capture()")
    size = max(ROUND, -(-nbytes // ROUND) * ROUND)
    free = queues.device.free.get((stream, size))
    if free:
        return Allocation(free.pop())
    queues.unsafe("cudaMalloc (the pool grows)")
    return Allocation(Chunk(size, stream))


def resolve(ptr, nbytes):
    """``(chunk, offset)`` of the pool memory holding the ``nbytes`` bytes at the raw pointer ``ptr``, held
    by an array now; a ``ValueError`` when they are not (a host pointer, freed or out-of-bounds memory)."""
    for chunk in queues.device.chunks:
        offset = ptr - chunk.buffer.ctypes.data
        if 0 <= offset < chunk.buffer.size:
            if offset + nbytes > chunk.buffer.size:
                raise ValueError(f"{nbytes} bytes at {ptr:#x} run past the end of their allocation")
            if any(free is chunk for free in queues.device.free.get((chunk.stream, chunk.buffer.size), ())):
                raise ValueError(f"the memory at {ptr:#x} was freed")
            return chunk, offset
    raise ValueError(f"{ptr:#x} is not device memory from the pool")


class PinnedMemoryPointer(bytearray):
    """Page-locked host memory: ``numpy.frombuffer(alloc_pinned_memory(n), dtype, count)``."""

    @property
    def ptr(self):
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))


def alloc_pinned_memory(size):
    queues.unsafe("cudaHostAlloc")
    memory = PinnedMemoryPointer(max(int(size), 1))
    start = memory.ptr
    queues.device.pinned.append((start, start + len(memory), weakref.ref(memory)))
    return memory


def is_pinned(array):
    """Whether the host array ``array`` lies in memory from ``alloc_pinned_memory`` still alive."""
    start, end = array.ctypes.data, array.ctypes.data + array.nbytes
    return any(lo <= start and end <= hi and ref() is not None for lo, hi, ref in queues.device.pinned)
