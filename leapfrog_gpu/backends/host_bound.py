"""The ops of a host graph bound to their arguments once, as a CUDA graph fixes its kernels' arguments.

A ``HostGraph`` launches the same ops on the same arrays at every launch, so what an op works out from its
arguments before it computes (which BLAS routine, its pointers and strides, the row blocks of a sweep, the views)
can be worked out once, when the capture ends: ``bound(fn, args)`` is ``fn(*args)`` as a call of no argument. The
ops a step launches at every layer are bound here, their products by ``host_blas.bind``; what may change between
launches (eta / B and a refusal, in ``controls``) is read as they run, so a bound op computes what the op computes,
by the same routines in the same order: the same bits. At N = 256 the Python around an op is most of its time
(docs/performance.md, "Optimizers against torch.optim").
"""

import functools

from . import host_blas, ops_numpy


def bound(fn, args):
    """``fn(*args)`` as a call of no argument: bound here if ``fn`` is one of the ops below, else as it is (any
    callable, a ctypes function, which cannot be hashed, included)."""
    bind = next((binder for op, binder in _BINDERS if op is fn), None)
    call = bind(*args) if bind is not None else None
    return call if call is not None else functools.partial(fn, *args)


def _forward(z, a, sp, w, a_prev, b, activation):
    """``ops_numpy.forward``: its product bound, into ``ops_numpy.product_target``."""
    target = ops_numpy.product_target(z, sp)
    product = host_blas.bind(target, w, a_prev)

    def forward():
        product()
        ops_numpy.bias_activation(z, a, sp, b, activation, target)

    return forward


def _backward(delta, w_next, delta_next, sp):
    """``ops_numpy.backward``: its product bound."""
    product = host_blas.bind(delta, w_next.T, delta_next)

    def backward():
        product()
        ops_numpy.delta_hidden(delta, sp)

    return backward


def _rank_update(w, delta, a, controls):
    """``ops_numpy.rank_update``: its product bound, its scale read from ``controls`` as it runs."""
    product = host_blas.bind(w, delta, a.T, alpha=None, beta=1.0)

    def rank_update():
        if controls[1] == 0:
            product(-float(controls[0]))

    return rank_update


def _backward_update(delta, w_next, delta_next, sp, a, controls, update=None, rows=None):
    """``ops_numpy.backward_update`` with its SGD update: each block's product into delta bound, and its rank
    update (``_rank_update``); None (not bound) with an ``update`` of its own."""
    if update is not None:
        return None
    blocks = [(host_blas.bind(delta, w_next[block].T, delta_next[block], beta=1.0 if block.start else 0.0),
               _rank_update(w_next[block], delta_next[block], a, controls))
              for block in ops_numpy.row_blocks(w_next, ops_numpy.sweep_rows(w_next))]

    def backward_update():
        for product, rank_update in blocks:
            product()
            rank_update()
        ops_numpy.delta_hidden(delta, sp)

    return backward_update


def _nabla_w(nabla_w, delta, a):
    """``ops_numpy.nabla_w``: its product bound above B = 1 (an outer product, no BLAS, at B = 1)."""
    if delta.shape[1] == 1:
        return functools.partial(ops_numpy.nabla_w, nabla_w, delta, a)
    return host_blas.bind(nabla_w, delta, a.T)


def _gradients(nabla_w, nabla_b, delta, a):
    """``ops_numpy.gradients``: ``nabla_b`` then ``_nabla_w``."""
    calls = functools.partial(ops_numpy.nabla_b, nabla_b, delta), _nabla_w(nabla_w, delta, a)

    def gradients():
        for call in calls:
            call()

    return gradients


def _sgd_update(param, nabla, controls, scratch):
    """``ops_numpy.sgd_update``: the views of its chunks made once."""
    return functools.partial(ops_numpy.sgd_chunks, ops_numpy.chunks(param, nabla, scratch), controls)


_BINDERS = ((ops_numpy.forward, _forward), (ops_numpy.backward, _backward), (ops_numpy.rank_update, _rank_update),
            (ops_numpy.backward_update, _backward_update), (ops_numpy.nabla_w, _nabla_w),
            (ops_numpy.gradients, _gradients), (ops_numpy.sgd_update, _sgd_update))
