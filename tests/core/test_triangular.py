"""The triangular solvers of ``core.triangular`` on their own: each against the system it solves, written
out densely and solved by ``numpy.linalg.solve`` (or by the plain sequential loop) in float64, at ragged
sizes; the rounds each takes; the counters against values counted by hand; the memory check's refusal."""

import numpy as np
import pytest

from leapfrog_gpu.core import triangular

RNG = np.random.default_rng(0)


def chain_reference(A, g):
    """x_{n-1} = g, x_i = A_i x_{i+1}: the sequential loop. A (n-1, B, N, N), g (B, N, 1)."""
    x = [g]
    for Ai in A[::-1]:
        x.insert(0, Ai @ x[0])
    return np.stack(x)


def scan_reference(A, c, diagonal):
    """x_t = c_t + A_t x_{t+1}, x_tau = 0, per sample: (I - shift(A)) x = c written densely and solved."""
    tau, B, n = c.shape[:3]
    x = np.empty((tau, B, n))
    for b in range(B):
        system = np.eye(tau * n)
        for t in range(tau - 1):
            block = np.diag(A[t, b]) if diagonal else A[t, b]
            system[t * n:(t + 1) * n, (t + 1) * n:(t + 2) * n] = -block
        x[:, b] = np.linalg.solve(system, c[:, b].reshape(tau * n)).reshape(tau, n)
    return x


def nilpotent(B, widths, depth):
    """A (B, M, M) matrix of random blocks between nodes of ``widths``, node i at level i mod depth, a block
    (i, j) only from a deeper level j: nilpotent of index <= depth."""
    level = [i % depth for i in range(len(widths))]
    rows = np.cumsum([0] + widths)
    M = rows[-1]
    N = np.zeros((B, M, M))
    for i in range(len(widths)):
        for j in range(len(widths)):
            if level[j] == level[i] + 1 or (level[j] > level[i] + 1 and RNG.random() < 0.5):
                N[:, rows[i]:rows[i + 1], rows[j]:rows[j + 1]] = RNG.standard_normal(
                    (B, widths[i], widths[j])) / 2
    return N


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 9])
def test_recursive_doubling_over_a_chain_solves_it_in_ceil_log2_rounds(n):
    B, N = 3, 4
    A, g = RNG.standard_normal((n - 1, B, N, N)) / 2, RNG.standard_normal((B, N, 1))
    x = np.zeros((n, B, N, 1))
    x[-1] = g
    P = (A.copy(), np.zeros_like(A))
    rounds, vectors = 0, [n - 1]
    for s, lo, hi, A_s, A_next in triangular.chain_rounds(n, *P):
        triangular.chain_round(np, A_s, A_next, x, s, lo, hi)
        vectors += range(lo, hi)
        rounds += 1
    assert rounds == triangular.ceil_log2(n) and sorted(vectors) == list(range(n))  # each position once
    np.testing.assert_allclose(x, chain_reference(A, g), rtol=1e-12, atol=1e-12)


def test_the_chain_counters_by_hand():
    """n = 5: strides 1 (lo 3, hi 4), 2 (1, 3), 4 (0, 1): 4 products of blocks, 4 of a block and a vector."""
    B, N = 2, 3
    flops = 4 * B * 2 * N ** 3 + 4 * B * 2 * N ** 2
    elements = 4 * B * 3 * N ** 2 + 4 * B * (N ** 2 + 2 * N)
    assert triangular.chain_work(5, B, N) == (3, flops, elements)
    assert triangular.chain_work(1, B, N) == (0, 0, 0)


@pytest.mark.parametrize("scan", ["doubling", "reduction"])
@pytest.mark.parametrize("diagonal", [False, True])
@pytest.mark.parametrize("tau", [1, 2, 3, 5, 8, 13, 16, 17])
def test_the_suffix_scan_solves_the_bidiagonal_system(scan, diagonal, tau):
    B, n = 2, 3
    A = RNG.standard_normal((tau, B, n) if diagonal else (tau, B, n, n)) / 2
    c = RNG.standard_normal((tau, B, n))
    want = scan_reference(A, c, diagonal)
    vectors = c.copy() if diagonal else c[..., None].copy()
    product = np.multiply if diagonal else np.matmul
    rounds = triangular.suffix_scan(np, product, A.copy(), np.zeros_like(A), vectors, np.zeros_like(vectors), scan)
    assert rounds == triangular.scan_rounds(scan, tau) == len(triangular.round_sizes(scan, tau))
    np.testing.assert_allclose(vectors.reshape(want.shape), want, rtol=1e-12, atol=1e-12)


def test_the_scan_rounds_and_counters_by_hand():
    """tau = 5. Doubling: strides 1, 2, 4 with 4, 3, 1 products A x + c and 3, 1, 0 products A A. Reduction up,
    strides 1, 2, 4: pairs (0,1) (2,3); (0,2); (0,4), A A kept at 0 and 2, then 0; down, strides 2 then 1:
    x_2 from x_4; x_1 from x_2 and x_3 from x_4."""
    assert triangular.round_sizes("doubling", 5) == [(1, 4, 3), (2, 3, 1), (4, 1, 0)]
    assert triangular.round_sizes("reduction", 5) == [(1, 2, 2), (2, 1, 1), (4, 1, 0), (2, 1, 0), (1, 2, 0)]
    assert [kind for kind, *_ in triangular.suffix_rounds("reduction", 5)] == ["reduce"] * 3 + ["substitute"] * 2
    assert (triangular.scan_rounds("doubling", 5), triangular.scan_rounds("reduction", 5)) == (3, 5)
    assert triangular.scan_rounds("reduction", 1) == 0 == len(triangular.round_sizes("reduction", 1))
    # m = 2 products (4, 4) @ (4, 1) and adds, 1 product (4, 4) @ (4, 4), at B = 3
    assert triangular.scan_round_work(2, 1, 3, 4) == (2 * 2 * 3 * 16 + 2 * 3 * 4 + 3 * 2 * 64,
                                                      6 * (16 + 8) + 6 * 4 + 3 * 3 * 16)
    assert triangular.scan_round_work(2, 1, 3, 4, copy=True)[1] == 6 * (16 + 8) + 6 * 4 + 3 * 4 * 16
    assert triangular.scan_round_work(2, 1, 3, 4, diagonal=True) == (2 * 2 * 3 * 4 + 3 * 4, 4 * 6 * 4 + 3 * 3 * 4)


def test_resolving_and_checking_the_scan():
    assert triangular.resolve_scan("auto", "numpy") == "reduction"
    assert triangular.resolve_scan("auto", "numpy", diagonal=True) == "doubling"
    assert triangular.resolve_scan("auto", "cupy") == "doubling"
    assert triangular.resolve_scan("reduction", "cupy") == "reduction"
    with pytest.raises(ValueError, match="scan must be one of 'auto', 'doubling', 'reduction'; got 'fast'"):
        triangular.check_scan("fast")
    with pytest.raises(TypeError, match="scan must be one of"):
        triangular.check_scan(None)


@pytest.mark.parametrize("depth, widths", [(1, [2, 3]), (2, [3, 1, 4]), (3, [2, 2, 3, 1, 2]),
                                           (5, [1, 3, 2, 4, 2, 3, 1])])
def test_the_neumann_doubling_and_block_jacobi_solve_x_equals_e_plus_N_x(depth, widths):
    B = 2
    N = nilpotent(B, widths, depth)
    M = N.shape[1]
    e = RNG.standard_normal((B, M, 1))
    want = np.linalg.solve(np.eye(M) - N, e)
    X = e.copy()
    rounds = triangular.neumann_solve(np, N.copy(), np.zeros_like(N), X, np.zeros_like(X), depth)
    assert rounds == triangular.ceil_log2(depth)
    np.testing.assert_allclose(X, want, rtol=1e-12, atol=1e-12)
    X, sweeps, change = triangular.jacobi(np, N, np.zeros_like(e), np.zeros_like(e), depth, e=e)
    assert (sweeps, change) == (depth, None)
    np.testing.assert_allclose(X, want, rtol=1e-12, atol=1e-12)
    if depth > 1:  # one sweep short: the nodes depth - 1 edges from the end are still wrong
        short, _, _ = triangular.jacobi(np, N, np.zeros_like(e), np.zeros_like(e), depth - 1, e=e)
        assert np.abs(short - want).max() > 1e-6


@pytest.mark.parametrize("n", [2, 3, 6])
def test_jacobi_on_the_chain_is_exact_after_n_minus_1_sweeps_and_a_warm_start_stops_at_once(n):
    B, N = 3, 2
    A, g = RNG.standard_normal((n - 1, B, N, N)), RNG.standard_normal((B, N, 1))
    want = chain_reference(A, g)
    X, X_next = np.zeros((n, B, N, 1)), np.zeros((n, B, N, 1))
    X[-1] = X_next[-1] = g
    last, sweeps, _ = triangular.jacobi(np, A, X, X_next, n - 1)
    assert sweeps == n - 1
    np.testing.assert_allclose(last, want, rtol=1e-12, atol=1e-12)
    scratch = (np.zeros((n, B, N, 1)), np.zeros((3, n)))
    warm, other = want.copy(), want.copy()
    last, sweeps, change = triangular.jacobi(np, A, warm, other, n - 1, scratch=scratch, tol=1e-9)
    assert sweeps == 1 and change <= 1e-12 and last is other


def test_relative_change_by_hand():
    new, old = np.zeros((3, 1, 2, 1)), np.zeros((3, 1, 2, 1))
    scratch = (np.zeros((3, 1, 2, 1)), np.zeros((3, 3)))
    assert triangular.relative_change(np, new, old, *scratch) == 0.0  # 0/0 counts as 0
    new[0] = [[3.0], [4.0]]  # ||new_0|| = 5
    old[0] = [[3.0], [1.0]]  # ||new_0 - old_0|| = 3
    new[1] = old[1] = 7.0
    assert triangular.relative_change(np, new, old, *scratch) == pytest.approx(0.6)
    old[2] = 1.0  # new_2 = 0: a change over nothing
    assert triangular.relative_change(np, new, old, *scratch) == np.inf
    old[2], new[2] = np.nan, np.nan  # NaN - NaN is NaN, which no comparison counts as a change
    assert triangular.relative_change(np, new, old, *scratch) == np.inf
    old[2] = new[2] = [[np.inf], [1.0]]
    assert triangular.relative_change(np, new, old, *scratch) == np.inf
    new[2], old[2] = [[3e-170], [4e-170]], 0.0  # a change of 1, in numbers whose squares are 0 in float64
    assert triangular.relative_change(np, new, old, *scratch) == pytest.approx(1.0)  # not block 0's 0.6
    new[0], old[0] = [[3e300], [4e300]], [[3e300], [1e300]]  # block 0 as before, in numbers whose squares are inf
    assert triangular.relative_change(np, new, old, *scratch) == pytest.approx(1.0)


def test_the_neumann_and_jacobi_counters_by_hand():
    B, M = 2, 5
    # depth 5: 3 rounds of X + P X on one vector, P squared in the first 2
    assert triangular.neumann_work(5, B, M) == (3, 3 * B * (2 * M * M + M) + 2 * B * 2 * M ** 3,
                                                3 * B * (M * M + 3 * M) + 2 * B * 3 * M * M)
    # two operands, of M columns and of 1, and 3 matrices squared, at depth 2: 1 round, no square
    assert triangular.neumann_work(2, B, M, columns=(M, 1), squares=3) == (
        1, B * (2 * M ** 3 + M * M) + B * (2 * M * M + M), B * 4 * M * M + B * (M * M + 3 * M))
    assert triangular.neumann_work(1, B, M) == (0, 0, 0)
    assert triangular.jacobi_work(4, B, M) == (4 * B * (2 * M * M + M), 4 * B * (M * M + 3 * M))
    # the chain: 3 products of (M, M) blocks by vectors a sweep; the change over 7 elements, 9 passes over each
    assert triangular.jacobi_work(2, B, M, chain=3, change=7) == (2 * (3 * B * 2 * M * M + 63),
                                                                  2 * (3 * B * (M * M + 2 * M) + 63))


def test_the_memory_check_says_the_need_the_limit_and_what_to_use_instead():
    assert triangular.check_memory("Solver", 1000, 1000, "n=3", "Sequential()") == 1000
    with pytest.raises(ValueError, match=r"^Solver needs 3145728 bytes \(3\.0 MiB\) for n=3, over memory_limit=1000 "
                                         r"bytes; pass a larger memory_limit or use Sequential\(\)$"):
        triangular.check_memory("Solver", 3 * 2 ** 20, 1000, "n=3", "Sequential()")
    with pytest.raises(ValueError, match=r"over memory_limit=2048 bytes \(2\.0 KiB\); pass a larger memory_limit, "
                                         r"quasi=True, or use the sequential forward$"):
        triangular.check_memory("Newton", 5 * 2 ** 30, 2048, "n=3", "the sequential forward", also=("quasi=True",))
    assert triangular.in_words(5 * 2 ** 30) == f"{5 * 2 ** 30} bytes (5.0 GiB)"
