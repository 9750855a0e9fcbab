"""The same networks trained by PyTorch, what a user would otherwise run, timed in the bench's alternation:
``Step``, the SGD step of a network's own ``to_torch()`` module (a copy of its parameters, in its dtype and on
its device) on our batch, each sample a row, and the network's cost, quadratic, over the batch's mean; updated
by ``"loop"`` (``p -= lr p.grad`` for each) or by torch.optim's optimizer of the same name and hyper-parameters
as ours, ``foreach=True`` or ``fused=True``; ``graph=True`` replays a CUDA graph of the loop."""

import contextlib
import time

import numpy as np

from ...core.torch_io import INSTALL

UPDATES = ("loop", "foreach", "fused")


def skipped(no_torch):
    """The one line every bench prints where its PyTorch rows would be (``no_torch``: ``--no-torch`` was
    given), or None when ``torch`` imports."""
    if no_torch:
        return "PyTorch anchor skipped (--no-torch)"
    try:
        import torch  # noqa: F401
    except ImportError:
        return f"PyTorch anchor skipped ({INSTALL})"  # within the output's 100 columns
    return None


def fused_refusal(device, rule):
    """Why torch.optim's ``rule`` (one of ours) with ``fused=True`` does not step on ``device`` in this build (a
    one-parameter trial), or None."""
    import torch

    p = torch.zeros(2, device=device, requires_grad=True)
    p.grad = torch.ones(2, device=device)
    try:
        torch_optimizer(torch, [p], rule, fused=True).step()
    except (RuntimeError, ValueError, TypeError) as error:
        return f"torch {torch.__version__} refuses fused=True here: {str(error).splitlines()[0]}"
    return None


def torch_optimizer(torch, params, rule, **how):
    """torch.optim's optimizer of ``rule`` (``SGD(...)``, ``Adam(...)``: of ``leapfrog_gpu``'s) over ``params``."""
    return getattr(torch.optim, type(rule).__name__)(params, **rule.hyper(), **how)


@contextlib.contextmanager
def num_threads(threads):
    """A context in which PyTorch's CPU ops run on ``threads`` threads (None: as they do), left so after it:
    each change rebuilds PyTorch's thread pool, so it changes only for another count."""
    import torch

    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    yield


class Step:
    """PyTorch's step of ``module`` (a network's ``to_torch()``; its parameters that require a gradient) on the
    batch ``x``, ``y`` (ours: (n, B) or (tau, n, B)) by ``rule``, one of our optimizers (plain SGD for ``"loop"``).
    ``step(threads)`` runs one to its end at ``threads`` intra-op threads (None: as set), a ``ValueError`` where
    this build of torch refuses it (``refused``); ``backward_ms(repeats, threads)`` times ``backward()`` alone
    (ms, (repeats,)), each after an untimed forward pass, one more untimed first."""

    def __init__(self, module, x, y, rule, update="loop", graph=False, warmup=3):
        import torch

        self.torch, self.module, self.params = torch, module, [p for p in module.parameters() if p.requires_grad]
        device = self.params[0].device
        if update not in UPDATES or (update == "loop" and not rule.plain) or (graph and update != "loop"):
            raise ValueError(f"update must be one of {UPDATES}, 'loop' for plain SGD only, and 'loop' with "
                             f"graph=True; got {update!r} for {rule!r}")
        if graph and device.type != "cuda":
            raise ValueError(f"graph=True needs a module on a CUDA device (torch.cuda.CUDAGraph captures CUDA "
                             f"work); got {device}")
        self.x, self.y = (torch.from_numpy(np.swapaxes(a, -1, -2).copy()).to(device) for a in (x, y))
        self.cuda, self.batch, self.lr, self.graph = device.type == "cuda", self.x.shape[-2], rule.lr, graph
        self.refused = fused_refusal(device, rule) if update == "fused" else None
        self.update = self.loop if update == "loop" else None if self.refused else \
            torch_optimizer(torch, self.params, rule, **{update: True}).step
        if graph:
            self.run = self._graphed(warmup)

    def loss(self):
        """C = 0.5 sum ||a^L - y||^2 over the batch, over B (the batch mean, as ``train_step``'s optimizers)."""
        return 0.5 * (self.module(self.x) - self.y).square().sum() / self.batch

    def loop(self):
        with self.torch.no_grad():
            for p in self.params:
                p.sub_(p.grad, alpha=self.lr)

    def step(self, threads=None):
        if self.refused:
            raise ValueError(self.refused)
        with num_threads(threads):
            self.run()
        if self.cuda:
            self.torch.cuda.synchronize()

    def run(self):
        self.backward(self.loss())
        self.update()

    def backward(self, c):
        """``c.backward()`` into gradients set to None first."""
        for p in self.params:
            p.grad = None
        c.backward()

    def backward_ms(self, repeats, threads=None):
        with num_threads(threads):
            return np.array([self.time(lambda c=self.loss(): self.backward(c)) for _ in range(repeats + 1)][1:])

    def time(self, fn):
        """The ms ``fn()`` takes, by CUDA events on a GPU, else ``perf_counter``."""
        if not self.cuda:
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        self.torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def _graphed(self, warmup):
        """The step as a CUDA graph, by PyTorch's recipe for a whole network: ``warmup`` steps on a side stream,
        then the capture, whose backward allocates the gradients (None until then) from the graph's pool, on
        static inputs; returns a function that copies the batch into them and replays it."""
        torch, batch = self.torch, (self.x, self.y)
        self.x, self.y = self.x.clone(), self.y.clone()  # the static inputs
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self.run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.run()  # its backward sets the gradients to None first

        def replay():
            self.x.copy_(batch[0])
            self.y.copy_(batch[1])
            graph.replay()

        return replay
