"""The GPU a kernel model describes: ``Card``, the H100 SXM and H200 entries, and ``from_device``; and the one
line of a script that needs a GPU where none is usable (``refuse_without_gpu``).

``bandwidth`` is what a streaming kernel reaches, not the data sheet's peak: ``STREAM_SHARE`` of the
peak for a listed card, or the device-to-device copy measured in the same run for the lent one.
"""

from dataclasses import dataclass

from leapfrog_gpu.backends import cuda_status, timing

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


ATTRIBUTES = {"clockRate": 13, "memoryClockRate": 36}
"""The ``cudaDeviceAttr`` numbers of the clocks (kHz), which CUDA 13's ``cudaDeviceProp`` no longer holds."""


def device_properties(runtime, device):
    """``runtime.getDeviceProperties(device)`` (CuPy's runtime) with the clocks it lacks asked for one by one
    (``deviceGetAttribute``)."""
    properties = dict(runtime.getDeviceProperties(device))
    for key, attribute in ATTRIBUTES.items():
        if key not in properties:
            properties[key] = runtime.deviceGetAttribute(attribute, device)
    return properties


def lent_card(backend):
    """The ``Card`` of the GPU of ``backend`` (CuPy), its bandwidth a copy measured now."""
    runtime = backend.xp.cuda.runtime
    copy = timing.copy_bandwidth(backend, repeats=5, launches=10)["median"] * 1e9  # 10 copies an event pair
    return from_device(device_properties(runtime, runtime.getDevice()), copy)


def refuse_without_gpu(parser, what, instead=None):
    """``parser.error`` (one line, exit status 2) that says ``what`` needs a usable CUDA device, why there is none
    here, and what to do ``instead``, unless there is one."""
    status = cuda_status()
    if not status.usable:
        parser.error(f"{what} needs a usable CUDA device: {status.why}" + (f"; {instead}" if instead else ""))


def line(card):
    """One line: what the model takes of ``card``."""
    return (f"card: {card.name}, {card.sms} SMs, {card.clock / 1e9:.2f} GHz, {card.bandwidth / 1e12:.2f} TB/s, "
            f"L2 {card.l2 / 2**20:.0f} MiB, {card.shared_per_sm // 1024} KiB shared and {card.max_warps} warps an SM")
