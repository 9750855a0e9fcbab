"""The gated cells of a recurrent layer, as PyTorch computes them: the GRU and the LSTM, step by step.

Recurrent layer l of width N = n_l holds w^l (G·N, n_{l-1}), u^l (G·N, N) and b^l (G·N,), its G gates stacked in
torch's order (GRU: r, z, n, G = 3; LSTM: i, f, g, o, G = 4): w^l is ``weight_ih``, u^l ``weight_hh`` and b^l
``bias_ih + bias_hh``, but for the GRU's n gate, whose hidden bias b_hn (N,) acts inside r * (.) and is kept
apart. With x^t = a^{l-1,t}, h^t = a^{l,t}, h^0 = 0 (and the LSTM's c^0 = 0), z^{l,t} = w^l x^t + b^l plus,
where it acts alike, u^l h^{t-1}:

    GRU:   r = σ(z_r),  z = σ(z_z),  hn = (u^l h^{t-1})_n + b_hn,  n = tanh(z_n + r * hn),
           h^t = (1 - z) * n + z * h^{t-1}
    LSTM:  i, f, o = σ(z_i), σ(z_f), σ(z_o),  g = tanh(z_g),  c^t = f * c^{t-1} + i * g,  h^t = o * tanh(c^t)

Backward, ``delta_h`` (N, tau, B) holds dh^t = ∂C/∂h^t, first from above ((w^{l+1})^T delta^{l+1,t}), then
from t + 1, added as each step runs (t = tau..1). Each step gives delta^{l,t} (G·N, B), the derivative of C by
the input side of each gate's pre-activation (what nabla_w^l, nabla_b^l and the layer below read), and its
part through u^l, ``delta_u`` (what nabla_u^l reads; the GRU's n rows r * delta_n, summed into nabla_b_hn; the
LSTM's is delta itself):

    GRU:   delta_n = dh (1 - z)(1 - n²),  delta_z = dh (h^{t-1} - n) z (1 - z),  delta_r = delta_n hn r (1 - r),
           dh^{t-1} += z dh + (u^l)^T [delta_r, delta_z, r delta_n]
    LSTM:  dc = dc^{t+1} f^{t+1} + dh o (1 - tanh² c^t),  delta_i = dc g i (1 - i),  delta_f = dc c^{t-1} f (1 - f),
           delta_g = dc i (1 - g²),  delta_o = dh tanh(c^t) o (1 - o),  dh^{t-1} += (u^l)^T delta^{l,t}

As ``recursion.Recursion`` does for the Elman cell, each layer binds its calls once per pass: ``sweep_forward``
(t = 1..tau) and ``sweep_backward`` (t = tau..1), a BLAS call and the elementwise rest per step. On the CuPy
backend (``ops_cuda.CudaOps``) that rest is one kernel of kernels/gates.cu a step each way (the GRU's backward
kernel adds z dh^t to dh^{t-1} too, the LSTM's carries dc); on the host it is the ufuncs below, into the plan's
buffers.

Parallel in time (``scans.TimeScan``), the backward pass is the linear suffix recursion of the state's adjoint,
lambda^{t-1} = J_t^T lambda^t + (dh from above at t - 1, 0), with J_t = ∂s^t/∂s^{t-1} of the state s^t (the GRU's
h^t, N; the LSTM's (h^t, c^t), 2N): ``jacobians`` writes every J_t^T, and ``deltas`` then gives every delta^{l,t}
at once from lambda (the LSTM's dc = lambda_c + lambda_h o (1 - tanh² c^t)). The GRU's

    J_t = diag(z) + diag((1 - z)(1 - n²)) (diag(r) u_n + diag(hn r (1 - r)) u_r) + diag((h^{t-1} - n) z (1 - z)) u_z

and the LSTM's, with K = ∂c^t/∂h^{t-1} = diag(c^{t-1} f (1 - f)) u_f + diag(g i (1 - i)) u_i + diag(i (1 - g²)) u_g
and o' = o (1 - tanh² c^t):

    J_t = [[diag(o (1 - o) tanh c^t) u_o + diag(o') K,  diag(o' f)],  [K,  diag(f)]]

Their diagonals alone (``diagonals``, what quasi-Newton keeps: ``gated_newton``), per unit i, u_X,ii the diagonal of
gate X's block of u^l: elementwise, (tau, B, S), never an S x S matrix:

    GRU:   ∂h^t_i/∂h^{t-1}_i = z + (1 - z)(1 - n²)(r u_n,ii + hn r (1 - r) u_r,ii) + (h^{t-1} - n) z (1 - z) u_z,ii
    LSTM:  ∂h^t_i/∂h^{t-1}_i = o (1 - o) tanh(c^t) u_o,ii + o' K_ii,  ∂c^t_i/∂c^{t-1}_i = f
"""

import functools
import typing

import numpy as np

from ..backends.ops_cuda import CudaOps

ALL = slice(None)
"""The step of ``deltas`` and ``previous`` that stands for every step at once."""

CELLS = ("elman", "gru", "lstm")
"""The cells of a recurrent layer: Elman's a = σ(w x + u a + b), PyTorch's GRU and LSTM."""

GATES = {"elman": 1, "gru": 3, "lstm": 4}
"""Rows of w^l, u^l and b^l per unit of a layer of each cell."""

STATE = {"elman": 1, "gru": 1, "lstm": 2}
"""The width of a layer's state over time, in units of n_l: the Elman cell's a and the GRU's h, the LSTM's (h, c)."""

GATED = {"gru": "a GRU", "lstm": "an LSTM"}
"""The gated cells as a message names them, with their article."""


class StepWork(typing.NamedTuple):
    """The elementwise work of one step of a cell, per unit and sample, as the counters count it (``schedules``,
    ``state_scan``, ``gated_newton``): one flop per operation, σ and tanh one each; elements moved with each operand
    read once and each result written once (kernels/gates.cu's traffic). ``forward``: flops of z = w x + b + u h and
    the rest of the step; ``backward``: flops of the step's deltas from dh^t, at every step; ``carried``: flops of
    what a step t > 1 adds into step t - 1 beside (u^l)^T delta's product, the product's own add included;
    ``moved`` and ``carried_moved``: the elements the backward step moves beside the products, at every step and at
    t > 1 only; ``jacobian``: flops of building a state Jacobian J_t (``jacobians``), per sample, as (a, b) for
    a·n^2 + b·n; ``diagonal``: flops of J_t's diagonal alone (``diagonals``), per unit and sample."""

    forward: int
    backward: int
    carried: int
    moved: int
    carried_moved: int
    jacobian: tuple
    diagonal: int


WORK = {
    # z (bias, u a: 2), sigma, sigma' (2) | x sigma' | the product's add | delta, sigma' read, delta written
    # | the diagonal sigma' diag(u)
    "elman": StepWork(5, 1, 1, 3, 0, (0, 0), 1),
    # 3 biases; r, z: + u h, σ (4); hn = (u h)_n + b_hn (1); n = tanh(z_n + r hn) (3); h = (h^{t-1} - n) z + n (3)
    # | delta_n 5, delta_z 5, delta_r 4, r delta_n 1 | the product's add, dh^{t-1} += z dh (2)
    # | dh, 3 gates, hn read, 3 delta and 3 delta_u written | h^{t-1} read, dh^{t-1} read and written
    # | three diag(row) u blocks and their sums (5 n^2), the rows (13 n), + diag(z) (n)
    # | 1 - z, 1 - n² (2), their product; r u_n, hn r (1 - r) u_r (4), the sum, its product; (h - n) z (1 - z) u_z (4);
    # 2 sums
    "gru": StepWork(14, 15, 3, 11, 3, (5, 14), 17),
    # 4 biases, + u h (4); i, f, g, o (4); c = f c^{t-1} + i g (3); h = o tanh c (2)
    # | tanh c 1, dc 5, four deltas 16, dc f 1 | the product's add | dh, 4 gates, c, dc read, 4 delta, dc written
    # | c^{t-1} read | K (5 n^2), the top left block (3 n^2), the rows (17 n)
    # | tanh c; o (1 - o) tanh c u_o (4); o' (3); K_ii: three terms (4 each), 2 sums; o' K_ii and the sum; f copied
    "lstm": StepWork(17, 23, 1, 12, 1, (8, 17), 24),
}
"""The elementwise work of a step of each cell (``StepWork``), written from the equations above."""

ACTIVATION = "tanh"
"""The activation of a gated cell's candidate (and the LSTM's cell state); its gates are sigmoids."""


def sigmoid(xp, z, out):
    """``out = 1 / (1 + exp(-z))``; an ``exp`` that overflows gives 0, as it should."""
    with np.errstate(over="ignore"):
        xp.multiply(z, -1, out=out)  # not xp.negative: NumPy 2.4's reads a float32 row 16 bytes apart wrong
        xp.exp(out, out=out)
        xp.add(out, 1, out=out)
        xp.reciprocal(out, out=out)


class Gated:
    """The bound calls of gated layer l of pass ``p`` (a ``plan.Plan``): ``sweep_forward`` and ``sweep_backward``,
    on p.z[l], p.a[l], p.delta[l], p.delta_h[l], p.delta_u[l] and the cell's own ``gates`` (G·N, tau, B);
    ``steps[t]``, the backward calls of step t (0-based) alone, once ``reset()`` has run and dh^t is complete."""

    def __init__(self, p, l):
        self.xp, self.N, tau, ops = p.xp, p.net.n[l], p.tau, p.backend.ops
        self.z, self.a, self.delta, self.delta_h, self.delta_u = p.z[l], p.a[l], p.delta[l], p.delta_h[l], p.delta_u[l]
        self.u = p.u[l]
        self.gates = p.sequence(self.z.shape[0], tau)
        self.zero = p.columns(self.N)  # h^0 (and c^0)
        self.zero.fill(0)
        self.ops = ops
        kernels = isinstance(ops, CudaOps)  # the step's elementwise parts on kernels/gates.cu
        forward, backward = (self.kernel_forward, self.kernel_backward) if kernels else (self.forward, self.backward)
        self.sweep_forward, self.steps = [], []
        for t in range(tau):
            self.sweep_forward += self._recurrent(ops, t) + [functools.partial(forward, t)]
            self.steps.append([functools.partial(backward, t)] + ([ops.bind_matmul(
                self.delta_h[:, t - 1], self.u, self.delta_u[:, t], transpose=True, accumulate=True)] if t else []))
        self.sweep_backward = [self.reset] + [call for t in range(tau - 1, -1, -1) for call in self.steps[t]]

    def previous(self, buffer, t):
        """Step t - 1 of ``buffer`` (0-based t), the zero state before the first; t = ``ALL``: every step's, as
        (N, tau, B)."""
        if t is ALL:
            return self.xp.concatenate([self.zero[:, None], buffer[:, :-1]], axis=1)
        return buffer[:, t - 1] if t else self.zero

    @staticmethod
    def coefficients(row, u):
        """The (tau-1, B, N, N) matrices diag(row_t) u, row (N, tau-1, B) of the steps t = 2..tau."""
        return row.transpose(1, 2, 0)[..., None] * u

    def diagonal(self, row):
        """The (tau-1, B, N, N) matrices diag(row_t), row (N, tau-1, B)."""
        return self.coefficients(row, self.xp.eye(self.N, dtype=row.dtype))

    def reset(self):
        """Ready the cell for a backward pass (the LSTM's carried dc to zero)."""


class GRU(Gated):
    """PyTorch's GRU: gates r, z, n; hn (N, tau, B) = (u^l h^{t-1})_n + b_hn kept for the backward pass."""

    def __init__(self, p, l):
        self.b_hn = p.b_hn[l]
        self.hn = p.sequence(p.net.n[l], p.tau)
        self.uh = p.columns(3 * p.net.n[l])  # u^l h^{t-1}
        super().__init__(p, l)

    def _recurrent(self, ops, t):
        return [ops.bind_matmul(self.uh, self.u, self.previous(self.a, t))]

    def forward(self, t):
        xp, N, z, gates, hn, h = self.xp, self.N, self.z[:, t], self.gates[:, t], self.hn[:, t], self.a[:, t]
        xp.add(z[: 2 * N], self.uh[: 2 * N], out=z[: 2 * N])
        sigmoid(xp, z[: 2 * N], gates[: 2 * N])
        r, update, n = gates[:N], gates[N: 2 * N], gates[2 * N:]
        xp.add(self.uh[2 * N:], self.b_hn[:, None], out=hn)
        xp.multiply(r, hn, out=n)
        xp.add(n, z[2 * N:], out=n)
        xp.tanh(n, out=n)
        xp.subtract(self.previous(self.a, t), n, out=h)
        xp.multiply(h, update, out=h)
        xp.add(h, n, out=h)

    def kernel_forward(self, t):
        """``forward`` in one kernel (z is left as w x + b)."""
        self.ops.gru_forward(self.z, self.gates, self.hn, self.a, self.uh, self.b_hn, t)

    def kernel_backward(self, t):
        """``backward`` in one kernel."""
        self.ops.gru_backward(self.delta, self.delta_u, self.delta_h, self.gates, self.hn, self.a, t)

    def evaluate(self, pre, uh, state, f):
        """Every step at once from the states ``state`` (N, tau, B) taken as h^t: pre = w^l a^{l-1} + b^l and
        uh = u^l h^{t-1} (3N, tau, B) give the gates (and hn) of every step and f (N, tau, B), the next h^t."""
        xp, N, gates, h_prev = self.xp, self.N, self.gates, self.previous(state, ALL)
        sigmoid(xp, pre[: 2 * N] + uh[: 2 * N], gates[: 2 * N])
        r, update, n = gates[:N], gates[N: 2 * N], gates[2 * N:]
        xp.add(uh[2 * N:], self.b_hn[:, None, None], out=self.hn)
        xp.tanh(pre[2 * N:] + r * self.hn, out=n)
        xp.copyto(f, n + update * (h_prev - n))

    def backward(self, t):
        self.deltas(t)
        if t:
            update = self.gates[self.N: 2 * self.N, t]
            self.xp.add(self.delta_h[:, t - 1], update * self.delta_h[:, t], out=self.delta_h[:, t - 1])

    def deltas(self, t):
        """delta^{l,t} and delta_u^{l,t} from dh^t = delta_h^{l,t} (t = ``ALL``: every step's at once)."""
        xp, N, gates, dh = self.xp, self.N, self.gates[:, t], self.delta_h[:, t]
        r, update, n = gates[:N], gates[N: 2 * N], gates[2 * N:]
        delta, delta_u = self.delta[:, t], self.delta_u[:, t]
        xp.copyto(delta[2 * N:], dh * (1 - update) * (1 - n * n))
        xp.copyto(delta[N: 2 * N], dh * (self.previous(self.a, t) - n) * update * (1 - update))
        xp.copyto(delta[:N], delta[2 * N:] * self.hn[:, t] * r * (1 - r))
        xp.copyto(delta_u[: 2 * N], delta[: 2 * N])
        xp.multiply(delta[2 * N:], r, out=delta_u[2 * N:])

    def jacobians(self, A, h_prev=None):
        """A[t - 1] = J_t^T (B, N, N) for the steps t = 2..tau (1-based); A (tau, B, N, N), its last zero. J_t at
        the gates of step t and ``h_prev`` (N, tau - 1, B), h^{t-1} for t = 2..tau (default: a^l's)."""
        xp, N, u, later = self.xp, self.N, self.u, slice(1, None)
        h_prev = self.a[:, :-1] if h_prev is None else h_prev
        gates = self.gates[:, later]
        r, update, n = gates[:N], gates[N: 2 * N], gates[2 * N:]
        dn = (1 - update) * (1 - n * n)
        J = (self.coefficients(dn * r, u[2 * N:]) + self.coefficients(dn * self.hn[:, later] * r * (1 - r), u[:N])
             + self.coefficients((h_prev - n) * update * (1 - update), u[N: 2 * N]))
        J += self.diagonal(update)
        A.fill(0)
        xp.copyto(A[:-1], J.swapaxes(-1, -2))

    def diagonals(self, D, h_prev=None):
        """D[t - 2] = diag(J_t) (B, N) for the steps t = 2..tau (1-based); D (tau - 1, B, N). At ``jacobians``'s
        gates, hn and ``h_prev``, elementwise (the module docstring's equation)."""
        N, later = self.N, slice(1, None)
        h_prev = self.a[:, :-1] if h_prev is None else h_prev
        r, update, n = (self.gates[k * N: (k + 1) * N, later] for k in range(3))
        u_r, u_z, u_n = (row[:, None, None] for row in self.u.reshape(3, N * N)[:, :: N + 1])
        keep = 1 - update
        diagonal = (update + keep * (1 - n * n) * (r * u_n + self.hn[:, later] * r * (1 - r) * u_r)
                    + (h_prev - n) * update * keep * u_z)
        self.xp.copyto(D, diagonal.transpose(1, 2, 0))


class LSTM(Gated):
    """PyTorch's LSTM: gates i, f, g, o; the cell state c (N, tau, B) and the carried dc (N, B)."""

    def __init__(self, p, l):
        self.c = p.sequence(p.net.n[l], p.tau)
        self.dc = p.columns(p.net.n[l])
        super().__init__(p, l)

    def reset(self):
        self.dc.fill(0)

    def _recurrent(self, ops, t):
        return [ops.bind_matmul(self.z[:, t], self.u, self.a[:, t - 1], accumulate=True)] if t else []

    def forward(self, t):
        xp, N, z, gates, c, h = self.xp, self.N, self.z[:, t], self.gates[:, t], self.c[:, t], self.a[:, t]
        sigmoid(xp, z[: 2 * N], gates[: 2 * N])
        xp.tanh(z[2 * N: 3 * N], out=gates[2 * N: 3 * N])
        sigmoid(xp, z[3 * N:], gates[3 * N:])
        i, f, g, o = gates[:N], gates[N: 2 * N], gates[2 * N: 3 * N], gates[3 * N:]
        xp.multiply(f, self.previous(self.c, t), out=c)
        xp.add(c, i * g, out=c)
        xp.tanh(c, out=h)
        xp.multiply(h, o, out=h)

    def kernel_forward(self, t):
        """``forward`` in one kernel."""
        self.ops.lstm_forward(self.z, self.gates, self.c, self.a, t)

    def kernel_backward(self, t):
        """``backward`` in one kernel."""
        self.ops.lstm_backward(self.delta, self.dc, self.delta_h, self.gates, self.c, t)

    def evaluate(self, pre, uh, state, f):
        """Every step at once from the states ``state`` (2N, tau, B) taken as (h^t, c^t): pre = w^l a^{l-1} + b^l
        and uh = u^l h^{t-1} (4N, tau, B) give the gates of every step and f (2N, tau, B), the next (h^t, c^t);
        the cell's c^t is f's."""
        xp, N, gates = self.xp, self.N, self.gates
        total = pre + uh
        sigmoid(xp, total[: 2 * N], gates[: 2 * N])
        xp.tanh(total[2 * N: 3 * N], out=gates[2 * N: 3 * N])
        sigmoid(xp, total[3 * N:], gates[3 * N:])
        i, f_gate, g, o = gates[:N], gates[N: 2 * N], gates[2 * N: 3 * N], gates[3 * N:]
        xp.copyto(f[N:], f_gate * self.previous(state[N:], ALL) + i * g)
        xp.copyto(self.c, f[N:])
        xp.multiply(o, xp.tanh(f[N:]), out=f[:N])

    def backward(self, t):
        self.deltas(t, self.dc)
        self.xp.multiply(self.dc, self.gates[self.N: 2 * self.N, t], out=self.dc)

    def deltas(self, t, dc):
        """delta^{l,t} from dh^t = delta_h^{l,t} and ``dc``, the adjoint of c^t through c^{t+1} (t = ``ALL``: every
        step's at once, dc (N, tau, B)); dc becomes that through h^t too."""
        xp, N, gates, dh, delta = self.xp, self.N, self.gates[:, t], self.delta_h[:, t], self.delta[:, t]
        i, f, g, o = gates[:N], gates[N: 2 * N], gates[2 * N: 3 * N], gates[3 * N:]
        tanh_c = xp.tanh(self.c[:, t])
        xp.add(dc, dh * o * (1 - tanh_c * tanh_c), out=dc)
        xp.copyto(delta[:N], dc * g * i * (1 - i))
        xp.copyto(delta[N: 2 * N], dc * self.previous(self.c, t) * f * (1 - f))
        xp.copyto(delta[2 * N: 3 * N], dc * i * (1 - g * g))
        xp.copyto(delta[3 * N:], dh * tanh_c * o * (1 - o))

    def jacobians(self, A, c_prev=None):
        """A[t - 1] = J_t^T (B, 2N, 2N) over (h, c) for the steps t = 2..tau (1-based); A (tau, B, 2N, 2N), its
        last zero. J_t at the gates and c^t of step t and ``c_prev`` (N, tau - 1, B), c^{t-1} for t = 2..tau
        (default: the cell's)."""
        xp, N, u, later = self.xp, self.N, self.u, slice(1, None)
        gates, c_prev = self.gates[:, later], self.c[:, :-1] if c_prev is None else c_prev
        i, f, g, o = gates[:N], gates[N: 2 * N], gates[2 * N: 3 * N], gates[3 * N:]
        tanh_c = xp.tanh(self.c[:, later])
        through_c = o * (1 - tanh_c * tanh_c)
        K = (self.coefficients(c_prev * f * (1 - f), u[N: 2 * N]) + self.coefficients(g * i * (1 - i), u[:N])
             + self.coefficients(i * (1 - g * g), u[2 * N: 3 * N]))
        A.fill(0)
        A = A[:-1]
        xp.copyto(A[..., :N, :N], (self.coefficients(o * (1 - o) * tanh_c, u[3 * N:])
                                   + through_c.transpose(1, 2, 0)[..., None] * K).swapaxes(-1, -2))
        xp.copyto(A[..., :N, N:], K.swapaxes(-1, -2))
        xp.copyto(A[..., N:, :N], self.diagonal(through_c * f))
        xp.copyto(A[..., N:, N:], self.diagonal(f))

    def diagonals(self, D, c_prev=None):
        """D[t - 2] = diag(J_t) (B, 2N) over (h, c) for the steps t = 2..tau (1-based); D (tau - 1, B, 2N). At
        ``jacobians``'s gates, c^t and ``c_prev``, elementwise (the module docstring's equations)."""
        xp, N, later = self.xp, self.N, slice(1, None)
        c_prev = self.c[:, :-1] if c_prev is None else c_prev
        i, f, g, o = (self.gates[k * N: (k + 1) * N, later] for k in range(4))
        u_i, u_f, u_g, u_o = (row[:, None, None] for row in self.u.reshape(4, N * N)[:, :: N + 1])
        tanh_c = xp.tanh(self.c[:, later])
        K = c_prev * f * (1 - f) * u_f + g * i * (1 - i) * u_i + i * (1 - g * g) * u_g
        xp.copyto(D[..., :N], (o * (1 - o) * tanh_c * u_o + o * (1 - tanh_c * tanh_c) * K).transpose(1, 2, 0))
        xp.copyto(D[..., N:], f.transpose(1, 2, 0))


KINDS = {"gru": GRU, "lstm": LSTM}
"""The class of each gated cell's layer."""
