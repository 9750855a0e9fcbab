"""NumPy twins of the kernels in ``kernels/``: same arguments, same results, written in place.

The NumPy backend runs these; the tests compare each CUDA kernel against its twin. Those of the gated
cells (kernels/gates.cu) are written in ``gates_numpy`` and are ops of this module too. Every function
writes into preallocated arrays and allocates no temporary of more than a few elements: the products are
BLAS calls in place (``host_blas.matmul``, which releases the GIL for the large ones, so that streams
run side by side), and what else a weight matrix's worth of work needs goes through a cache-sized
``scratch`` (``SCRATCH``), a block at a time.
Minibatches are columns: ``z``, ``a``, ``sp``, ``delta`` and ``y`` are (n, B), C- or Fortran-contiguous
(the backend's plans allocate them batch-major, ``NumpyBackend.batch_order``), ``w`` and ``nabla_w``
C-contiguous, ``b`` and ``nabla_b`` (n,). ``controls`` holds a step's controls, read when the update runs:
``controls[0]`` is eta / B, ``controls[1]`` a refusal (0 to update, else a ``check_finite`` code: the
update writes nothing); the updates of ``core.optimizers`` also read ``controls[2]``, the learning rate,
``controls[3]``, 1 / B, ``controls[4]``, the step count t from 1, and Adam's bias corrections ``controls[5]``,
1 - beta1^t, and ``controls[6]``, sqrt(1 - beta2^t); ``step_done``, the last op of a step, copies its t into
``controls[7]`` unless the step was refused.
"""

import contextlib
import functools

import numpy as np

from . import host_blas
from .gates_numpy import gru_backward, gru_forward, lstm_backward, lstm_forward  # noqa: F401 (ops of this backend)
from .host_blas import matmul


def bias_activation(z, a, sp, b, activation, product=None):
    """(2) bias half and (3): ``z = product + b``, ``a = sigma(z)``, ``sp = sigma'(z)`` (kernels/elementwise.cu);
    ``product`` is z itself by default, else where ``forward`` made the product (``product_target``): it takes
    the bias in its own memory order, then goes to z in one transposing copy (a ufunc between arrays of two
    orders runs NumPy's strided loop: six times the copy's time at 1024 x 64)."""
    product = z if product is None else product
    np.add(product, b[:, None], out=product)
    if product is not z:
        np.copyto(z, product)
    activate(z, a, sp, activation)


def activate(z, a, sp, activation, xp=np):
    """(3): ``a = sigma(z)`` (``sigma_calls``), then ``sp = sigma'(z)`` (``sigma_prime``), into ``a`` and
    ``sp``; ``xp`` the arrays' module (CuPy's on the device)."""
    with np.errstate(over="ignore") if activation == "sigmoid" else contextlib.nullcontext():
        for call in sigma_calls(z, a, activation, xp):
            call()
    sigma_prime(z, a, sp, activation, xp)


def sigma_calls(z, a, activation, xp=np):
    """``a = sigma(z)`` as calls of no argument bound to ``z`` and ``a``: one ufunc for tanh, relu and the
    identity, four for sigmoid (whose ``exp(-z)`` may overflow to inf, giving sigma = 0 as it should:
    run them under ``np.errstate(over="ignore")``)."""
    if activation == "sigmoid":
        return [functools.partial(xp.multiply, z, -1, out=a), functools.partial(xp.exp, a, out=a),
                functools.partial(xp.add, a, 1, out=a), functools.partial(xp.reciprocal, a, out=a)]
    if activation == "tanh":
        return [functools.partial(xp.tanh, z, out=a)]
    if activation == "relu":
        return [functools.partial(xp.maximum, z, 0, out=a)]
    if activation == "identity":
        return [functools.partial(xp.copyto, a, z)]
    raise ValueError(f"unknown activation {activation!r}")


def sigma_prime(z, a, sp, activation, xp=np):
    """``sp = sigma'(z)``, from ``a = sigma(z)`` (sigmoid, tanh) or from z (relu)."""
    if activation == "sigmoid":
        xp.subtract(1, a, out=sp)
        xp.multiply(sp, a, out=sp)
    elif activation == "tanh":
        xp.multiply(a, a, out=sp)
        xp.subtract(1, sp, out=sp)
    elif activation == "relu":
        xp.greater(z, 0, out=sp)
    elif activation == "identity":
        sp.fill(1)
    else:
        raise ValueError(f"unknown activation {activation!r}")


def forward(z, a, sp, w, a_prev, b, activation):
    """(2)(3) of one layer: ``z = w a_prev + b``, ``a = sigma(z)``, ``sp = sigma'(z)`` (kernels/chain.cu).

    One product, then the bias and the activation on z while it is in cache (n*B elements against the n*m
    weights the product reads). Cutting the product into cache-sized row blocks saves no pass, and at B > 1
    costs more: smaller GEMMs run below the speed of one large one (docs/performance.md, the NumPy backend's choices).
    The product goes where ``product_target`` says.
    """
    target = product_target(z, sp)
    matmul(target, w, a_prev)
    bias_activation(z, a, sp, b, activation, target)


def product_target(z, sp):
    """Where (2)'s product goes: z, or, for a batch-major z (Fortran order, B > 1), sp's memory seen in row-major
    order, into which OpenBLAS's GEMM runs faster (1.68 against 2.01 ms a matrix at N = 1024, B = 64, one
    thread: docs/performance.md, the NumPy backend's choices); ``bias_activation`` writes sp after z has
    taken the product."""
    if not z.flags.c_contiguous and sp.flags.f_contiguous:
        return sp.T.reshape(sp.shape)
    return z


def backward(delta, w_next, delta_next, sp):
    """(5) of one layer: ``delta = ((w^{l+1})^T delta^{l+1}) * sp`` (kernels/chain.cu)."""
    matmul(delta, w_next.T, delta_next)
    delta_hidden(delta, sp)


def bind_matmul(out, w, x, transpose=False, accumulate=False, worker=False):
    """``out = w x`` (``w^T x`` if ``transpose``; ``out += ...`` if ``accumulate``) as a call of no argument,
    bound now (``host_blas.bind``): one BLAS call each time, on what the arrays hold then, on any stream
    (``worker``: the call may run on a worker; CuPy's twin says why it asks). ``out`` (n, B) and ``x`` may be
    the columns of one time step of a longer sequence (``rnn.plan``)."""
    del worker
    return host_blas.bind(out, w.T if transpose else w, x, beta=1.0 if accumulate else 0.0)


def delta_output(delta, a, y, sp, cost):
    """(4): ``delta = (a - y) * sp`` (quadratic) or ``a - y`` (cross-entropy with a sigmoid output)."""
    np.subtract(a, y, out=delta)
    if cost == "quadratic":
        np.multiply(delta, sp, out=delta)


def delta_hidden(delta, sp):
    """(5), Hadamard half: ``delta *= sp`` once ``delta`` holds ``(w^{l+1})^T delta^{l+1}``."""
    np.multiply(delta, sp, out=delta)


SCRATCH = 1 << 16
"""Elements of the per-layer scratch the updates stream through: 256 KiB in float32, cache-sized."""


def nabla_w(nabla_w, delta, a):
    """(7): ``nabla_w = delta a^T``, (n, m) from (n, B) and (m, B), summed over the batch: at B = 1 a broadcasting
    outer product (a ``matmul`` with an inner dimension of 1 runs far slower, docs/design.md §3), else one GEMM."""
    if delta.shape[1] == 1:
        np.multiply(delta, a.T, out=nabla_w)
    else:
        matmul(nabla_w, delta, a.T)


def fused_update(w, delta, a, controls, scratch):
    """(7) fused with SGD: ``w -= controls[0] * (delta a^T)`` unless ``controls[1]``, without ``nabla_w`` ever
    reaching memory. Rows go through ``scratch`` (flat, at least one row of w) in cache-sized blocks; each element
    is computed as by ``nabla_w`` then ``sgd_update``: bitwise the same when w fits one block (B = 1, or n*m <=
    scratch.size); with several at B > 1, BLAS may round a row of a smaller GEMM otherwise than the same row of
    ``nabla_w``'s one (it does at n = m = 257, B = 64 with OpenBLAS), so a plan gives such a w a scratch of its
    size."""
    if controls[1] != 0:
        return
    for rows in row_blocks(w, scratch.size // w.shape[1]):
        _update_rows(w[rows], delta[rows], a, controls[0], scratch)


def backward_update(delta, w_next, delta_next, sp, a, controls, update=None, rows=None):
    """(5) and the update of w^{l+1} in one sweep over w^{l+1}: ``delta = ((w^{l+1})^T delta^{l+1}) * sp`` with
    w^{l+1} as it was, summed over blocks of ``SWEEP`` bytes of its rows, and, unless ``controls[1]``, ``update``
    of each part (a slice) of at most ``rows`` rows of a block once the sum has read it; by default the SGD update
    ``w^{l+1} -= controls[0] * delta^{l+1} a^T`` (``rank_update``) of the whole block. ``a`` is a^l (m, B).

    Each block is read for delta's sum, then updated in place while it is still in cache, so that w^{l+1}
    is read once and written once. The sum runs in a fixed order: the first block's product, as ``backward``
    computes it, then each next block's added in row order by BLAS (beta = 1); so it is the same bits whatever
    runs beside it and whatever ``rows`` (an optimizer's scratch), and bitwise (5)'s when w^{l+1} is one block,
    within a few ulps of it otherwise. Nothing is allocated."""
    blocks = sweep_rows(w_next)
    if update is None:
        rows = blocks

        def update(block):
            rank_update(w_next[block], delta_next[block], a, controls)

    for block in row_blocks(w_next, blocks):
        matmul(delta, w_next[block].T, delta_next[block], beta=1.0 if block.start else 0.0)
        if controls[1] == 0:
            for part in row_blocks(w_next[block], rows):
                update(slice(block.start + part.start, block.start + part.stop))
    delta_hidden(delta, sp)


def row_updates(w, controls, update, rows):
    """``update(block)`` of each block of ``rows`` rows of w in turn, unless ``controls[1]``: the one-pass
    sweep's update of a weight matrix that no (5) reads."""
    if controls[1] == 0:
        for block in row_blocks(w, rows):
            update(block)


def rank_update(w, delta, a, controls):
    """``w -= controls[0] * delta a^T`` in place unless ``controls[1]``: w (n, m), delta (n, B), a (m, B).

    One BLAS call on the Fortran view of w, reading and writing w once: ``ger`` at B = 1, which adds
    ``(-controls[0] * delta_j) * a_i`` to each ``w_ji``, ``gemm`` with beta = 1 above. Each element lands within
    rounding of the exact ``w - controls[0] delta a^T``, as the unfused ``nabla_w`` then ``sgd_update`` does, but
    rounded otherwise (one product less, and fused multiply-adds where BLAS has them; docs/design.md §2).
    """
    if controls[1] == 0:
        matmul(w, delta, a.T, alpha=-float(controls[0]), beta=1.0)


SWEEP = 1 << 22
"""Bytes of w in a row block of ``backward_update``'s SGD update: 4 MiB (a 1024 x 1024 float32 matrix in one block),
read from memory for the chain and found again in the last-level cache (16-32 MiB on a server CPU) by the update."""


def sweep_rows(w):
    """Rows of w in a block of ``backward_update``'s SGD sweep (``row_blocks``): ``SWEEP`` bytes' worth."""
    return SWEEP // (w.shape[1] * w.itemsize)


def row_blocks(w, rows):
    """The row slices of w, in order, of ``rows`` rows each (one at least)."""
    n, rows = w.shape[0], max(1, rows)
    return [slice(r0, min(r0 + rows, n)) for r0 in range(0, n, rows)]


def _update_rows(w, delta, a, scale, scratch):
    """``w -= scale * (delta a^T)`` for a block of rows, their nabla_w in ``scratch``."""
    block = scratch[: w.size].reshape(w.shape)
    nabla_w(block, delta, a)
    np.multiply(block, scale, out=block)
    np.subtract(w, block, out=w)


PAGE = 4096
"""Bytes over which a CPU compares the addresses of a load and of the stores before it (4K aliasing)."""


def full_beside(param, k, fill):
    """A new array shaped as the contiguous ``param``, filled with ``fill``, for the k-th (1-3) array that an update
    streams beside it (its optimizer state, its gradient): its start k quarter-pages after param's, modulo a
    ``PAGE``. Arrays allocated one after another start alike modulo a page, and then each load of one waits on the
    stores to another: on an Intel Xeon the compiled Adam update of a 1024 x 1024 float32 matrix took 2.4 ms so,
    0.7 ms staggered (docs/performance.md)."""
    raw = np.empty_like(param, dtype=np.uint8, shape=param.nbytes + PAGE)  # of param's array type, as full_like
    start = (param.ctypes.data + k * PAGE // 4 - raw.ctypes.data) % PAGE
    order = "F" if param.flags.f_contiguous and not param.flags.c_contiguous else "C"
    out = raw[start: start + param.nbytes].view(param.dtype).reshape(param.shape, order=order)
    out.fill(fill)
    return out


def nabla_b(nabla_b, delta):
    """(6): ``nabla_b = sum over the batch of delta``, in float64: the batch-major delta of the host's plans is summed
    one sample after another (NumPy's pairwise sum runs along contiguous memory only), whose float32 error grows as
    B (6e-4 at B = 65536) where float64's ends at one rounding of the sum."""
    np.add.reduce(delta, 1, out=nabla_b, dtype=np.float64 if delta.shape[1] > 1 else None)  # np.sum's, without Python


_nabla_w, _nabla_b = nabla_w, nabla_b  # for the functions below, whose arguments take the names


def gradients(nabla_w, nabla_b, delta, a):
    """(6) and (7) of one layer: ``nabla_b`` then ``nabla_w``, as the two functions above compute them
    (the CUDA kernel computes both in one)."""
    _nabla_b(nabla_b, delta)
    _nabla_w(nabla_w, delta, a)


def update(w, nabla_w, b, nabla_b, controls, scratch):
    """The SGD update of one layer, ``sgd_update`` of w then of b (the CUDA kernel does both in one)."""
    sgd_update(w, nabla_w, controls, scratch)
    sgd_update(b, nabla_b, controls, scratch)


def sgd_update(param, nabla, controls, scratch):
    """``param -= controls[0] * nabla`` unless ``controls[1]``, through the flat ``scratch`` a cache-sized block at
    a time (``sgd_chunks`` of ``chunks``)."""
    sgd_chunks(chunks(param, nabla, scratch), controls)


def chunks(param, nabla, scratch):
    """``(part, gradient, chunk)`` of each ``scratch``-long block of the flat ``param`` and ``nabla``, in order."""
    param, nabla, size = param.reshape(-1), nabla.reshape(-1), scratch.size
    return [(param[i: i + size], nabla[i: i + size], scratch[: min(size, param.size - i)])
            for i in range(0, param.size, size)]


def sgd_chunks(blocks, controls):
    """``sgd_update`` of the ``chunks`` ``blocks``, its scale and refusal read from ``controls`` now."""
    if controls[1] == 0:
        for part, gradient, chunk in blocks:
            np.multiply(gradient, controls[0], out=chunk)
            np.subtract(part, chunk, out=part)


def momentum_update(param, nabla, buf, controls, momentum, dampening, nesterov, weight_decay):
    """torch.optim.SGD's step unless ``controls[1]``: ``g = controls[3] * nabla + weight_decay * param``; with
    ``momentum``, ``buf = g`` at ``controls[4] == 1``, else ``momentum * buf + (1 - dampening) * g``, and the step
    is ``buf`` (``g + momentum * buf`` with ``nesterov``); ``param -= controls[2] * step``. ``buf`` is None without
    momentum. One compiled pass (``host_updates.momentum``)."""
    if controls[1] == 0:
        flat = param.reshape(-1)
        _loops().momentum(flat, nabla.reshape(-1), flat if buf is None else buf.reshape(-1),
                          *_momentum_scalars(param.dtype.type, controls, momentum, dampening, nesterov, weight_decay))


def adam_update(param, nabla, m, v, controls, beta1, beta2, eps, weight_decay, decoupled):
    """torch.optim.Adam's step (``decoupled``: AdamW's) unless ``controls[1]``: ``g = controls[3] * nabla``, plus
    ``weight_decay * param`` (Adam) or with ``param *= 1 - controls[2] * weight_decay`` first (AdamW);
    ``m = beta1 m + (1 - beta1) g``, ``v = beta2 v + (1 - beta2) g^2``, and
    ``param -= controls[2] / controls[5] * m / (sqrt(v) / controls[6] + eps)`` (``controls[5]`` = 1 - beta1^t,
    ``controls[6]`` = sqrt(1 - beta2^t)). One compiled pass (``host_updates.adam``)."""
    if controls[1] == 0:
        _loops().adam(param.reshape(-1), nabla.reshape(-1), m.reshape(-1), v.reshape(-1),
                      *_adam_scalars(param.dtype.type, controls, beta1, beta2, eps, weight_decay, decoupled))


def momentum_sweep(chain, w, delta, a, buf, controls, momentum, dampening, nesterov, weight_decay):
    """``momentum_update`` of w (n, m) by nabla_w = delta a^T at B = 1 in one compiled pass, ``chain`` (m, 1) set to
    w^T delta of w as it was, summed over its rows in order (within a few ulps of BLAS's product); ``chain``
    None: the update alone. delta (n, 1), a (m, 1); ``buf`` as w, None without momentum."""
    _sweep(_loops().momentum_sweep, chain, w, delta, a, [w if buf is None else buf], controls,
           _momentum_scalars(w.dtype.type, controls, momentum, dampening, nesterov, weight_decay))


def adam_sweep(chain, w, delta, a, m, v, controls, beta1, beta2, eps, weight_decay, decoupled):
    """``adam_update`` of w, m and v by nabla_w = delta a^T at B = 1 in one compiled pass over them
    (``host_updates.adam_sweep``), ``chain`` as ``momentum_sweep``'s."""
    _sweep(_loops().adam_sweep, chain, w, delta, a, [m, v], controls,
           _adam_scalars(w.dtype.type, controls, beta1, beta2, eps, weight_decay, decoupled))


def _sweep(loop, chain, w, delta, a, state, controls, scalars):
    """A ``host_updates`` sweep of w and its ``state`` (a list of arrays); a refused step computes ``chain``
    alone, by BLAS."""
    chained = chain is not None
    if controls[1] != 0:
        if chained:
            matmul(chain, w.T, delta)
        return
    out = chain.reshape(-1) if chained else a.reshape(-1)[:0]  # unchained: an empty view, touched by nothing
    if chained:
        out.fill(0)
    loop(w, delta.reshape(-1), a.reshape(-1), *state, out, chained, *scalars)


def delta_parts(delta, part, sp):
    """(5) from the two halves of a sweep over w^{l+1}'s rows: ``delta = (delta + part) * sp``, ``delta`` (n, 1)
    holding the top rows' part of (w^{l+1})^T delta^{l+1}, ``part`` (n, 1) the bottom rows'."""
    np.add(delta, part, out=delta)
    delta_hidden(delta, sp)


def _loops():
    """``host_updates``, imported on first use: Numba loads with the first update that needs it."""
    from . import host_updates

    return host_updates


def _momentum_scalars(cast, controls, momentum, dampening, nesterov, weight_decay):
    """The scalars of ``host_updates.momentum`` after its arrays, in the parameter's dtype ``cast``."""
    return (cast(controls[3]), cast(controls[2]), cast(weight_decay), cast(momentum), cast(1 - dampening),
            controls[4] == 1, nesterov)


def _adam_scalars(cast, controls, beta1, beta2, eps, weight_decay, decoupled):
    """The scalars of ``host_updates.adam`` after its arrays, in the dtype ``cast``, as NumPy's calls make them, then
    ``small`` and ``floor``: for |g| < small, (g * c2) * g <= tiny * (1 + 2^-22) (tiny, the least normal number;
    ``small`` rounded down), and that is below half an ulp of any sum v * beta2 > floor = tiny * 2^(p + 2), p the
    dtype's significand bits (an ulp of x exceeds x 2^-p)."""
    lr = cast(controls[2])
    decay, weight_decay = (1 - lr * weight_decay, 0) if decoupled else (1, weight_decay)
    c2, info = cast(1 - beta2), np.finfo(cast)
    small = cast(np.sqrt(float(info.tiny) / float(c2)))
    return (cast(controls[3]), cast(decay), cast(weight_decay), cast(beta1), cast(1 - beta1), cast(beta2), c2,
            cast(controls[6]), cast(eps), lr / cast(controls[5]), np.nextafter(small, cast(0)),
            cast(info.tiny * cast(2.0) ** (info.nmant + 3)))


def sum_squares(x):
    """The sum of the squares of x's elements, as a float64: by BLAS in x's dtype, again in float64 where that sum
    is not finite (float32's passes its 3.4e38 where the batch's summed gradients pass 1.8e19; a clip of such a
    norm made every gradient 0)."""
    flat = x.reshape(-1)
    total = np.vdot(flat, flat)
    return np.float64(total if np.isfinite(total) else np.add.reduce(np.square(flat, dtype=np.float64)))


def check_finite(controls, x, code):
    """``controls[1] = code`` if ``x`` holds a NaN or an Inf and ``controls[1]`` is still 0 (the first gradient
    found wanting in a step names itself)."""
    if controls[1] == 0 and not (np.isfinite(x.min()) and np.isfinite(x.max())):  # no temporary of x's size
        controls[1] = code


def step_done(controls):
    """``controls[7] = controls[4]``, the step count t of the step whose updates have run, unless ``controls[1]``
    holds a refusal (they wrote nothing)."""
    if controls[1] == 0:
        controls[7] = controls[4]


def set_element(array, index, value):
    """``array[index] = value`` on the stream that runs it (eta / B into ``controls[0]``, say)."""
    array[index] = value
