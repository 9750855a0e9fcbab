"""The recurrent network's float32 gradients against its float64 reference: what docs/rnn.md says of them.

    python profiling/rnn_float32.py             # a few seconds on one core

Two parts. First, the network of ``tests/rnn/test_rnn.py``'s float32 test ([5, 9, 7, 3], every activation
and cost, both output modes, seeds 0..4, every schedule) over more sequence lengths: the worst relative
error per array, max |got - want| / max |want|, against the test's tolerance 1e-6 (1 + tau/8). Second,
two relu networks of odd widths (tau = 64, B = 5) where that error is far larger, beside PyTorch's own
float32 autograd on the same parameters: one where a gradient's terms cancel in its sum over the steps
and the batch (the ratio |sum| / sum of |terms| is printed), one where they cancel earlier, in the
forward sum z = w a + u a + b of a one-unit layer (|z| about 1e-3 of its terms at one step). float32 rounds each term to about 6e-8 of its own size, so a sum that cancels
to a small fraction of its terms keeps that error, relative to the terms, not to the sum.
"""

import argparse
import sys

import numpy as np

from leapfrog_gpu import BPTT, RNN, Leapfrog, NaumovRNN, TimeScan, Wavefront
from leapfrog_gpu.core.torch_io import INSTALL
from leapfrog_gpu.reference import sigma_prime
from leapfrog_gpu.rnn import reference
from leapfrog_gpu.tools import guarded

FUNCTIONS = [  # (activation, cost, output_activation), as tests/rnn/test_rnn.py
    ("tanh", "quadratic", None), ("sigmoid", "quadratic", None), ("relu", "quadratic", "identity"),
    ("tanh", "cross_entropy", None), ("sigmoid", "quadratic", "identity"),
]
CANCELLING = [([13, 7, 13, 9, 3, 1], 222, "every"), ([3, 11, 9, 1, 9, 13], 5, "last")]
"""Relu networks (quadratic cost, identity output) found by drawing odd widths and seeds at tau = 64, B = 5."""


def sequences(net, tau, B, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tau, net.sizes[0], B)).astype(np.float32)
    shape = (net.sizes[-1], B) if net.output == "last" else (tau, net.sizes[-1], B)
    return x, rng.uniform(0.05, 0.95, shape).astype(np.float32)


def exact(net, x, y):
    return reference.backprop(net.weights, net.recurrent, net.biases, x, y, net.activation, net.cost,
                              net.output_activation, net.output)


def errors(got, want):
    """{"nabla_u^5": relative error}: max |got - want| / max |want| of each array."""
    return {f"nabla_{'bwu'[k]}^{i + 2}": float(np.max(np.abs(np.asarray(g, np.float64) - w)) / np.max(np.abs(w)))
            for k in range(3) for i, (g, w) in enumerate(zip(got[k], want[k])) if np.max(np.abs(w)) > 0}


def as_lists(grads):
    """``gradients()``' ``{l: {"b": ..., "w": ..., "u": ...}}`` as the reference's ``(nabla_b, nabla_w, nabla_u)``,
    lists over l = 2..L (u: the recurrent layers')."""
    return tuple([grads[l][name] for l in sorted(grads) if name in grads[l]] for name in ("b", "w", "u"))


def cancellation(net, x, y, name):
    """|sum| / sum of |terms| of the gradient ``name`` ("nabla_u^5"), the terms being its summands over the
    steps and the batch, in float64."""
    weights = [np.asarray(w, np.float64) for w in net.weights]
    recurrent = [np.asarray(u, np.float64) for u in net.recurrent]
    biases = [np.asarray(b, np.float64) for b in net.biases]
    tau, L = len(x), net.L
    z, a = reference.states(weights, recurrent, biases, x, net.activation, net.output_activation, net.output)
    delta = {}
    for t, target in reference.targets(y, tau, net.output).items():
        delta[L, t] = (a[L, t] - target) * (sigma_prime(net.output_activation, z[L, t]) if net.cost == "quadratic" else 1)
    for l in range(L - 1, 1, -1):
        after = np.zeros_like(a[l, 0])
        for t in range(tau, 0, -1):
            above = weights[l - 1].T @ delta[l + 1, t] if (l + 1, t) in delta else 0.0
            delta[l, t] = after = sigma_prime(net.activation, z[l, t]) * (above + recurrent[l - 2].T @ after)
    kind, l = name[6], int(name.split("^")[1])
    steps = [t for t in range(1, tau + 1) if (l, t) in delta]
    term = {"b": lambda t: delta[l, t], "w": lambda t: delta[l, t][:, None, :] * a[l - 1, t][None, :, :],
            "u": lambda t: delta[l, t][:, None, :] * a[l, t - 1][None, :, :]}[kind]
    total = sum(term(t).sum(axis=-1) for t in steps)
    magnitude = sum(np.abs(term(t)).sum(axis=-1) for t in steps)
    return float(np.max(np.abs(total)) / np.max(magnitude))


def torch_gradients(torch, net, x, y):
    """The same network as a hand-written cell in PyTorch float32: autograd's (nabla_b, nabla_w, nabla_u)."""
    def tensor(array):
        return torch.tensor(np.asarray(array, np.float32), requires_grad=True)

    w, u, b = [tensor(a) for a in net.weights], [tensor(a) for a in net.recurrent], [tensor(a) for a in net.biases]
    act = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu, "identity": lambda z: z}
    xt, (tau, _, B) = torch.tensor(x), x.shape
    state = [torch.zeros(n, B) for n in net.sizes[1:-1]]
    total = torch.zeros(())
    for t in range(tau):
        below = xt[t]
        for i in range(net.L - 2):
            state[i] = below = act[net.activation](w[i] @ below + u[i] @ state[i] + b[i][:, None])
        if net.output == "every" or t == tau - 1:
            out = act[net.output_activation](w[-1] @ below + b[-1][:, None])
            total = total + 0.5 * ((out - torch.tensor(y[t] if net.output == "every" else y)) ** 2).sum()
    total.backward()
    return [t.grad.numpy() for t in b], [t.grad.numpy() for t in w], [t.grad.numpy() for t in u]


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print("[5, 9, 7, 3], every activation and cost, both output modes, every schedule: worst relative error")
    for B in (1, 5):
        for tau in (1, 2, 7, 33, 64, 128):
            worst = 0.0
            for output in ("last", "every"):
                for seed, (activation, cost, output_activation) in enumerate(FUNCTIONS):
                    with RNN([5, 9, 7, 3], activation, cost, output, dtype="float32", seed=seed, backend="numpy",
                             output_activation=output_activation) as net:
                        x, y = sequences(net, tau, B, seed)
                        want = exact(net, x, y)
                        for schedule in (BPTT(), Leapfrog(2), Wavefront(), TimeScan()) + ((NaumovRNN(),) if tau <= 7 else ()):
                            worst = max(worst, *errors(as_lists(net.gradients(x, y, schedule)), want).values())
            print(f"  B = {B}, tau = {tau:3d}: {worst:.1e}   (1e-6 (1 + tau/8) = {1e-6 * (1 + tau / 8):.1e})")
    try:
        import torch
    except ImportError:
        torch = None
        print(f"torch does not import: no PyTorch column ({INSTALL})")
    for sizes, seed, output in CANCELLING:
        with RNN(sizes, "relu", "quadratic", output, dtype="float32", seed=seed, backend="numpy",
                 output_activation="identity") as net:
            x, y = sequences(net, 64, 5, seed)
            want = exact(net, x, y)
            ours = errors(as_lists(net.gradients(x, y, BPTT())), want)
            name = max(ours, key=ours.get)
            print(f"RNN({sizes}, 'relu', 'quadratic', output={output!r}, seed={seed}), tau = 64, B = 5: worst {name}, "
                  f"|sum| / sum of |terms| {cancellation(net, x, y, name):.1e}")
            for label, schedule in (("BPTT", BPTT()), ("Leapfrog(2)", Leapfrog(2)), ("Wavefront", Wavefront()),
                                    ("TimeScan", TimeScan())):
                print(f"  {label:15} {errors(as_lists(net.gradients(x, y, schedule)), want)[name]:.1e}")
            if torch is not None:
                torch.set_num_threads(1)
                print(f"  {'torch float32':15} {errors(torch_gradients(torch, net, x, y), want)[name]:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, "rnn_float32.py"))
