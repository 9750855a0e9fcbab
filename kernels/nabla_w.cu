// Weight gradient, equation (7): nabla_w^l = delta^l (a^{l-1})^T, summed over the minibatch.
// delta is (n, B), a is (m, B), nabla_w is (n, m); all row-major.
//
// The *_sgd variants fuse the SGD update: w -= scale * (delta a^T), so that nabla_w never goes to
// memory. Each element's product or sum is formed exactly as in the plain kernel and rounded to T
// before the update, so the result is bitwise that of the plain kernel followed by sgd_update. They
// take the step's controls as sgd_update does (kernels/elementwise.cu): scale = controls[0], and
// nothing is written when controls[1] is not 0.
//
// Bytes are given in elements: times 4 (float) or 8 (double); profiling/kernel_traffic.py holds the
// same counts for kernels/README.md. Tuning values come in as -D options from
// leapfrog_gpu/backends/launch.py:
//   OUTER_BX, OUTER_BY  block shape of the B = 1 outer product
//   RANK_SIDE           the rank-B update's block is RANK_SIDE x RANK_SIDE threads, 8 x 8 outputs each
//   RANK_CHUNK          samples of the batch it stages at a time (in float32; half as many in float64)

#include "vector.h"

#ifndef OUTER_BX
#define OUTER_BX 32
#endif
#ifndef OUTER_BY
#define OUTER_BY 8
#endif
#ifndef RANK_SIDE
#define RANK_SIDE 8
#endif
#ifndef RANK_CHUNK
#define RANK_CHUNK 16
#endif

// (7) for B = 1: nabla_w[i, j] = delta[i] * a[j], an outer product.
// Launch: block (OUTER_BX, OUTER_BY), grid (ceil(m / OUTER_BX), ceil(n / OUTER_BY)) (outer_launch); one
// thread per element, consecutive threads along j so that the store is coalesced.
// Bytes: n + m reads (delta, a) + n*m writes (nabla_w). The fused outer_sgd reads w as well and writes
// it instead: n + m + n*m reads + n*m writes. outer_bias writes (6) as well, nabla_b = delta (the
// threads of column 0): n more writes.
template <typename T, bool SGD, bool BIAS>
__device__ void outer(T* out, T* nabla_b, const T* delta, const T* a, int n, int m, T scale) {
    const int j = blockIdx.x * OUTER_BX + threadIdx.x;
    const int i = blockIdx.y * OUTER_BY + threadIdx.y;
    if (BIAS && j == 0 && i < n) {
        nabla_b[i] = T(0) + delta[i];  // (6) at B = 1, bitwise what bias_sum sums (0 + delta: -0 gives +0)
    }
    if (i < n && j < m) {
        const T g = delta[i] * a[j];
        if (SGD) {
            out[(long long)i * m + j] -= scale * g;
        } else {
            out[(long long)i * m + j] = g;
        }
    }
}

// (7) for B > 1: nabla_w[i, j] = sum_s delta[i, s] * a[j, s], a rank-B update, register-blocked.
// Launch: block (RANK_SIDE, RANK_SIDE), grid (ceil(m / E), ceil(n / E)), E = 8 * RANK_SIDE
// (rank_update_launch): thread (x, y) owns the 8 x 8 outputs (i0 + 8y + r, j0 + 8x + c). The block walks
// the batch in chunks of RANK_CHUNK (half that in float64): each thread loads its share of the chunk's
// (E, RANK_CHUNK) slabs of delta and of a (16-byte loads when the rows are aligned, else one by one;
// zero beyond every edge), all before it stores them to shared memory transposed; then for each s of
// the chunk it reads its 8 deltas and 8 a's (16-byte shared loads) for 64 FMAs, summing over s in order. Stores are 16 bytes where the
// rows of nabla_w are aligned. Bytes: (n + m) * B reads (delta, a) + n*m writes (nabla_w); the fused
// rank_update_sgd reads w as well and writes it instead: (n + m) * B + n*m reads + n*m writes. The
// blocks of a row re-read its slab of delta, ceil(m / E) times in all (a: ceil(n / E) times), from L2.
// rank_update_bias writes (6) as well, in the blocks of column 0 (n more writes), from the staged slabs
// of delta and in bias_sum's order, so bitwise what bias_sum writes: thread t takes row i0 + t and keeps
// 32 partial sums in shared memory, partial l of the samples s = l, l + 32, ... in order (bias_sum's lane
// l); after the stores of nabla_w they meet in warp_sum's tree (by halves: l += l + 16, then l + 8, ...).
template <typename T, bool SGD, bool BIAS>
__device__ void rank_update(T* out, T* nabla_b, const T* delta, const T* a, int n, int m, int batch, T scale) {
    constexpr int V = Vec<T>::width, E = 8 * RANK_SIDE, THREADS = RANK_SIDE * RANK_SIDE;
    constexpr int CHUNK = RANK_CHUNK * 4 / sizeof(T);  // samples a chunk: RANK_CHUNK floats, half as many doubles
    constexpr int SLAB = E * CHUNK / V;                // vectors in a slab
    constexpr int LOADS = 2 * SLAB / THREADS;          // vectors of the two slabs each thread stages
    static_assert(CHUNK % V == 0 && 2 * SLAB % THREADS == 0, "the slabs divide among the threads");
    __shared__ __align__(16) T delta_tile[CHUNK][E + V];
    __shared__ __align__(16) T a_tile[CHUNK][E + V];
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * RANK_SIDE + tx;
    const int i0 = blockIdx.y * E, j0 = blockIdx.x * E;
    const bool wide_in = batch % V == 0 && aligned16(delta) && aligned16(a);
    static_assert(!BIAS || THREADS == E, "rank_update_bias: a thread per row of the slab");
    __shared__ T bias_part[BIAS ? E : 1][BIAS ? 33 : 1];  // [row][l]: partial l of each row (padded)
    const bool bias = BIAS && blockIdx.x == 0;
    if (bias) {
        for (int l = 0; l < 32; ++l) {
            bias_part[t][l] = T(0);
        }
    }
    T acc[8][8];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            acc[r][c] = T(0);
        }
    }
    for (int s0 = 0; s0 < batch; s0 += CHUNK) {
        T staged[LOADS][V];
#pragma unroll
        for (int q = 0; q < LOADS; ++q) {
            const int v = (t + q * THREADS) % SLAB, of_a = (t + q * THREADS) / SLAB;
            const int row = v / (CHUNK / V), s = s0 + v % (CHUNK / V) * V;
            const int rows = of_a ? m - j0 : n - i0;
            const T* p = (of_a ? a + (long long)j0 * batch : delta + (long long)i0 * batch) +
                         (long long)(row < rows ? row : 0) * batch;
            if (wide_in && row < rows && s < batch) {
                load16(staged[q], p + s);
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    staged[q][e] = row < rows && s + e < batch ? p[s + e] : T(0);
                }
            }
        }
#pragma unroll
        for (int q = 0; q < LOADS; ++q) {
            const int v = (t + q * THREADS) % SLAB, of_a = (t + q * THREADS) / SLAB;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                (of_a ? a_tile : delta_tile)[v % (CHUNK / V) * V + e][v / (CHUNK / V)] = staged[q][e];
            }
        }
        __syncthreads();
        if (bias) {  // off the hot path (the blocks of one column), left rolled: 3 shared accesses a sample
#pragma unroll 1
            for (int s = 0; s < CHUNK; ++s) {
                bias_part[t][(s0 + s) % 32] += delta_tile[s][t];
            }
        }
        for (int s = 0; s < CHUNK; ++s) {
            T dv[8 / V][V], av[8 / V][V];
#pragma unroll
            for (int h = 0; h < 8 / V; ++h) {
                load16_plain(dv[h], &delta_tile[s][8 * ty + h * V]);
                load16_plain(av[h], &a_tile[s][8 * tx + h * V]);
            }
#pragma unroll
            for (int r = 0; r < 8; ++r) {
#pragma unroll
                for (int c = 0; c < 8; ++c) {
                    acc[r][c] += dv[r / V][r % V] * av[c / V][c % V];
                }
            }
        }
        __syncthreads();
    }
    const bool wide_out = m % V == 0 && aligned16(out);
#pragma unroll
    for (int r = 0; r < 8; ++r) {
        const int i = i0 + 8 * ty + r;
        if (i < n) {
#pragma unroll
            for (int h = 0; h < 8 / V; ++h) {
                const int j = j0 + 8 * tx + h * V;
                T* p = out + (long long)i * m + j;
                if (wide_out && j < m) {
                    T v[V];
                    if (SGD) {
                        load16_plain(v, p);
                    }
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        if (SGD) {
                            v[e] -= scale * acc[r][h * V + e];
                        } else {
                            v[e] = acc[r][h * V + e];
                        }
                    }
                    store16(p, v);
                } else {
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        if (j + e < m) {
                            if (SGD) {
                                p[e] -= scale * acc[r][h * V + e];
                            } else {
                                p[e] = acc[r][h * V + e];
                            }
                        }
                    }
                }
            }
        }
    }
    if (bias && i0 + t < n) {  // once a thread: left rolled
#pragma unroll 1
        for (int half = 16; half > 0; half /= 2) {
#pragma unroll 1
            for (int l = 0; l < half; ++l) {
                bias_part[t][l] += bias_part[t][l + half];
            }
        }
        nabla_b[i0 + t] = bias_part[t][0];
    }
}

#define LEAPFROG_NABLA_W(T, SUFFIX)                                                                   \
    extern "C" __global__ void outer_##SUFFIX(T* nabla_w, const T* delta, const T* a, int n, int m) {  \
        outer<T, false, false>(nabla_w, nullptr, delta, a, n, m, T(0));                               \
    }                                                                                                 \
    extern "C" __global__ void outer_bias_##SUFFIX(T* nabla_w, T* nabla_b, const T* delta, const T* a, \
                                                   int n, int m) {                                    \
        outer<T, false, true>(nabla_w, nabla_b, delta, a, n, m, T(0));                                \
    }                                                                                                 \
    extern "C" __global__ void outer_sgd_##SUFFIX(T* w, const T* delta, const T* a, int n, int m,    \
                                                  const T* controls) {                               \
        if (controls[1] == T(0)) outer<T, true, false>(w, nullptr, delta, a, n, m, controls[0]);      \
    }                                                                                                 \
    extern "C" __global__ void rank_update_##SUFFIX(T* nabla_w, const T* delta, const T* a, int n,   \
                                                    int m, int batch) {                              \
        rank_update<T, false, false>(nabla_w, nullptr, delta, a, n, m, batch, T(0));                  \
    }                                                                                                 \
    extern "C" __global__ void rank_update_bias_##SUFFIX(T* nabla_w, T* nabla_b, const T* delta,     \
                                                         const T* a, int n, int m, int batch) {      \
        rank_update<T, false, true>(nabla_w, nabla_b, delta, a, n, m, batch, T(0));                   \
    }                                                                                                 \
    extern "C" __global__ void rank_update_sgd_##SUFFIX(T* w, const T* delta, const T* a, int n,     \
                                                        int m, int batch, const T* controls) {       \
        if (controls[1] == T(0)) rank_update<T, true, false>(w, nullptr, delta, a, n, m, batch, controls[0]); \
    }

LEAPFROG_NABLA_W(float, f32)
LEAPFROG_NABLA_W(double, f64)
