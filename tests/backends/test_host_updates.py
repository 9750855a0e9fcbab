"""The host's compiled optimizer updates (``host_updates`` through ``ops_numpy``) against the same rules written
as NumPy element-wise calls, one operation at a time in the parameter's dtype: bitwise equal, so that one
compiled pass changes no bit of what torch.optim's rules give (no multiply-add contracted, nothing computed
in a wider type); the one-pass sweeps against the update by nabla_w and the exact (5); and Numba left out of
the package's import."""

import subprocess
import sys

import numpy as np
import pytest

from leapfrog_gpu.backends import ops_numpy

DTYPES = [np.float32, np.float64]


def _values(dtype, shape, seed):
    """Random values of every scale, with zeros of both signs, ties (equal pairs) and subnormals among them."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 6, shape)
    flat = x.reshape(-1)
    flat[:4] = [0.0, -0.0, np.finfo(dtype).smallest_subnormal, 1.0]
    flat[4:8] = flat[8:12]
    return x.astype(dtype)


def _controls(dtype, lr, batch, t, betas=(0.9, 0.999)):
    return np.array([0, 0, lr, 1 / batch, t, 1 - betas[0] ** t, (1 - betas[1] ** t) ** 0.5], dtype)


def _momentum_by_calls(p, nabla, buf, controls, mu, dampening, nesterov, weight_decay):
    g = np.multiply(nabla, controls[3])
    if weight_decay:
        g = np.add(g, np.multiply(p, weight_decay))
    if mu:
        if controls[4] == 1:
            buf[...] = g
        else:
            buf[...] = np.add(np.multiply(buf, mu), np.multiply(g, 1 - dampening))
        g = np.add(g, np.multiply(buf, mu)) if nesterov else buf.copy()
    p -= np.multiply(g, controls[2])


def _adam_by_calls(p, nabla, m, v, controls, beta1, beta2, eps, weight_decay, decoupled):
    g = np.multiply(nabla, controls[3])
    if decoupled:
        p *= 1 - controls[2] * weight_decay
    elif weight_decay:
        g = np.add(g, np.multiply(p, weight_decay))
    m[...] = np.add(np.multiply(m, beta1), np.multiply(g, 1 - beta1))
    v[...] = np.add(np.multiply(v, beta2), np.multiply(np.multiply(g, 1 - beta2), g))
    denominator = np.add(np.divide(np.sqrt(v), controls[6]), eps)
    p -= np.multiply(np.divide(m, denominator), controls[2] / controls[5])


def _bits(*arrays):
    return [a.tobytes() for a in arrays]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("t", [1, 4])
@pytest.mark.parametrize("mu, dampening, nesterov, weight_decay",
                         [(0.9, 0.0, False, 0.0), (0.9, 0.3, False, 1e-2), (0.8, 0.0, True, 5e-3), (0.0, 0.0, False, 0.1)])
def test_momentum_is_the_element_wise_rule_bitwise(dtype, t, mu, dampening, nesterov, weight_decay):
    p, nabla, buf = (_values(dtype, (37, 29), seed) for seed in (1, 2, 3))
    controls = _controls(dtype, 0.05, 7, t)
    want = [p.copy(), buf.copy()]
    _momentum_by_calls(want[0], nabla, want[1], controls, mu, dampening, nesterov, weight_decay)
    ops_numpy.momentum_update(p, nabla, buf if mu else None, controls, mu, dampening, nesterov, weight_decay)
    assert _bits(p, buf) == _bits(*want)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("t", [1, 9])
@pytest.mark.parametrize("weight_decay, decoupled", [(0.0, False), (1e-2, False), (1e-2, True), (0.0, True)],
                         ids=["adam", "adam-decay", "adamw", "adamw-no-decay"])
def test_adam_is_the_element_wise_rule_bitwise(dtype, t, weight_decay, decoupled):
    p, nabla, m = (_values(dtype, (37, 29), seed) for seed in (4, 5, 6))
    v = np.abs(_values(dtype, (37, 29), 7))
    v.reshape(-1)[12] = 0  # sqrt(v) = 0: the step is m / eps
    controls = _controls(dtype, 3e-3, 5, t)
    want = [p.copy(), m.copy(), v.copy()]
    _adam_by_calls(*want[:1], nabla, *want[1:], controls, 0.9, 0.999, 1e-8, weight_decay, decoupled)
    ops_numpy.adam_update(p, nabla, m, v, controls, 0.9, 0.999, 1e-8, weight_decay, decoupled)
    assert _bits(p, m, v) == _bits(*want)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_adam_is_the_rule_bitwise_where_a_vanishing_gradient_makes_subnormal_products(dtype):
    """Around the bounds where the compiled update adds 0 in place of (g * (1 - beta2)) * g (a term with subnormal
    products, below half an ulp of v * beta2): gradients about sqrt(tiny / (1 - beta2)) and below, down to subnormal
    ones, against v * beta2 about tiny * 2^(p + 2) and below, down to 0; every pair, bitwise the element-wise rule."""
    info, c2 = np.finfo(dtype), dtype(1 - 0.999)
    tiny, bits = float(info.tiny), info.nmant + 1
    small, floor = np.sqrt(tiny / float(c2)), tiny * 2.0 ** (bits + 2)
    g = np.array([s * small * f for s in (1, -1) for f in (60, 8, 3, 1 + 2.0 ** -20, 1, 1 - 2.0 ** -20, 0.5, 2.0 ** -12, 1e-3)]
                 + [tiny, -tiny, float(info.smallest_subnormal), 0.0, -0.0, 3.0], dtype)
    kept = np.array([floor * f for f in (4.0, 1 + 2.0 ** -20, 1, 1 - 2.0 ** -20, 0.5, 2.0 ** -3, 2.0 ** -5, 2.0 ** -8,
                                           2.0 ** -30)]
                    + [tiny, float(info.smallest_subnormal), 0.0, 1.0], dtype)
    g, v = (a.reshape(-1) for a in np.meshgrid(g, kept / dtype(0.999)))
    p, m = _values(dtype, g.shape, 11), _values(dtype, g.shape, 12)
    controls = _controls(dtype, 3e-3, 1, 4)
    want = [p.copy(), m.copy(), v.copy()]
    _adam_by_calls(*want[:1], g, *want[1:], controls, 0.9, 0.999, 1e-8, 0.0, False)
    ops_numpy.adam_update(p, g, m, v, controls, 0.9, 0.999, 1e-8, 0.0, False)
    assert _bits(p, m, v) == _bits(*want)


def test_a_refused_step_writes_nothing():
    p, nabla, m = (_values(np.float32, (5, 3), seed) for seed in (8, 9, 10))
    v = np.abs(m)
    controls = _controls(np.float32, 0.1, 2, 3)
    controls[1] = 2
    before = _bits(p, m, v)
    ops_numpy.adam_update(p, nabla, m, v, controls, 0.9, 0.999, 1e-8, 0.1, False)
    ops_numpy.momentum_update(p, nabla, m, controls, 0.9, 0.0, True, 0.1)
    assert _bits(p, m, v) == before


SWEEPS = {"momentum": (lambda w, nabla, state, controls: ops_numpy.momentum_update(
              w, nabla, state[0], controls, 0.9, 0.1, False, 1e-2),
          lambda chain, w, delta, a, state, controls: ops_numpy.momentum_sweep(
              chain, w, delta, a, state[0], controls, 0.9, 0.1, False, 1e-2)),
          "adamw": (lambda w, nabla, state, controls: ops_numpy.adam_update(
              w, nabla, *state, controls, 0.9, 0.999, 1e-8, 1e-2, True),
          lambda chain, w, delta, a, state, controls: ops_numpy.adam_sweep(
              chain, w, delta, a, *state, controls, 0.9, 0.999, 1e-8, 1e-2, True))}
"""For each optimizer, its update by a whole nabla_w and its one-pass sweep (ops_numpy's)."""


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("kind", list(SWEEPS))
@pytest.mark.parametrize("refused", [0, 3])
def test_the_sweep_is_the_update_by_delta_a_and_the_chain_within_rounding(dtype, kind, refused):
    """At B = 1: w and its state bitwise the update by nabla_w = delta a^T (``nabla_w``, then the update), the
    chain within a few ulps of the exact (w^{l+1})^T delta^{l+1} of w as it was (float64 sums of |terms| bound
    it); a refused step (controls[1] != 0) computes the chain and changes nothing else. Zeros in delta^{l+1}
    and a, a row of ties."""
    update, sweep = SWEEPS[kind]
    n, m = 37, 29
    rng = np.random.default_rng(refused)
    w, m_state, v_state = (rng.standard_normal((n, m)).astype(dtype) for _ in range(3))
    state = [m_state, np.abs(v_state)] if kind == "adamw" else [m_state]
    delta_next, a = (rng.standard_normal((k, 1)).astype(dtype) for k in (n, m))
    delta_next[3], a[5], w[7] = 0, 0, w[8]
    controls = _controls(dtype, 0.01, 3, 4)  # 1 / B = 1/3, not the sweep's 1, so that its rounding shows
    controls[1] = refused
    want_w, want_state = w.copy(), [s.copy() for s in state]
    before = _bits(w, *state)
    nabla = np.full((n, m), np.nan, dtype)
    ops_numpy.nabla_w(nabla, delta_next, a)
    update(want_w, nabla, want_state, controls)
    exact = w.astype(np.float64).T @ delta_next.astype(np.float64)
    bound = 4 * n * np.finfo(dtype).eps * (np.abs(w.astype(np.float64)).T @ np.abs(delta_next))
    chain = np.full((m, 1), np.nan, dtype, order="F")
    sweep(chain, w, delta_next, a, state, controls)
    assert np.all(np.abs(chain - exact) <= bound)
    assert _bits(w, *state) == _bits(want_w, *want_state)
    assert (_bits(w, *state) == before) == bool(refused)


def test_the_parts_of_a_split_sweep_add_before_sp():
    """``delta_parts``: delta = (top + bottom) * sp, the two halves' parts of (5) added in that order."""
    top, bottom, sp = (np.array([[1.0], [2.0 ** 60], [-3.0]]), np.array([[2.0 ** -60], [1.0], [3.0]]),
                       np.array([[2.0], [3.0], [-1.0]]))
    ops_numpy.delta_parts(top, bottom, sp)
    assert _bits(top) == _bits(np.array([[2.0], [3 * 2.0 ** 60], [-0.0]]))


def test_the_package_imports_without_numba():
    """Numba loads with the first update that needs it, not with the package (or its CLIs' start)."""
    code = ("import sys, leapfrog_gpu, leapfrog_gpu.backends.ops_numpy, leapfrog_gpu.tools.train.command; "
            "print(sorted(m for m in ('numba', 'llvmlite') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_controls_in_another_dtype_are_read_in_the_parameters():
    """float64 controls of a float32 parameter: the same bits as the controls in float32 (every scalar of a loop
    in the parameter's dtype, so no element is computed in a wider type)."""
    p, nabla, m = (_values(np.float32, (9, 7), seed) for seed in (12, 13, 14))
    v = np.abs(m)
    wide = _controls(np.float64, 3e-3, 5, 3)
    got, want = [p.copy(), m.copy(), v.copy()], [p.copy(), m.copy(), v.copy()]
    ops_numpy.adam_update(got[0], nabla, got[1], got[2], wide, 0.9, 0.999, 1e-8, 1e-2, True)
    ops_numpy.adam_update(want[0], nabla, want[1], want[2], wide.astype(np.float32), 0.9, 0.999, 1e-8, 1e-2,
                          True)
    ops_numpy.momentum_update(got[0], nabla, got[1], wide, 0.9, 0.0, True, 1e-2)
    ops_numpy.momentum_update(want[0], nabla, want[1], wide.astype(np.float32), 0.9, 0.0, True, 1e-2)
    assert _bits(*got) == _bits(*want)
