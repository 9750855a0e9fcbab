"""The same networks trained by PyTorch, what a user would otherwise run, timed in the bench's alternation:
the MLP's step (``SGDStep``; its rows ``steps`` and records ``record``) and the RNN's (``TorchRNN``).

The MLP: same widths, activation, quadratic cost, dtype and device; samples are rows (``x`` is (B, n_1)), as
PyTorch's ``linear`` expects, so ``a @ w.T + b`` computes equation (2) for the batch. Its update
(``optimizer``): ``"loop"`` (``p.sub_(p.grad)`` for each), or torch.optim's with ``foreach=True`` or
``fused=True``; ``rule``, one of ``leapfrog_gpu``'s optimizers (``Adam(...)``), steps by torch.optim's class of
its name on the batch-MEAN cost, as ours; ``graph=True`` (a GPU only) replays a ``torch.cuda.CUDAGraph`` of
the loop step (``_graphed``).
"""

import contextlib
import math
import time

import numpy as np

from ...backends import to_host
from ...core.torch_io import INSTALL
from .runner import cpu_name

ACTIVATIONS = ("sigmoid", "tanh", "relu")
OPTIMIZERS = ("loop", "foreach", "fused")
STEPS = {"torch-autograd": {}, "torch-sgd-foreach": {"optimizer": "foreach"}, "torch-sgd-fused": {"optimizer": "fused"},
         "torch-cuda-graph": {"graph": True}}
"""PyTorch's MLP steps by record name: the loop update, ``torch.optim.SGD(foreach=True)``, ``(fused=True)``,
and the CUDA graph (``--graph`` on a GPU)."""


def skipped(no_torch):
    """The one line every bench prints where its PyTorch rows would be (``no_torch``: ``--no-torch`` was
    given), or None when ``torch`` imports and runs."""
    if no_torch:
        return "PyTorch anchor skipped (--no-torch)"
    try:
        import torch  # noqa: F401
    except ImportError:
        return f"PyTorch anchor skipped ({INSTALL})"  # within the output's 100 columns
    return None


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


def steps(args, sizes, batch, settings, device, optimizer="sgd", rule=None):
    """``(record name, threads) -> SGDStep`` of the MLP ``sizes`` at ``batch`` on ``device``, all on one network
    (2 GB at N = 4096), on the CPU at each thread count of ``settings`` (as ours at each BLAS setting): the
    eager steps (for ``rule``, the optimizer named ``optimizer`` other than plain SGD, torch.optim's
    ``torch-NAME-foreach`` and ``-fused`` only), with ``--graph`` on a GPU the loop update as a CUDA graph."""
    plain, gpu = optimizer == "sgd", device == "cuda"
    modes = (["torch-autograd"] * plain + [f"torch-{optimizer}-foreach", f"torch-{optimizer}-fused"]
             + ["torch-cuda-graph"] * (args.graph and plain and gpu))
    network, found = mlp(sizes, batch, args.dtype, device), {}
    for threads in settings:
        with num_threads(threads):
            for mode in modes:
                how = STEPS.get(mode, {"optimizer": mode.rsplit("-", 1)[1]})
                found[mode, threads] = SGDStep(sizes, batch, args.dtype, device, args.activation, network=network,
                                               rule=rule, **how)
    return found


def record(args, sizes, batch, device, mode, threads, optimizer, times):
    """The record of PyTorch's ``mode`` on ``device`` at ``threads`` with its ``times`` (``step_ms`` and
    ``backward_ms``, or ``refused``), its fields those of ours."""
    import torch

    return {"backend": f"torch-{torch.__version__}",
            "device": torch.cuda.get_device_name() if device == "cuda" else cpu_name(), "dtype": args.dtype,
            "N": sizes[0], "L": len(sizes), "B": batch, "blas_threads": threads, "repeats": args.repeats,
            "optimizer": optimizer, "schedule": mode, "k": 0, "fused": False, "one_pass": False,
            "graph": mode == "torch-cuda-graph", **times, "forward_ms": None, "f1_ms": None, "f2_ms": None,
            "f3_ms": None, "copy_gbps": None}


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


def quadratic_cost(params, x, y, activation="sigmoid"):
    """C = 0.5 * sum ||a^L - y||^2 over the batch; ``params`` is ``[w^2, b^2, w^3, b^3, ...]``, x is (B, n_1)."""
    import torch

    a = x
    for w, b in zip(params[::2], params[1::2]):
        a = getattr(torch, activation)(torch.nn.functional.linear(a, w, b))  # equations (2) and (3)
    return 0.5 * (a - y).square().sum()


class Anchor:
    """What PyTorch's steps share: ``step()`` runs one to its end, its device's work done (``ValueError`` where
    this build of torch refuses it: ``refused``); ``backward_ms(repeats)`` times ``backward()`` alone, each
    after an untimed forward pass (``loss()``), one more untimed first."""

    refused = graph = None

    def __init__(self, torch, device, params):
        self.torch, self.params, self.cuda = torch, params, torch.device(device).type == "cuda"

    def step(self):
        if self.refused:
            raise ValueError(self.refused)
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

    def backward_ms(self, repeats):
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


class SGDStep(Anchor):
    """PyTorch's step of the MLP ``sizes`` at ``batch``, built once (captured, with its ``warmup`` steps).
    ``network``: the ``mlp(...)`` it steps, shared by several steps (by default its own)."""

    def __init__(self, sizes, batch, dtype="float32", device="cpu", activation="sigmoid", seed=0, eta=0.01,
                 graph=False, optimizer="loop", warmup=3, network=None, rule=None):
        import torch

        for name, value, valid in (("activation", activation, ACTIVATIONS), ("optimizer", optimizer, OPTIMIZERS)):
            if value not in valid:
                raise ValueError(f"{name} must be one of {valid}; got {value!r}")
        if (rule is not None and optimizer == "loop") or (graph and optimizer != "loop"):
            raise ValueError(f"a rule ({rule!r}) steps by torch.optim (optimizer 'foreach' or 'fused'), graph=True by "
                             f"the loop update; got optimizer {optimizer!r}")
        if graph and torch.device(device).type != "cuda":
            raise ValueError(f"graph=True needs device='cuda' (torch.cuda.CUDAGraph captures CUDA work); "
                             f"got {device!r}")
        params, x, y = network or mlp(sizes, batch, dtype, device, seed)
        super().__init__(torch, device, params)
        self.graph, self.refused = graph, fused_refusal(device, rule) if optimizer == "fused" else None
        self.loss = lambda: quadratic_cost(params, x, y, activation) / (batch if rule else 1)
        self.scale = eta / batch
        self.update = self.loop if optimizer == "loop" else None if self.refused else \
            torch_optimizer(torch, params, rule, self.scale, **{optimizer: True}).step
        if graph:
            self.run = _graphed(torch, self.run, params, x, y, activation, self.scale, warmup)

    def loop(self):
        with self.torch.no_grad():
            for p in self.params:
                p.sub_(p.grad, alpha=self.scale)


def _graphed(torch, step, params, x, y, activation, scale, warmup):
    """The step as a CUDA graph, captured by PyTorch's recipe for a whole network (warm-up steps on a side
    stream, the gradients set to None so that the captured backward allocates them from the graph's private
    pool, static inputs); returns a function that copies the batch ``x``, ``y`` into them and replays it."""
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


class TorchRNN(Anchor):
    """``net`` (an ``RNN``) written as ``torch.nn.RNN``, ``GRU`` or ``LSTM`` (its cell's) plus a ``Linear`` output
    layer, on the batch ``x``, ``y`` (as ``rnn.sequences`` gives them), on ``device``, stepped by
    ``torch.optim.SGD(foreach=True)`` at ``eta`` (as ``RNN.sgd_step`` takes it)."""

    def __init__(self, torch, net, x, y, device="cpu", eta=1e-9):
        L, N, dtype, gru = net.L, net.sizes[1], getattr(torch, net.dtype), net.cell == "gru"
        tanh = {"nonlinearity": "tanh"} if net.cell == "elman" else {}
        kind = {"elman": "RNN"}.get(net.cell, net.cell.upper())
        self.rnn = getattr(torch.nn, kind)(net.sizes[0], N, num_layers=L - 2, dtype=dtype, **tanh)
        self.out = torch.nn.Linear(N, net.sizes[-1], dtype=dtype)
        weights, recurrent, biases = ([to_host(a) for a in group] for group in (net.weights, net.recurrent, net.biases))
        b_hn = net.parameters() if gru else None
        with torch.no_grad():
            for i in range(L - 2):
                getattr(self.rnn, f"weight_ih_l{i}").copy_(torch.from_numpy(weights[i]))
                getattr(self.rnn, f"weight_hh_l{i}").copy_(torch.from_numpy(recurrent[i]))
                getattr(self.rnn, f"bias_ih_l{i}").copy_(torch.from_numpy(biases[i]))
                getattr(self.rnn, f"bias_hh_l{i}").zero_()
                if gru:  # b_hn, inside r * (u_n h + b_hn)
                    b = to_host(b_hn[net.hidden[i]]["b_hn"])
                    getattr(self.rnn, f"bias_hh_l{i}")[2 * N:].copy_(torch.from_numpy(b))
            self.out.weight.copy_(torch.from_numpy(weights[-1]))
            self.out.bias.copy_(torch.from_numpy(biases[-1]))
        self.rnn, self.out = self.rnn.to(device), self.out.to(device)
        self.x = torch.from_numpy(x.transpose(0, 2, 1).copy()).to(device)
        self.y = torch.from_numpy(y.transpose(0, 2, 1).copy()).to(device)
        super().__init__(torch, device, [*self.rnn.parameters(), *self.out.parameters()])
        for i in range(L - 2) if not gru else ():  # held at zero: the RNN has one bias a layer (a GRU two)
            getattr(self.rnn, f"bias_hh_l{i}").requires_grad_(False)
        self.update = torch.optim.SGD([p for p in self.params if p.requires_grad], lr=eta / x.shape[2],
                                      foreach=True).step

    def loss(self):
        states, _ = self.rnn(self.x)
        return 0.5 * ((self.torch.tanh(self.out(states)) - self.y) ** 2).sum()
