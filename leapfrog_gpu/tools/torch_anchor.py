"""The same MLP trained by PyTorch: what a user would otherwise run, eagerly or as a CUDA graph.

Same widths, activation, quadratic cost, dtype and device; samples are rows (``x`` is (B, n_1)), as
PyTorch's ``linear`` expects, so ``a @ w.T + b`` computes equation (2) for the batch. Times are ms:
``perf_counter`` on the CPU, CUDA events on a GPU, as in ``leapfrog_gpu.backends.timing``.

``graph=True`` (a GPU only) captures forward, ``backward()`` and the SGD update of one step in a
``torch.cuda.CUDAGraph`` as PyTorch's documentation does for a whole network: warm-up steps on a side
stream, the gradients set to None so that the captured backward allocates them from the graph's
private pool, static input and target tensors; a timed step copies the batch into those and replays.

``optimizer``: how the step updates the parameters: ``"loop"`` (``p.sub_(p.grad)`` for each), or
``torch.optim.SGD`` with ``foreach=True`` (one multi-tensor update) or ``fused=True`` (one fused kernel;
``fused_sgd_available`` says whether this build has it on the device). ``compiled=True`` runs the
forward and backward through ``torch.compile`` (the first steps compile: a warm-up of at least 3),
with the ``foreach`` update.
"""

import math
import time

import numpy as np

ACTIVATIONS = ("sigmoid", "tanh", "relu")
OPTIMIZERS = ("loop", "foreach", "fused")


def available():
    """True when ``torch`` imports."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def fused_sgd_available(device="cpu"):
    """Whether ``torch.optim.SGD(fused=True)`` steps on ``device`` in this build (a one-parameter trial)."""
    import torch

    p = torch.zeros(2, device=device, requires_grad=True)
    p.grad = torch.ones(2, device=device)
    try:
        torch.optim.SGD([p], lr=0.1, fused=True).step()
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


def measure(sizes, batch, dtype="float32", device="cpu", activation="sigmoid", threads=None, repeats=20,
            warmup=3, seed=0, eta=0.01, graph=False, optimizer="loop", compiled=False):
    """``(step_ms, backward_ms)``: arrays of ``repeats`` times of an SGD step (forward, ``backward()``,
    update by ``optimizer``) and of ``backward()`` alone (its forward pass untimed). With ``graph=True``
    the step is a replay of its CUDA graph, after copying the batch in, and ``backward_ms`` is None."""
    import torch

    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}; got {activation!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {optimizer!r}")
    if graph and (optimizer != "loop" or compiled):
        raise ValueError("graph=True captures the loop update of an eager step only")
    if graph and torch.device(device).type != "cuda":
        raise ValueError(f"graph=True needs device='cuda' (torch.cuda.CUDAGraph captures CUDA work); got {device!r}")
    if threads is not None:
        torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(seed)
    kind = getattr(torch, dtype)

    def tensor(*shape, scale=1.0):
        return (torch.randn(*shape, generator=generator, dtype=kind) * scale).to(device)

    params = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        params += [tensor(n, m, scale=1 / math.sqrt(m)).requires_grad_(), tensor(n).requires_grad_()]
    x, y = tensor(batch, sizes[0]).sigmoid(), tensor(batch, sizes[-1]).sigmoid()

    cost = torch.compile(quadratic_cost) if compiled else quadratic_cost
    if compiled:
        optimizer, warmup = "foreach", max(warmup, 3)

    def loss():
        return cost(params, x, y, activation)

    def backward(c):
        for p in params:
            p.grad = None
        c.backward()

    def update():
        with torch.no_grad():
            for p in params:
                p.sub_(p.grad, alpha=eta / batch)

    if optimizer != "loop":
        update = torch.optim.SGD(params, lr=eta / batch, **{optimizer: True}).step

    def step():
        backward(loss())
        update()

    clock = _Clock(torch, device)
    if graph:
        step = _graphed(torch, step, params, x, y, activation, eta / batch, max(warmup, 3))
    for _ in range(warmup):
        step()
    step_ms = np.array([clock.time(step) for _ in range(repeats)])
    if graph:
        return step_ms, None
    backward_ms = []
    for _ in range(repeats):
        c = loss()
        backward_ms.append(clock.time(lambda c=c: backward(c)))
    return step_ms, np.array(backward_ms)


def quadratic_cost(params, x, y, activation="sigmoid"):
    """C = 0.5 * sum ||a^L - y||^2 over the batch; ``params`` is ``[w^2, b^2, w^3, b^3, ...]``, x is (B, n_1)."""
    import torch

    a = x
    for w, b in zip(params[::2], params[1::2]):
        a = getattr(torch, activation)(torch.nn.functional.linear(a, w, b))  # equations (2) and (3)
    return 0.5 * (a - y).square().sum()


def _graphed(torch, step, params, x, y, activation, scale, warmup):
    """The step as a CUDA graph, captured by PyTorch's whole-network recipe; returns a function that
    copies the batch ``x``, ``y`` into the static inputs and replays the graph."""
    static_x, static_y = x.clone(), y.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, on a side stream
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    for p in params:
        p.grad = None  # the captured backward allocates the gradients from the graph's pool
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        quadratic_cost(params, static_x, static_y, activation).backward()
        with torch.no_grad():
            for p in params:
                p.sub_(p.grad, alpha=scale)

    def replay():
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    return replay


class _Clock:
    def __init__(self, torch, device):
        self.torch, self.cuda = torch, torch.device(device).type == "cuda"

    def time(self, fn):
        if self.cuda:
            start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            self.torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
