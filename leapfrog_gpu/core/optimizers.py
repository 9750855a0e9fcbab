"""The optimizers a step takes: ``SGD``, ``Adam`` and ``AdamW``, by torch.optim's rules (one parameter group).

g is the gradient of the batch-MEAN cost, nabla / B with nabla the gradient of the cost summed over the batch
(the book's C), t the step count from 1, lr the learning rate:

- ``SGD``: g += wd w; with momentum mu and dampening d, buf = g at t = 1, else mu buf + (1 - d) g, and the
  step is buf (g + mu buf with Nesterov); w -= lr * step. ``SGD(eta)`` is the plain step w -= eta/B nabla.
- ``Adam``: g += wd w; m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2;
  w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
- ``AdamW``: Adam with w *= 1 - lr wd first and no wd in g.

An optimizer is its hyper-parameters and nothing else; its state (``SLOTS``: the momentum buffer, the moments,
each shaped as its parameter) and the step count live in the network (``Network.optimizer_state``). What a
captured step must read as it runs, lr, 1/B, t and Adam's bias corrections, is in the network's ``Controls``;
the rest are fixed arguments of the update kernels (``rule``). A hyper-parameter of the wrong type raises a
TypeError, one out of range a ValueError, each in one line; lr alone may be set again.
"""

import copy
import inspect
import math
import numbers

from .checks import check_flag, check_real, finite, shown


class _Made(type):
    """Optimizers marked made once their construction (every ``__init__`` of the chain) has returned; each class
    shows its ``__init__``'s signature (``help``, ``inspect.signature``), which this ``__call__`` would hide."""

    def __call__(cls, *args, **kwargs):
        optimizer = super().__call__(*args, **kwargs)
        object.__setattr__(optimizer, "_made", True)
        return optimizer

    @property
    def __signature__(cls):
        made = inspect.signature(cls.__init__)
        return made.replace(parameters=list(made.parameters.values())[1:])  # less self


class Optimizer(metaclass=_Made):
    """The base: ``lr`` and the checks. A subclass gives ``SLOTS``, ``hyper``, ``update`` and ``sweep``."""

    SLOTS = ()

    def __init__(self, lr):
        self.lr = lr

    def __setattr__(self, name, value):
        """``lr`` checked as it is set, at any step; the other hyper-parameters fixed once made: a state is made for
        them."""
        if name == "lr":
            value = check_real("lr", value)
        elif vars(self).get("_made"):  # a hyper-parameter, or the rule's own (DECOUPLED): a state is made for them
            raise AttributeError(f"{name} of {self!r} is fixed once made (only lr may change from step to step): "
                                 f"make another {type(self).__name__}")
        super().__setattr__(name, value)

    def __delattr__(self, name):
        raise AttributeError(f"{name} of {self!r} cannot be deleted: make another {type(self).__name__}")

    def __repr__(self):
        return self.named(self.hyper())

    def named(self, hyper):
        """``Adam(betas=..., ...)``: the optimizer's kind with the hyper-parameters ``hyper``, as code."""
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in hyper.items())})"

    def hyper(self):
        """The hyper-parameters, by name (lr first)."""
        raise NotImplementedError

    def rule(self):
        """What a state and a captured step are made for: the kind and every hyper-parameter but lr, which the
        step reads from device memory."""
        return (type(self).__name__, *(v for k, v in self.hyper().items() if k != "lr"))

    @property
    def plain(self):
        """Whether this is the plain SGD step, w -= eta/B nabla: no state, no weight decay."""
        return False

    def controls(self, samples, t):
        """What the update kernels read from ``Controls.array[2:]`` at step t of a batch of ``samples``: lr,
        1 / B and t."""
        return [self.lr, 1 / samples, t]

    def apply(self, ops, param, nabla, state, controls, scratch):
        """Update ``param`` by ``nabla`` (summed over the batch) and its ``state`` ({slot: array}) through
        ``ops`` (a backend's), reading ``controls`` (the network's ``Controls.array``) as it runs."""
        op, *args = self.update(ops, param, nabla, state, controls, scratch)
        op(*args)

    def update(self, ops, param, nabla, state, controls, scratch):
        """``apply``'s update as the call ``(op, *args)`` of one of ``ops``, to launch as it is."""
        raise NotImplementedError

    def sweep(self, ops, chain, w, delta, a, state, controls):
        """The MLP's compiled pass at B = 1 on the host (``ops_numpy``): the update of w (w^l, or rows of it) and its
        ``state`` by nabla_w = delta a^T (delta: delta^l, or the same rows of it), and ``chain`` = w^T delta of w as
        it was, (5)'s part of these rows, in one pass; ``chain`` None: the update alone."""
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent, torch.optim.SGD's rule (see the module docstring)."""

    def __init__(self, lr, momentum=0, dampening=0, nesterov=False, weight_decay=0):
        super().__init__(lr)
        self.momentum = check_real("momentum", momentum)
        self.dampening = check_real("dampening", dampening)
        self.weight_decay = check_real("weight_decay", weight_decay)
        nesterov = check_flag("nesterov", nesterov)
        if nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError(f"nesterov=True needs momentum > 0 and dampening 0; got momentum={momentum!r}, "
                             f"dampening={dampening!r}")
        self.nesterov = nesterov
        self.SLOTS = ("momentum_buffer",) if self.momentum else ()

    def hyper(self):
        return {"lr": self.lr, "momentum": self.momentum, "dampening": self.dampening, "nesterov": self.nesterov,
                "weight_decay": self.weight_decay}

    @property
    def plain(self):
        return not self.momentum and not self.weight_decay

    def update(self, ops, param, nabla, state, controls, scratch):
        if self.plain:
            return ops.sgd_update, param, nabla, controls, scratch
        return (ops.momentum_update, param, nabla, state.get("momentum_buffer"), controls, self.momentum,
                self.dampening, self.nesterov, self.weight_decay)

    def sweep(self, ops, chain, w, delta, a, state, controls):
        ops.momentum_sweep(chain, w, delta, a, state.get("momentum_buffer"), controls, self.momentum, self.dampening,
                           self.nesterov, self.weight_decay)


class Adam(Optimizer):
    """Adam, torch.optim.Adam's rule (see the module docstring); weight decay added to the gradient."""

    DECOUPLED = False
    SLOTS = ("exp_avg", "exp_avg_sq")

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0):
        super().__init__(lr)
        pair = f"betas must be a pair of numbers (beta1, beta2); got {shown(betas)}"
        if not isinstance(betas, (tuple, list)) or not all(map(_is_real, betas)):
            raise TypeError(pair)
        if len(betas) != 2:
            raise ValueError(pair)
        if not all(0 <= beta < 1 for beta in betas):
            raise ValueError(f"betas must lie in [0, 1); got ({', '.join(map(shown, betas))})")
        self.betas = tuple(float(beta) for beta in betas)
        self.eps = check_real("eps", eps, "> 0 and finite", strict=True)
        self.weight_decay = check_real("weight_decay", weight_decay)

    def hyper(self):
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": self.weight_decay}

    def controls(self, samples, t):
        """lr, 1 / B, t and the bias corrections 1 - beta1^t and sqrt(1 - beta2^t), as torch.optim computes them."""
        beta1, beta2 = self.betas
        return [*super().controls(samples, t), 1 - beta1 ** t, (1 - beta2 ** t) ** 0.5]

    def update(self, ops, param, nabla, state, controls, scratch):
        return (ops.adam_update, param, nabla, state["exp_avg"], state["exp_avg_sq"], controls, *self.betas, self.eps,
                self.weight_decay, self.DECOUPLED)

    def sweep(self, ops, chain, w, delta, a, state, controls):
        ops.adam_sweep(chain, w, delta, a, state["exp_avg"], state["exp_avg_sq"], controls, *self.betas, self.eps,
                       self.weight_decay, self.DECOUPLED)


class AdamW(Adam):
    """AdamW, torch.optim.AdamW's rule: Adam with decoupled weight decay, w *= 1 - lr wd before the step."""

    DECOUPLED = True

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(lr, betas, eps, weight_decay)


def check(optimizer):
    """A copy of ``optimizer`` (its lr as it is now, whatever is set later) if it is one of this module's, else a
    TypeError."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"optimizer must be SGD(...), Adam(...) or AdamW(...); got {shown(optimizer)}")
    return copy.copy(optimizer)


def _is_real(value):
    """Whether ``value`` is a real number (not a bool)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


def check_clip(clip, schedule, graph, backend):
    """``clip`` (None, or a number > 0; inf scales nothing, as in torch) as a float, if ``schedule`` and
    ``graph`` on ``backend`` (its name) can clip."""
    if clip is None:
        return None
    if isinstance(clip, bool) or not isinstance(clip, numbers.Real):
        raise TypeError(f"clip (the largest norm of the gradient) must be a number > 0 or None; got {shown(clip)} "
                        f"({type(clip).__name__})")
    if not clip > 0 or not (finite(clip) or clip == math.inf):  # NaN, and an int beyond any float
        raise ValueError(f"clip (the gradient's largest norm) must be finite and > 0, or inf; got {shown(clip)}")
    if schedule.fused:
        raise ValueError(f"clip needs every gradient before any update, and {schedule!r} updates each unit "
                         f"behind its own gradients: pass {schedule.unfused}")
    if graph and backend == "cupy":
        raise ValueError("graph=True cannot capture clip on the CuPy backend (its norm allocates as it runs); "
                         "use graph=False")
    return float(clip)
