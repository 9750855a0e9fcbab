"""Quasi-Newton (quasi-DEER) on the gated cells, float64: the diagonals of each state Jacobian against central
differences of one step of the float64 reference and against the diagonal of the whole Jacobian; the solve against
the sequential forward, elementwise throughout (no S x S matrix built or scanned); its memory and flops from the
equations; the step parallel in time against BPTT's; and the same solve on the CuPy stand-in."""

import numpy as np
import pytest

from helpers import batch
from leapfrog_gpu import RNN, BPTT, TimeNewton, TimeScan
from leapfrog_gpu.core.checks import MEMORY_LIMIT
from leapfrog_gpu.rnn import gated_newton, gated_reference
from leapfrog_gpu.rnn.cells import GRU, LSTM

CELLS = ("gru", "lstm")
G = {"gru": 3, "lstm": 4}
S = {"gru": 1, "lstm": 2}  # the state's width in units of N: h, or (h, c)

# Flops of one unit's diagonal entries of J_t, one an operation, from the equations of leapfrog_gpu/rnn/cells.py:
DIAGONAL = {
    # z + (1 - z)(1 - n²)(r u_n + hn r (1 - r) u_r) + (h - n) z (1 - z) u_z: 1 - z, n², 1 - n², their product;
    # r u_n; hn r, 1 - r, (hn r)(1 - r), u_r; the sum, its product; h - n, z, (1 - z), u_z; two sums
    "gru": 4 + 1 + 4 + 2 + 4 + 2,
    # tanh c; o (1 - o) tanh c u_o: 1 - o and 3 products; o' = o (1 - tanh² c): 3; K_ii: c f (1 - f) u_f,
    # g i (1 - i) u_i, i (1 - g²) u_g (4 each) and 2 sums; o' K_ii, the sum; ∂c/∂c = f: none
    "lstm": 1 + 4 + 3 + 12 + 2 + 2,
}


def gated(cell, sizes, backend="numpy", seed=5):
    return RNN(sizes, cell=cell, output="every", dtype="float64", backend=backend, seed=seed)


def relative(got, want):
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300))


def random_case(seed):
    """Random sizes of two or three recurrent layers 1..6 wide, and a batch size."""
    rng = np.random.default_rng(seed)
    sizes = [int(n) for n in rng.integers(1, 7, size=int(rng.integers(4, 6)))]
    return sizes, int(rng.integers(1, 5))


def diagonals(net, tau, B, l):
    """The cell's ``diagonals`` of layer l at the states and gates its last forward pass left, NaN-filled first."""
    cell = net.plan(tau, B).recursion[l]
    D = np.full((tau - 1, B, S[net.cell] * net.n[l]), np.nan)
    cell.diagonals(D)
    return D


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("seed", [0, 1])
def test_diagonals_are_central_differences_of_one_step_of_the_reference(cell, seed):
    """D[t - 2]_i = ∂h^t_i/∂h^{t-1}_i (and the LSTM's ∂c^t_i/∂c^{t-1}_i) by central differences of
    ``gated_reference``'s step at the sequential forward's states, every layer and step t = 2..tau."""
    sizes, B = random_case(seed)
    tau, eps = 6, 1e-6
    x, _ = batch(sizes, B, seed, tau=tau)
    with gated(cell, sizes) as net:
        net.feedforward(x)
        p, params = net.plan(tau, B), net.parameters()
        for l in net.hidden:
            N, got, layer = net.n[l], diagonals(net, tau, B, l), params[l]
            h = np.asarray(p.a[l])
            c = np.asarray(p.recursion[l].c) if cell == "lstm" else np.zeros_like(h)
            want = np.full_like(got, np.nan)
            for t in range(1, tau):  # 0-based: the step t reads h^{t-1}, c^{t-1}
                for i in range(N):
                    for part in range(S[cell]):  # the h of the state, then the LSTM's c
                        sides = []
                        for step in (eps, -eps):
                            moved = [h[:, t - 1].copy(), c[:, t - 1].copy()]
                            moved[part][i] += step
                            out = gated_reference._step(cell, layer["w"], layer["u"], layer["b"], layer.get("b_hn"),
                                                        np.asarray(p.a[l - 1])[:, t], *moved)
                            sides.append(out[part][i])
                        want[t - 1, :, part * N + i] = (sides[0] - sides[1]) / (2 * eps)
            assert not np.isnan(got).any()
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-8, err_msg=f"layer {l}")


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_diagonals_are_the_diagonal_of_the_whole_jacobian(cell, seed):
    """The diagonals against the diagonal of J_t^T built whole by ``jacobians`` (float64), at random sizes."""
    sizes, B = random_case(seed)
    tau = 7
    x, _ = batch(sizes, B, seed, tau=tau)
    with gated(cell, sizes, seed=seed) as net:
        net.feedforward(x)
        for l in net.hidden:
            whole = np.full((tau, B) + (S[cell] * net.n[l],) * 2, np.nan)
            net.plan(tau, B).recursion[l].jacobians(whole)
            want = np.diagonal(whole[:-1], axis1=-2, axis2=-1)
            np.testing.assert_allclose(diagonals(net, tau, B, l), want, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("tau", [1, 7, 40])
@pytest.mark.parametrize("damping", [0.0, 0.5])
def test_quasi_newton_converges_to_the_sequential_forward(cell, tau, damping):
    """At random sizes, within 1e-10 of the sequential forward in the iterations it reports (at most tau a layer),
    its rounds and evaluations those iterations' (doubling: ``auto`` on the host for an elementwise scan)."""
    sizes, B = random_case(tau + int(10 * damping))
    x, _ = batch(sizes, B, tau, tau=tau)
    solver = TimeNewton(quasi=True, damping=damping)
    with gated(cell, sizes) as net:
        got = net.feedforward(x, solver=solver)
        want = net.feedforward(x)
    iterations = solver.stats["iterations_per_layer"]
    assert relative(got, want) < 1e-10 and solver.stats["converged"]
    assert all(i <= tau for i in iterations) and solver.stats["scan"] == "doubling"
    assert solver.stats["rounds"] == sum(i * (tau - 1).bit_length() + i + 1 for i in iterations)
    assert solver.stats["evaluations"] == sum(i + 1 for i in iterations)


@pytest.mark.parametrize("cell", CELLS)
def test_quasi_builds_and_scans_diagonals_only(monkeypatch, cell):
    """No whole Jacobian is built (``jacobians`` is never called) and every scan multiplies (tau, B, S) diagonals
    elementwise; the buffers are flat tau·B·S vectors."""
    sizes, tau, B = [3, 5, 4, 2], 9, 2
    scans = []

    def refuse(*args, **kwargs):
        raise AssertionError("quasi built a whole Jacobian")

    def recorded(xp, product, A, A_next, c, q, scan):
        scans.append((product, A.shape, A_next.shape, c.shape, q.shape))
        return suffix_scan(xp, product, A, A_next, c, q, scan)

    suffix_scan = gated_newton.suffix_scan
    monkeypatch.setattr({"gru": GRU, "lstm": LSTM}[cell], "jacobians", refuse)
    monkeypatch.setattr(gated_newton, "suffix_scan", recorded)
    x, _ = batch(sizes, B, tau=tau)
    with gated(cell, sizes) as net:
        solver = TimeNewton(quasi=True)
        assert relative(net.feedforward(x, solver=solver), net.feedforward(x)) < 1e-10
        sequences, flats = net.plan(tau, B).cache["gated-newton", True]
    assert len(scans) == solver.stats["iterations"] > 0
    for l, count in zip((2, 3), solver.stats["iterations_per_layer"]):
        shape = (tau, B, S[cell] * sizes[l - 1])
        assert scans[:count] == [(np.multiply, shape, shape, shape, shape)] * count
        del scans[:count]
    assert [a.shape for a in flats] == [(tau * B * S[cell] * 5,)] * 4


def quasi_iterates(cell, layer, x, iterations, damping, eps=1e-6):
    """The iterate (tau, S, B) of quasi-Newton after ``iterations`` from zero, written out step by step on
    ``gated_reference``'s step: s_t = D_t s_{t-1} + F(s^(i)_{t-1}) - D_t s^(i)_{t-1}, D_t the (1 - damping) central
    differences of the step's diagonal at s^(i)_{t-1} (D_1 = 0: s_0 = 0 is no unknown)."""
    tau, B, N = len(x), x.shape[2], layer["u"].shape[1]
    width = S[cell] * N

    def step(t, s):
        h, c = gated_reference._step(cell, layer["w"], layer["u"], layer["b"], layer.get("b_hn"), x[t], s[:N],
                                     s[N:] if cell == "lstm" else None)[:2]
        return h if cell == "gru" else np.concatenate([h, c])

    s = np.zeros((tau, width, B))
    for _ in range(iterations):
        new = np.zeros_like(s)
        for t in range(tau):
            old = s[t - 1] if t else np.zeros((width, B))
            D = np.zeros((width, B))
            for i in range(width if t else 0):
                moved = [old.copy(), old.copy()]
                moved[0][i] += eps
                moved[1][i] -= eps
                D[i] = (1 - damping) * (step(t, moved[0])[i] - step(t, moved[1])[i]) / (2 * eps)
            new[t] = D * ((new[t - 1] if t else 0) - old) + step(t, old)
        s = new
    return s


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("damping", [0.0, 0.5])
def test_each_quasi_iteration_is_the_linearized_recurrence_written_out(cell, damping):
    """After 1, 2 and 3 iterations, short of the solution, the iterate is ``quasi_iterates``' from the reference's
    step and central differences."""
    sizes, tau, B = [3, 4, 2], 7, 2
    x, _ = batch(sizes, B, 7, tau=tau)
    with gated(cell, sizes) as net:
        layer = net.parameters()[2]
        net.feedforward(x)
        solution = np.asarray(net.plan(tau, B).a[2]).transpose(1, 0, 2).copy()
        for m in (1, 2, 3):
            solver = TimeNewton(quasi=True, damping=damping, max_iterations=m, tol=0)
            with pytest.warns(RuntimeWarning, match="iterations"):
                net.feedforward(x, solver=solver)
            got = np.asarray(net.plan(tau, B).a[2]).transpose(1, 0, 2)
            assert np.max(np.abs(got - quasi_iterates(cell, layer, x, m, damping)[:, :4])) < 1e-8, m
            assert np.max(np.abs(got - solution)) > 1e-6, m  # not yet the solution: the step itself is compared


def quasi_bytes(sizes, tau, B, itemsize, cell):
    """w a^{l-1} + b and u h (G·N each), the iterate and f (S each), the diagonals twice and the vectors twice (S
    each), for the widest N: 2·tau·B·G·N + 6·tau·B·S values."""
    N = max(sizes[1:-1])
    return itemsize * tau * B * (2 * G[cell] * N + 6 * S[cell] * N)


@pytest.mark.parametrize("cell", CELLS)
def test_quasi_memory_is_its_diagonals_and_the_check_refuses_one_byte_below(cell):
    sizes, tau, B = [3, 5, 4, 2], 6, 3
    need = quasi_bytes(sizes, tau, B, 8, cell)
    assert TimeNewton(quasi=True).memory_needed(sizes, tau, B, 8, cell=cell) == need
    x, _ = batch(sizes, B, tau=tau)
    with gated(cell, sizes) as net:
        with pytest.raises(ValueError, match=rf"needs {need} bytes .*\({cell.upper()}\).* over memory_limit="
                                             rf"{need - 1} .*; pass a larger memory_limit or use the sequential"):
            net.feedforward(x, solver=TimeNewton(quasi=True, memory_limit=need - 1))
        solver = TimeNewton(quasi=True, memory_limit=need)
        net.feedforward(x, solver=solver)
        held = sum(a.nbytes for part in net.plan(tau, B).cache["gated-newton", True] for a in part)
    assert solver.stats["memory_bytes"] == held == need


def test_an_lstms_quasi_newton_at_n_128_fits_the_default_limit_where_newton_does_not():
    """``leapfrog-bench --model rnn --cell lstm --sizes 128 --tau 64 --batch 32`` (float32): Newton's (2N)^2
    Jacobians take over 1 GiB, quasi's diagonals about 20 MiB."""
    sizes, tau, B = [128] * 4, 64, 32
    quasi = TimeNewton(quasi=True).memory_needed(sizes, tau, B, 4, cell="lstm")
    assert quasi == quasi_bytes(sizes, tau, B, 4, "lstm") == 20_971_520 < MEMORY_LIMIT
    assert TimeNewton().memory_needed(sizes, tau, B, 4, cell="lstm") > MEMORY_LIMIT


def scan_flops(tau, B, S):
    """Doubling's rounds s = 1, 2, 4, ... < tau on diagonals: tau - s products and adds of S elements, and the
    max(tau - 2s, 0) products of diagonals."""
    flops, s = 0, 1
    while s < tau:
        flops += B * S * (2 * (tau - s) + max(tau - 2 * s, 0))
        s *= 2
    return flops


@pytest.mark.parametrize("cell", CELLS)
def test_one_more_quasi_iteration_costs_the_equations_flops(cell):
    """One more iteration of every layer: the evaluation (u h at t > 1, the cell's forward but its biases, the
    residual's difference and square) and the step: the tau - 1 diagonals (``DIAGONAL``), J_t s_{t-1} at t > 1, c_t
    at every t, and doubling's rounds on diagonals."""
    sizes, tau, B = [3, 5, 4, 2], 8, 3
    forward = {"gru": 14, "lstm": 17}
    flops = {}
    for m in (1, 2):
        solver = TimeNewton(quasi=True, max_iterations=m, tol=0)
        with gated(cell, sizes) as net, pytest.warns(RuntimeWarning, match="iterations"):
            net.feedforward(batch(sizes, B, tau=tau)[0], solver=solver)
        assert solver.stats["iterations_per_layer"] == [m, m]
        flops[m] = solver.stats["flops"]
    want = 0
    for N in sizes[1:-1]:
        width = S[cell] * N
        want += (2 * G[cell] * N * N * (tau - 1) * B + (forward[cell] - G[cell]) * N * tau * B
                 + 2 * width * tau * B)
        want += (tau - 1) * B * (DIAGONAL[cell] * N + width) + width * tau * B + scan_flops(tau, B, width)
    assert flops[2] - flops[1] == solver.iteration_flops(sizes, tau, B, cell=cell) == want
    assert want < TimeNewton().iteration_flops(sizes, tau, B, cell=cell)


@pytest.mark.parametrize("cell", CELLS)
def test_the_step_parallel_in_time_with_quasi_is_bptts_step(cell):
    """Two SGD steps by TimeScan() on quasi-Newton's forward against two by BPTT() on the sequential forward."""
    sizes, tau, B = [3, 6, 5, 2], 12, 3
    params = {}
    for schedule, solver in ((BPTT(), None), (TimeScan(), TimeNewton(quasi=True))):
        with gated(cell, sizes) as net:
            for step in range(2):
                x, y = batch(sizes, B, step, tau=tau)
                net.sgd_step(x, y, 0.5, schedule, **({} if solver is None else {"solver": solver}))
            params[type(schedule).__name__] = net.parameters()
    want, got = params["BPTT"], params["TimeScan"]
    for l in want:
        for name in want[l]:
            assert relative(got[l][name], want[l][name]) < 1e-10, (l, name)


@pytest.mark.filterwarnings("ignore:divide by zero encountered in reciprocal:RuntimeWarning")  # the stand-in probes
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("tau", [1, 7])
def test_quasi_newton_on_the_standin_matches_the_reference(backend, cell, tau):
    """The CuPy backend's code: the forward within 1e-10 of the float64 reference, doubling (``auto`` on a GPU),
    its buffers what ``memory_needed`` says, and its diagonals those of the host's code at the same states."""
    sizes, B = [3, 5, 4, 2], 2
    x, _ = batch(sizes, B, tau=tau)
    solver = TimeNewton(quasi=True)
    with gated(cell, sizes, backend) as net:
        params = net.parameters()
        lists = ([params[l]["w"].get() for l in range(2, 5)], [params[l]["u"].get() for l in (2, 3)],
                 [params[l]["b"].get() for l in range(2, 5)],
                 [params[l]["b_hn"].get() for l in (2, 3)] if cell == "gru" else None)
        got = net.feedforward(x, solver=solver).get()
        held = sum(a.nbytes for part in net.plan(tau, B).cache["gated-newton", True] for a in part)
        net.feedforward(x)
        cell_2 = net.plan(tau, B).recursion[2]
        D = backend.xp.full((tau - 1, B, S[cell] * 5), np.nan)
        cell_2.diagonals(D)
        on_device = D.get()
    np.testing.assert_allclose(got, gated_reference.feedforward(cell, *lists, x, output="every"), rtol=1e-10,
                               atol=1e-12)
    assert solver.stats["converged"] and solver.stats["scan"] == "doubling"
    assert held == solver.stats["memory_bytes"] == quasi_bytes(sizes, tau, B, 8, cell)
    with gated(cell, sizes) as net:
        net.set_parameters(lists[0], lists[1], lists[2], *([lists[3]] if cell == "gru" else []))
        net.feedforward(x)
        np.testing.assert_allclose(on_device, diagonals(net, tau, B, 2), rtol=1e-13, atol=1e-15)
