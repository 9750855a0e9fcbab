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
//   RANK_CHUNK          samples of the batch the rank-B update stages at a time (in float32; half as many in
//                       float64)
//   RANK_STAGES         chunks it holds in shared memory, all but one in flight

#include "pipeline.h"
#include "vector.h"

#ifndef OUTER_BX
#define OUTER_BX 32
#endif
#ifndef OUTER_BY
#define OUTER_BY 8
#endif
#ifndef RANK_CHUNK
#define RANK_CHUNK 8
#endif
#ifndef RANK_STAGES
#define RANK_STAGES 2
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

// (7) for B > 1: nabla_w[i, j] = sum_s delta[i, s] * a[j, s], a rank-B update, register-tiled.
// Launch: block 128 threads, grid (ceil(m / 64), ceil(n / 64)) (rank_update_launch): a block per 64 x 64
// tile of nabla_w. Thread t = 16 ty + 2 tx + h (ty, tx in 0..7, h in 0..1) holds the 8 x 8 sums (i0 + ty +
// 8r, j0 + tx + 8c) over the samples s = h, h + 2, ... (half h of the batch). The block walks the batch in
// chunks of C = RANK_CHUNK samples (half as many doubles), RANK_STAGES of them in shared memory: the copies
// of the next are in flight while it computes on one (pipeline.h; 16 bytes each where the rows are
// aligned, else element by element; zeros beyond every edge). A chunk's rows of delta and of a are stored
// as in memory, padded by 16 bytes so that the loads below hit 16 different banks (32-bit words; 8-byte
// ones in float64). For each of its samples a thread loads 8 of delta and 8 of a for 64 FMAs (a shared
// load for 4 FMAs), summing over s in order. Then the halves' sums meet (fold_half: one shuffle a sum) and
// each thread writes 32: rows i0 + ty + 8 (4h + r), r in 0..3, a warp's stores filling 32-byte sectors.
// Bytes: (n + m) * B reads (delta, a) + n*m writes (nabla_w); the blocks of a row re-read its slab of delta,
// ceil(m / 64) times in all (a: ceil(n / 64) times), from L2. rank_update_sgd reads w as well and writes it
// instead: (n + m) * B + n*m reads + n*m writes; its tile of w is copied into shared memory (a group of its
// own, committed after the first chunk's) while the block computes. rank_update_bias writes (6) as well (n
// more writes): the rows of each row of blocks are shared among its blocks' warps, each summed by row_sum as
// bias_sum sums it (vector.h), so bitwise what bias_sum writes, before the block's first wait.
template <typename T, bool SGD, bool BIAS>
__device__ void rank_update(T* out, T* nabla_b, const T* delta, const T* a, int n, int m, int batch, T scale) {
    constexpr int V = Vec<T>::width, E = 64, THREADS = 128, C = RANK_CHUNK * 4 / (int)sizeof(T);
    constexpr int ROW = C + 16 / (int)sizeof(T), PIECES = 2 * E * (C / V) / THREADS;  // elements a staged row
    constexpr int W_PIECES = E * E / V / THREADS, W_ROW = E + 16 / (int)sizeof(T);
    static_assert(C % V == 0 && C % 2 == 0 && 2 * E * (C / V) == PIECES * THREADS && E * E == W_PIECES * V * THREADS &&
                  RANK_STAGES >= 2, "a chunk is whole vectors, even; the copies divide among the threads");
    __shared__ __align__(16) T tiles[RANK_STAGES][2][E][ROW];  // [stage][delta, a][row][sample]
    __shared__ __align__(16) T w_tile[SGD ? E : 1][SGD ? W_ROW : 4];
    const int t = threadIdx.x, lane = t % 32, h = t & 1, tx = t / 2 % 8, ty = t / 16;
    const int i0 = blockIdx.y * E, j0 = blockIdx.x * E, chunks = (batch + C - 1) / C;
    const bool wide = batch % V == 0 && aligned16(delta) && aligned16(a);

    // Chunk number c of the batch into stage buffer buf: piece v is V samples of a row of delta or of a.
    auto copy_chunk = [&](int buf, int c) {
#pragma unroll
        for (int q = 0; q < PIECES; ++q) {
            const int v = t + q * THREADS, of_a = v / (E * C / V), row = v / (C / V) % E, s = v % (C / V) * V;
            const int rows = of_a ? m - j0 : n - i0, sample = c * C + s;
            const T* source = (of_a ? a + (long long)(j0 + row) * batch : delta + (long long)(i0 + row) * batch) +
                              sample;
            const int left = row < rows ? batch - sample : 0;  // samples of the piece inside the batch
            T* to = &tiles[buf][of_a][row][s];
            if (wide) {
                copy_async<V>(to, left > 0 ? source : delta, left <= 0 ? 0 : left < V ? left : V);
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    copy_async<1>(to + e, e < left ? source + e : delta, e < left ? 1 : 0);
                }
            }
        }
    };
    copy_chunk(0, 0);
    commit_copies();
    if (SGD) {  // the tile of w the update reads, in flight while the block computes
        const T* w = out;
        const bool wide_w = m % V == 0 && aligned16(w);
#pragma unroll
        for (int q = 0; q < W_PIECES; ++q) {
            const int v = t + q * THREADS, row = v / (E / V), col = v % (E / V) * V;
            const long long start = (long long)(i0 + row) * m + j0 + col;
            const int left = i0 + row < n ? m - (j0 + col) : 0;
            if (wide_w) {
                copy_async<V>(&w_tile[row][col], left > 0 ? w + start : w, left <= 0 ? 0 : left < V ? left : V);
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    copy_async<1>(&w_tile[row][col + e], e < left ? w + start + e : w, e < left ? 1 : 0);
                }
            }
        }
        commit_copies();
    }
    if (BIAS) {  // rows p, p + 4 gridDim.x, ... of this row of blocks, p = 4 blockIdx.x + warp
        for (int row = 4 * blockIdx.x + t / 32; row < E && i0 + row < n; row += 4 * gridDim.x) {
            const T sum = row_sum<4>(delta + (long long)(i0 + row) * batch, batch, lane);
            if (lane == 0) {
                nabla_b[i0 + row] = sum;
            }
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
    for (int c = 0; c < chunks; ++c) {
        if (SGD && c == 0) {
            wait_copies<RANK_STAGES - 1>();  // chunk 0 has landed; w's tile, committed after it, need not have
        } else {
            wait_copies<RANK_STAGES - 2>();  // chunk c has landed, for this thread's copies
        }
        __syncthreads();  // ... and for everyone's; every thread is past chunk c - 1
        const int ahead = c + RANK_STAGES - 1, buf = c % RANK_STAGES;
        if (ahead < chunks) {
            copy_chunk(ahead % RANK_STAGES, ahead);
        }
        commit_copies();
#pragma unroll
        for (int sample = h; sample < C; sample += 2) {
            T d[8], x[8];
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                d[r] = tiles[buf][0][ty + 8 * r][sample];
                x[r] = tiles[buf][1][tx + 8 * r][sample];
            }
#pragma unroll
            for (int r = 0; r < 8; ++r) {
#pragma unroll
                for (int col = 0; col < 8; ++col) {
                    acc[r][col] += d[r] * x[col];
                }
            }
        }
    }
    if (SGD) {
        wait_copies<0>();  // w's tile, for this thread's copies
        __syncthreads();   // ... and for everyone's
    }
    T part[64];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int col = 0; col < 8; ++col) {
            part[8 * r + col] = acc[r][col];
        }
    }
    const int first = fold_half<32>(part, lane, 1) / 8;  // the halves' sums meet: rows 4h.. of the 8 kept
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int row = ty + 8 * (first + r), i = i0 + row;
        if (i < n) {
#pragma unroll
            for (int col = 0; col < 8; ++col) {
                const int j = j0 + tx + 8 * col;
                if (j < m) {
                    const T g = part[8 * r + col];
                    if (SGD) {
                        out[(long long)i * m + j] = w_tile[row][tx + 8 * col] - scale * g;
                    } else {
                        out[(long long)i * m + j] = g;
                    }
                }
            }
        }
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
