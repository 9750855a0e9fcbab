"""The time recursion of one recurrent layer, its calls bound once per pass (``plan.RNNPlan``).

Forward, once z^l holds w^l a^{l-1,t} + b^l at every step (one product over tau*B columns, one add):

    z^{l,t} += u^l a^{l,t-1}  (t >= 2: one BLAS call, beta = 1),    a^{l,t} = sigma(z^{l,t})  (one ufunc)

then sigma'(z^l) at every step at once, from a^l (or z^l for relu). Backward, once delta^l holds
(w^{l+1})^T delta^{l+1,t} at every step:

    delta^{l,t} += (u^l)^T delta^{l,t+1}  (t < tau: one BLAS call),    delta^{l,t} *= sigma'(z^{l,t})  (one ufunc)

Each call is bound to its step's (n_l, B) views when the pass is made (``ops.bind_matmul``,
``ops_numpy.sigma_calls``: sigmoid takes four ufuncs, the others one), so that a step runs those calls
and nothing else: on the host a BLAS call through ctypes and a ufunc, their arguments ready.
"""

import functools

from ..backends import ops_numpy


class Recursion:
    """The bound calls of layer l of pass ``p``: ``forward[t]`` and ``backward[t]`` those of step t
    (0-based), ``sweep_forward`` every forward call in order t = 1..tau, ``sweep_backward`` every backward
    call in order t = tau..1."""

    def __init__(self, p, l):
        ops, xp, tau = p.backend.ops, p.xp, p.tau
        z, a, sp, delta, u = p.z[l], p.a[l], p.sp[l], p.delta[l], p.u[l]
        self.forward, self.backward = [], []
        for t in range(tau):
            recurrent = [ops.bind_matmul(z[:, t], u, a[:, t - 1], accumulate=True)] if t else []
            self.forward.append(recurrent + ops_numpy.sigma_calls(z[:, t], a[:, t], p.net.activation, xp))
            recurrent = ([ops.bind_matmul(delta[:, t], u, delta[:, t + 1], transpose=True, accumulate=True)]
                         if t < tau - 1 else [])
            self.backward.append(recurrent + [functools.partial(xp.multiply, delta[:, t], sp[:, t], out=delta[:, t])])
        self.sweep_forward = [call for calls in self.forward for call in calls]
        self.sweep_backward = [call for calls in reversed(self.backward) for call in calls]
