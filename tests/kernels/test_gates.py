"""The gated cells' step kernels of kernels/gates.cu, and their NumPy twins in ``ops_numpy``, against the GRU's and
the LSTM's equations (``leapfrog_gpu/rnn/cells.py``) written out here in NumPy and evaluated in float64.

As in test_kernels.py: the kernels run through ``CudaOps`` on the CPU harness (and on a GPU through CuPy, skipped
without one), the twins as they are; outputs start as NaN, every step but t must come back bit for bit as it went
in, and the tolerance per element is ``2 * e32 + 4 * eps * max(|x|, 1)``, e32 the largest error of the same maths in
plain float32 NumPy against float64. Widths N and batches B are ragged: no multiple of the block, B in {1, 2, 31, 33};
every step t: t = 0 (no state before it), t = 1 (the first with a step before it) and t = tau - 1.
Pre-activations mix in saturating values (|z| = 30 and 100).
"""

import numpy as np
import pytest

from leapfrog_gpu.backends import launch

DTYPES = (np.float32, np.float64)
WIDTHS = (1, 33, 257)
BATCHES = (1, 2, 31, 33)
TAU = 3
STEPS = tuple(range(TAU))


def _random(rng, shape, dtype, scale=1.0, specials=(0.0,)):
    x = scale * rng.standard_normal(shape)
    chosen = rng.random(shape) < 0.2
    x[chosen] = np.resize(np.asarray(specials, dtype=np.float64), int(chosen.sum()))
    return x.astype(dtype)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _before(x, t):
    return x[:, t - 1] if t else np.zeros_like(x[:, 0])


def check(device, run, inputs, expect, outputs):
    """``run(device, inputs)`` returns every array the kernel takes, on the host; ``outputs`` names those it
    writes with the step each writes (None: the whole (N, B) array), ``expect(inputs)`` their values there."""
    dtype = inputs["n_like"].dtype
    inputs64 = {name: value.astype(np.float64) for name, value in inputs.items()}
    with np.errstate(over="ignore"):
        reference = expect(inputs64)
        approximate = expect(inputs) if dtype == np.float32 else reference
    eps = np.finfo(dtype).eps
    got = run(device, {name: value.copy() for name, value in inputs.items()})
    for (name, step), ref, low in zip(outputs, reference, approximate):
        e32 = np.max(np.abs(low.astype(np.float64) - ref), initial=0)
        bound = 2 * e32 + 4 * eps * np.maximum(np.abs(ref), 1)
        out = got[name] if step is None else got[name][:, step]
        assert out.dtype == dtype and out.shape == ref.shape, name
        error = np.nan_to_num(np.abs(out - ref), nan=np.inf)
        worst = np.unravel_index(np.argmax(error - bound), error.shape)
        assert np.all(error <= bound), f"{name}: error {error[worst]:.3g} > {bound[worst]:.3g} at {worst}"
    for name, value in got.items():  # every other step as it went in, NaNs included
        written = [step for written_name, step in outputs if written_name == name]
        if None in written:
            continue
        kept = [s for s in range(TAU) if s not in written] if value.ndim == 3 else None
        if kept is None:
            assert np.array_equal(value, inputs[name], equal_nan=True), name
        else:
            assert np.array_equal(value[:, kept], inputs[name][:, kept], equal_nan=True), name


def _sequences(rng, N, B, t, dtype, gates):
    """z (G N, tau, B) and NaN-filled gates and outputs."""
    return {"z": _random(rng, (gates * N, TAU, B), dtype, 3.0, (30.0, -30.0, 100.0, -100.0, 0.0)),
            "gates": np.full((gates * N, TAU, B), np.nan, dtype)}


def _state(rng, N, B, t, dtype):
    """A state sequence (N, tau, B): step t - 1 random, step t NaN, the others random too."""
    state = _random(rng, (N, TAU, B), dtype)
    state[:, t] = np.nan
    return state


def _launch(device, name, inputs, order):
    arrays = {key: device.to_device(inputs[key]) for key in order}
    getattr(device.ops, name)(*arrays.values(), inputs["t"])
    return {key: device.to_host(value) for key, value in arrays.items()}


def every_step(test):
    """``test`` at every width N, batch B, step t and dtype."""
    for name, values in (("N", WIDTHS), ("B", BATCHES), ("t", STEPS)):
        test = pytest.mark.parametrize(name, values)(test)
    return pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])(test)


@every_step
def test_gru_forward(device, N, B, t, dtype):
    rng = np.random.default_rng([N, B, t, 1])
    x = _sequences(rng, N, B, t, dtype, 3)
    x.update(hn=np.full((N, TAU, B), np.nan, dtype), h=_state(rng, N, B, t, dtype),
             uh=_random(rng, (3 * N, B), dtype, 2.0), b_hn=_random(rng, (N,), dtype), n_like=np.zeros(1, dtype))

    def expect(v):
        z, uh = v["z"][:, t], v["uh"]
        r, u = _sigmoid(z[:N] + uh[:N]), _sigmoid(z[N: 2 * N] + uh[N: 2 * N])
        hn = uh[2 * N:] + v["b_hn"][:, None]
        n = np.tanh(z[2 * N:] + r * hn)
        return np.concatenate([r, u, n]), hn, (1 - u) * n + u * _before(v["h"], t)

    def run(dev, v):
        v["t"] = t
        return _launch(dev, "gru_forward", v, ("z", "gates", "hn", "h", "uh", "b_hn"))

    check(device, run, x, expect, [("gates", t), ("hn", t), ("h", t)])


@every_step
def test_gru_backward(device, N, B, t, dtype):
    rng = np.random.default_rng([N, B, t, 2])
    gates = np.concatenate([_sigmoid(_random(rng, (2 * N, TAU, B), np.float64, 3.0, (30.0, -30.0))),
                            np.tanh(_random(rng, (N, TAU, B), np.float64, 2.0, (0.0,)))]).astype(dtype)
    x = {"delta": np.full((3 * N, TAU, B), np.nan, dtype), "delta_u": np.full((3 * N, TAU, B), np.nan, dtype),
         "delta_h": _random(rng, (N, TAU, B), dtype), "gates": gates, "hn": _random(rng, (N, TAU, B), dtype),
         "h": _random(rng, (N, TAU, B), dtype), "n_like": np.zeros(1, dtype)}

    def expect(v):
        g, dh = v["gates"][:, t], v["delta_h"][:, t]
        r, u, n = g[:N], g[N: 2 * N], g[2 * N:]
        dn = dh * (1 - u) * (1 - n ** 2)
        dz = dh * (_before(v["h"], t) - n) * u * (1 - u)
        dr = dn * v["hn"][:, t] * r * (1 - r)
        out = [np.concatenate([dr, dz, dn]), np.concatenate([dr, dz, r * dn])]
        return out + ([v["delta_h"][:, t - 1] + u * dh] if t else [])

    def run(dev, v):
        v["t"] = t
        return _launch(dev, "gru_backward", v, ("delta", "delta_u", "delta_h", "gates", "hn", "h"))

    check(device, run, x, expect, [("delta", t), ("delta_u", t)] + ([("delta_h", t - 1)] if t else []))


@every_step
def test_lstm_forward(device, N, B, t, dtype):
    rng = np.random.default_rng([N, B, t, 3])
    x = _sequences(rng, N, B, t, dtype, 4)
    x.update(c=_state(rng, N, B, t, dtype), h=np.full((N, TAU, B), np.nan, dtype), n_like=np.zeros(1, dtype))

    def expect(v):
        z = v["z"][:, t]
        i, f, g, o = _sigmoid(z[:N]), _sigmoid(z[N: 2 * N]), np.tanh(z[2 * N: 3 * N]), _sigmoid(z[3 * N:])
        c = f * _before(v["c"], t) + i * g
        return np.concatenate([i, f, g, o]), c, o * np.tanh(c)

    def run(dev, v):
        v["t"] = t
        return _launch(dev, "lstm_forward", v, ("z", "gates", "c", "h"))

    check(device, run, x, expect, [("gates", t), ("c", t), ("h", t)])


@every_step
def test_lstm_backward(device, N, B, t, dtype):
    rng = np.random.default_rng([N, B, t, 4])
    pre = _random(rng, (4 * N, TAU, B), np.float64, 3.0, (30.0, -30.0))
    gates = np.concatenate([_sigmoid(pre[:2 * N]), np.tanh(pre[2 * N: 3 * N]), _sigmoid(pre[3 * N:])]).astype(dtype)
    x = {"delta": np.full((4 * N, TAU, B), np.nan, dtype), "dc": _random(rng, (N, B), dtype),
         "delta_h": _random(rng, (N, TAU, B), dtype), "gates": gates, "c": _random(rng, (N, TAU, B), dtype, 2.0),
         "n_like": np.zeros(1, dtype)}

    def expect(v):
        g4, dh, c = v["gates"][:, t], v["delta_h"][:, t], v["c"][:, t]
        i, f, g, o = g4[:N], g4[N: 2 * N], g4[2 * N: 3 * N], g4[3 * N:]
        dc = v["dc"] + dh * o * (1 - np.tanh(c) ** 2)
        delta = np.concatenate([dc * g * i * (1 - i), dc * _before(v["c"], t) * f * (1 - f), dc * i * (1 - g ** 2),
                                dh * np.tanh(c) * o * (1 - o)])
        return delta, dc * f

    def run(dev, v):
        v["t"] = t
        return _launch(dev, "lstm_backward", v, ("delta", "dc", "delta_h", "gates", "c"))

    check(device, run, x, expect, [("delta", t), ("dc", None)])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_gates_grid_stride_loop(device, monkeypatch, dtype):
    """The sizes above fit in one pass of the grid; cap it so that every thread loops several times."""
    monkeypatch.setattr(launch, "GATES_MAX_GRID", 2)
    assert launch.gates_launch(257, 33)[0][0] * launch.GATES_BLOCK < 257 * 33
    for test in (test_gru_forward, test_gru_backward, test_lstm_forward, test_lstm_backward):
        test(device, 257, 33, TAU - 1, dtype)


@pytest.mark.parametrize("n, batch", [(1, 1), (257, 33), (4096, 1024), (1, 100_000)])
def test_gates_launch_covers_every_unit_within_cuda_limits(n, batch):
    grid, block, options = launch.gates_launch(n, batch)
    assert block == (launch.GATES_BLOCK, 1, 1) and options == (f"-DGATES_BLOCK={launch.GATES_BLOCK}",)
    assert 1 <= grid[0] <= launch.GATES_MAX_GRID and (grid[0] * block[0] >= n * batch
                                                      or grid[0] == launch.GATES_MAX_GRID)
