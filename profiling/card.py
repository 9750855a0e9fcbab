"""The GPU a kernel model describes: ``Card``, the H100 SXM and H200 entries, and ``from_device``.

``bandwidth`` is what a streaming kernel reaches, not the data sheet's peak: ``STREAM_SHARE`` of the
peak for a listed card, or the device-to-device copy measured in the same run for the lent one.
"""

from dataclasses import dataclass

STREAM_SHARE = 0.9  # of the peak DRAM bandwidth that a streaming kernel reaches (H200: 4.3 of 4.8 TB/s)


@dataclass(frozen=True)
class Card:
    """One GPU: SMs, boost clock (Hz), DRAM bandwidth a kernel reaches (bytes/s), L2 (bytes), shared
    memory per SM (bytes) and resident warps per SM."""

    name: str
    sms: int
    clock: float
    bandwidth: float
    l2: int
    shared_per_sm: int
    max_warps: int


H100 = Card("H100 SXM", 132, 1.98e9, STREAM_SHARE * 3.35e12, 50 * 2**20, 228 * 1024, 64)
H200 = Card("H200", 132, 1.98e9, 4.3e12, 50 * 2**20, 228 * 1024, 64)
CARDS = {"H100": H100, "H200": H200}


def from_device(properties, copy_bandwidth=None):
    """The ``Card`` of ``cupy.cuda.runtime.getDeviceProperties(device)``. Its bandwidth is
    ``copy_bandwidth`` (bytes/s, a copy's read plus write over its time) where one was measured, else
    ``STREAM_SHARE`` of the peak (double data rate x bus width)."""
    peak = 2 * properties["memoryClockRate"] * 1e3 * properties["memoryBusWidth"] / 8
    name = properties["name"]
    return Card(name=name.decode() if isinstance(name, bytes) else name,
                sms=properties["multiProcessorCount"], clock=properties["clockRate"] * 1e3,
                bandwidth=copy_bandwidth if copy_bandwidth else STREAM_SHARE * peak,
                l2=properties["l2CacheSize"], shared_per_sm=properties["sharedMemPerMultiprocessor"],
                max_warps=properties["maxThreadsPerMultiProcessor"] // 32)


def lent_card():
    """The ``Card`` of this machine's GPU (device 0), its bandwidth a copy measured now (CuPy)."""
    import cupy

    from leapfrog_gpu import get_backend
    from leapfrog_gpu.backends import timing

    with get_backend("cupy") as backend:
        copy = timing.copy_bandwidth(backend)["median"] * 1e9
    return from_device(cupy.cuda.runtime.getDeviceProperties(0), copy)
