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
with the ``foreach`` update. ``rule``: one of ``leapfrog_gpu``'s optimizers (``Adam(...)``, ...) instead of
plain SGD: torch.optim's class of its name with its hyper-parameters, on the batch-MEAN cost, as ours.
"""

import contextlib
import math
import time

import numpy as np

from ..cli import pip_install

ACTIVATIONS = ("sigmoid", "tanh", "relu")
OPTIMIZERS = ("loop", "foreach", "fused")


def available():
    """True when ``torch`` imports."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def skipped(no_torch):
    """The one line every bench prints where its PyTorch rows would be (``no_torch``: ``--no-torch`` was
    given), or None when ``torch`` imports and runs."""
    if no_torch:
        return "PyTorch anchor skipped (--no-torch)"
    if not available():
        return f"PyTorch anchor skipped: torch does not import ({pip_install('torch')})"
    return None


def fused_sgd_available(device="cpu"):
    """Whether ``torch.optim.SGD(fused=True)`` steps on ``device`` in this build (a one-parameter trial)."""
    return fused_refusal(device) is None


def fused_refusal(device="cpu", rule=None):
    """Why ``fused=True`` of torch.optim's ``rule`` (plain SGD when None) does not step on ``device`` in this
    build (a one-parameter trial), or None."""
    import torch

    p = torch.zeros(2, device=device, requires_grad=True)
    p.grad = torch.ones(2, device=device)
    try:
        torch_optimizer(torch, [p], rule, 0.1, fused=True).step()
    except (RuntimeError, ValueError, TypeError) as error:
        return f"torch {torch.__version__} refuses fused=True here: {str(error).splitlines()[0]}"
    return None


def torch_optimizer(torch, params, rule, lr, **how):
    """torch.optim's optimizer of ``rule`` (of ``leapfrog_gpu``'s; None: ``SGD(lr)``) over ``params``."""
    return getattr(torch.optim, type(rule).__name__)(params, **rule.hyper(), **how) if rule else \
        torch.optim.SGD(params, lr=lr, **how)


@contextlib.contextmanager
def num_threads(threads):
    """A context in which PyTorch's CPU ops run on ``threads`` threads (None: as they do), left so after
    it: each change rebuilds PyTorch's thread pool, so it changes only when asked for another count."""
    import torch

    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    yield


def measure(sizes, batch, dtype="float32", device="cpu", activation="sigmoid", threads=None, repeats=20,
            warmup=3, seed=0, eta=0.01, graph=False, optimizer="loop", compiled=False, rule=None):
    """``(step_ms, backward_ms)``: arrays of ``repeats`` times of an SGD step (forward, ``backward()``,
    update by ``optimizer``) and of ``backward()`` alone (its forward pass untimed). With ``graph=True``
    the step is a replay of its CUDA graph, after copying the batch in, and ``backward_ms`` is None."""
    import torch

    with num_threads(threads):
        sgd = SGDStep(sizes, batch, dtype, device, activation, seed, eta, graph, optimizer, compiled, warmup, rule=rule)
        clock = Clock(torch, device)
        for _ in range(sgd.warmup):
            sgd.step()
        step_ms = np.array([clock.time(sgd.step) for _ in range(repeats)])
        return step_ms, None if graph else sgd.backward_ms(repeats)


def mlp(sizes, batch, dtype="float32", device="cpu", seed=0):
    """``(params, x, y)``: the MLP's parameters ``[w^2, b^2, w^3, b^3, ...]`` (normal, w scaled by
    1/sqrt(n_{l-1})) and a batch of ``batch`` rows, as tensors on ``device``."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    kind = getattr(torch, dtype)

    def tensor(*shape, scale=1.0):
        return (torch.randn(*shape, generator=generator, dtype=kind) * scale).to(device)

    params = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        params += [tensor(n, m, scale=1 / math.sqrt(m)).requires_grad_(), tensor(n).requires_grad_()]
    return params, tensor(batch, sizes[0]).sigmoid(), tensor(batch, sizes[-1]).sigmoid()


class SGDStep:
    """PyTorch's SGD step of ``[N] * L`` built once: ``step()`` runs one (forward, ``backward()``, update
    by ``optimizer``; with ``graph=True`` a replay of its CUDA graph, captured here), ``backward_ms``
    times ``backward()`` alone. ``warmup``: the untimed steps it needs first (3 at least compiled).
    ``network``: the ``mlp(...)`` it steps, shared by several steps (by default its own). ``rule``: see
    the module docstring (``optimizer`` then ``foreach`` or ``fused``)."""

    def __init__(self, sizes, batch, dtype="float32", device="cpu", activation="sigmoid", seed=0, eta=0.01,
                 graph=False, optimizer="loop", compiled=False, warmup=3, network=None, rule=None):
        import torch

        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}; got {activation!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {optimizer!r}")
        if rule is not None and optimizer == "loop" and not compiled:
            raise ValueError(f"{rule!r} steps by torch.optim: optimizer 'foreach' or 'fused'")
        if graph and (optimizer != "loop" or compiled):
            raise ValueError("graph=True captures the loop update of an eager step only")
        if graph and torch.device(device).type != "cuda":
            raise ValueError(f"graph=True needs device='cuda' (torch.cuda.CUDAGraph captures CUDA work); "
                             f"got {device!r}")
        params, x, y = network or mlp(sizes, batch, dtype, device, seed)
        self.params, self._clock = params, Clock(torch, device)
        self.warmup = max(warmup, 3) if compiled or graph else warmup
        cost = torch.compile(quadratic_cost) if compiled else quadratic_cost
        self.loss = lambda: cost(params, x, y, activation) / (batch if rule else 1)
        if compiled:
            optimizer = "foreach"

        def update():
            with torch.no_grad():
                for p in params:
                    p.sub_(p.grad, alpha=eta / batch)

        if optimizer != "loop":
            update = torch_optimizer(torch, params, rule, eta / batch, **{optimizer: True}).step

        def step():
            self.backward(self.loss())
            update()

        self.step = _graphed(torch, step, params, x, y, activation, eta / batch, self.warmup) if graph else step

    def backward(self, c):
        """``c.backward()`` into gradients set to None first."""
        for p in self.params:
            p.grad = None
        c.backward()

    def backward_ms(self, repeats):
        """``repeats`` times of ``backward()`` alone, each after an untimed forward pass."""
        times = []
        for _ in range(repeats):
            c = self.loss()
            times.append(self._clock.time(lambda c=c: self.backward(c)))
        return np.array(times)


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


class Clock:
    """``time(fn)``: the ms that ``fn()`` takes on ``device``, by CUDA events on a GPU, else ``perf_counter``."""

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
