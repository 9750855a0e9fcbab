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
// leapfrog_gpu/backends/launch.py (rank_update_launch, which picks the rank-B update's path):
//   OUTER_BX, OUTER_BY  block shape of the B = 1 outer product
//   RANK_PARTS          defined: the rank-B update in rows (rank_rows, B up to 64, 32 in float64), RANK_PARTS
//                       threads for a column's samples; else in tiles (rank_tiles, any B)
//   RANK_CHUNK          samples of the batch rank_tiles stages at a time (in float32; half as many in float64)
//   RANK_STAGES         chunks rank_tiles holds in shared memory, all but one in flight

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
// Launch: block (OUTER_BX, OUTER_BY), grid (ceil(m / OUTER_BX), Y, Z) (outer_launch; Y Z >= ceil(n / OUTER_BY),
// Y <= 65535: launch.rows_grid), row of blocks blockIdx.y + Y blockIdx.z; one thread per element, consecutive
// threads along j so that the store is coalesced.
// Bytes: n + m reads (delta, a) + n*m writes (nabla_w). The fused outer_sgd reads w as well and writes
// it instead: n + m + n*m reads + n*m writes. outer_bias writes (6) as well, nabla_b = delta (the
// threads of column 0): n more writes.
template <typename T, bool SGD, bool BIAS>
__device__ void outer(T* out, T* nabla_b, const T* delta, const T* a, int n, int m, T scale) {
    const int by = blockIdx.y + gridDim.y * blockIdx.z;
    if (by >= (n + OUTER_BY - 1) / OUTER_BY) {
        return;  // past the last row of blocks (in the last z): nothing to do
    }
    const int j = blockIdx.x * OUTER_BX + threadIdx.x;
    const int i = by * OUTER_BY + threadIdx.y;
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

// (7) for B > 1 in tiles: nabla_w[i, j] = sum_s delta[i, s] * a[j, s], a rank-B update, register-tiled; the
// path of any B (rank_rows is the one of B up to 64).
// Launch: block 128 threads, grid (ceil(m / 64), Y, Z) (rank_update_launch; Y Z >= ceil(n / 64), Y <= 65535:
// launch.rows_grid): a block per 64 x 64 tile of nabla_w, row of tiles blockIdx.y + Y blockIdx.z. Thread t = 16
// ty + 2 tx + h (ty, tx in 0..7, h in 0..1) holds the 8 x 8 sums (i0 + ty + 8r, j0 + tx + 8c) over the samples s = h,
// h + 2, ... (half h of the batch). The block walks the batch in chunks of C = RANK_CHUNK samples (half as many
// doubles), RANK_STAGES of them in shared memory: the copies of the next are in flight while it computes on one
// (pipeline.h; 16 bytes each where the rows are aligned, else element by element; zeros beyond every edge). A chunk's
// rows of delta and of a are stored as in memory, padded by 16 bytes so that the loads below hit 16 different banks
// (32-bit words; 8-byte ones in float64). For each of its samples a thread loads 8 of delta and 8 of a for 64 FMAs (a
// shared load for 4 FMAs), summing over s in order. Then the halves' sums meet (fold_half: one shuffle a sum) and
// each thread writes 32: rows i0 + ty + 8 (4h + r), r in 0..3, a warp's stores filling 32-byte sectors.
// Bytes: (n + m) * B reads (delta, a) + n*m writes (nabla_w); the blocks of a row re-read its slab of delta,
// ceil(m / 64) times in all (a: ceil(n / 64) times), from L2. rank_update_sgd reads w as well and writes it
// instead: (n + m) * B + n*m reads + n*m writes; its tile of w is copied into shared memory (a group of its
// own, committed after the first chunk's) while the block computes. rank_update_bias writes (6) as well (n
// more writes): the rows of each row of blocks are shared among its blocks' warps, each summed by row_sum as
// bias_sum sums it (vector.h), so bitwise what bias_sum writes, before the block's first wait.
template <typename T, bool SGD, bool BIAS>
__device__ void rank_tiles(T* out, T* nabla_b, const T* delta, const T* a, int n, int m, int batch, T scale) {
    constexpr int V = Vec<T>::width, E = 64, THREADS = 128, C = RANK_CHUNK * 4 / (int)sizeof(T);
    constexpr int ROW = C + 16 / (int)sizeof(T), PIECES = 2 * E * (C / V) / THREADS;  // elements a staged row
    constexpr int W_PIECES = E * E / V / THREADS, W_ROW = E + 16 / (int)sizeof(T);
    static_assert(C % V == 0 && C % 2 == 0 && 2 * E * (C / V) == PIECES * THREADS && E * E == W_PIECES * V * THREADS &&
                  RANK_STAGES >= 2, "a chunk is whole vectors, even; the copies divide among the threads");
    __shared__ __align__(16) T tiles[RANK_STAGES][2][E][ROW];  // [stage][delta, a][row][sample]
    __shared__ __align__(16) T w_tile[SGD ? E : 1][SGD ? W_ROW : 4];
    const int by = blockIdx.y + gridDim.y * blockIdx.z;
    if (by >= (n + E - 1) / E) {
        return;  // past the last row of tiles (in the last z): nothing to do
    }
    const int t = threadIdx.x, lane = t % 32, h = t & 1, tx = t / 2 % 8, ty = t / 16;
    const int i0 = by * E, j0 = blockIdx.x * E, chunks = (batch + C - 1) / C;
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
#pragma unroll
    for (int c = 0; c < RANK_STAGES - 1; ++c) {  // chunks 0 .. RANK_STAGES - 2 in flight, a group each (empty past
        if (c < chunks) {                        // the last chunk), as the loop's waits count them
            copy_chunk(c, c);
        }
        commit_copies();
    }
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

#if defined(RANK_PARTS)
// (7) for B up to 64 (32 in float64) in rows: the same sums, each row of nabla_w stored as soon as it is summed,
// while the block sums the next ones. Launch: block (H, 32 / H, 8), grid (ceil(m / C), P) (rank_update_launch:
// H = RANK_PARTS = 1, 2 or 4 threads share a column's samples, C = 256 / H columns a block, the rows in octets
// dealt out to the P rows of blocks). Thread (h, x, g) holds in registers S = 16 samples (8 doubles) of 8 rows of
// a: a[j0 + e, h S + s], j0 = its block's first column + 8 x, e in 0..7, s in 0..S-1 (zeros beyond the batch or
// the last row), loaded once. The block walks its octets of rows, u = u0, u0 + 1, ...: warp g takes row i = 8u +
// g, loads its S samples of delta from shared memory (a 16-byte load serves 4 of them to every thread of the
// warp at once; the H parts of a row 16 bytes apart, so that they fall in different banks), sums delta[i, s] * a[j, s] for its 8 columns, s in order, and the H threads of a column's
// samples meet their sums by halves (fold_half: thread h keeps 8 / H columns); each stores them (16 bytes at a
// time where the rows are aligned) and goes on to its next row. An octet's rows of delta are copied into shared
// memory STAGES - 1 octets ahead (3; 1 in float64; element by element, a warp's copies 128 contiguous bytes),
// and rank_update_sgd's rows of w (the block's C columns) SLOTS - 1 ahead (7 at H = 2) into a ring, in the same
// groups, a group an octet (pipeline.h; 16 bytes each where the rows are aligned, else element by element; zeros
// beyond every edge): so an octet's stores, the copies and the next octets' FMAs overlap.
// P <= 65535 (CUDA's limit on grid y): past that many rows of blocks, more octets a block.
// Bytes: as rank_tiles'; each block re-reads its octets of delta (ceil(m / C) times in all) and its C columns
// of a (each of its 8 warps, from L1 after the first), from L2.
template <typename T, bool SGD, bool BIAS>
__device__ void rank_rows(T* out, T* nabla_b, const T* delta, const T* a, int n, int m, int batch, T scale) {
    constexpr int V = Vec<T>::width, COLS = 8, S = 64 / (int)sizeof(T), H = RANK_PARTS, C = COLS * 32 / H;
    constexpr int KEPT = COLS / H, STAGES = 16 / (int)sizeof(T), PART = S + 16 / (int)sizeof(T);
    constexpr int SLOTS = SGD ? 32768 / (int)sizeof(T) / (8 * C) : STAGES;
    static_assert((H == 1 || H == 2 || H == 4) && S % V == 0 && STAGES >= 2 && SLOTS >= STAGES,
                  "1, 2 or 4 threads a column; samples of whole vectors; an octet in flight; w's ring at least as "
                  "deep as delta's");
    __shared__ __align__(16) T d_stage[STAGES][8][H * PART];  // [stage][row][part h's S samples, padded]
    __shared__ __align__(16) T w_ring[SGD ? SLOTS : 1][SGD ? 8 : 1][SGD ? C : 4];  // [slot][row][column]
    const int h = threadIdx.x, lane = h + H * threadIdx.y, g = threadIdx.z, t = lane + 32 * g;
    const int c0 = blockIdx.x * C, j0 = c0 + threadIdx.y * COLS;
    const int octets = (n + 7) / 8, per = (octets + gridDim.y - 1) / gridDim.y;
    const int u0 = blockIdx.y * per, u1 = u0 + per < octets ? u0 + per : octets;
    const bool wide = batch % V == 0 && aligned16(a);

    // Group k: octet u0 + k's rows of delta, and octet u0 + k + SLOTS - STAGES's rows of w, those of them the
    // block has, each into the stage or slot of its octet (octets count from u0; each ring takes them modulo its
    // size). The groups of k < 0 hold rows of w only.
    auto copy_group = [&](int k) {
        const int u = u0 + k;
        if (k >= 0 && u < u1) {  // element by element: 8 H S of them, 256 at H = 2, one a thread
#pragma unroll
            for (int q = 0; q < (8 * H * S + 255) / 256; ++q) {
                const int v = t + 256 * q;
                if (v < 8 * H * S) {
                    const int r = v / (H * S), s = v % (H * S), i = 8 * u + r;
                    const bool inside = i < n && s < batch;
                    copy_async<1>(&d_stage[k % STAGES][r][s / S * PART + s % S],
                                  inside ? delta + (long long)i * batch + s : delta, inside ? 1 : 0);
                }
            }
        }
        const int kw = k + SLOTS - STAGES, uw = u0 + kw;
        if (SGD && uw < u1) {  // pieces of V columns of the octet's rows of w: 8 C / V of them
            const T* w = out;
            const bool wide_w = m % V == 0 && aligned16(w);
#pragma unroll
            for (int q = 0; q < (8 * C / V + 255) / 256; ++q) {
                const int v = t + 256 * q;
                if (v < 8 * C / V) {
                    const int r = v / (C / V), col = v % (C / V) * V, i = 8 * uw + r;
                    const int left = i < n ? m - (c0 + col) : 0;  // columns of the piece inside w's row
                    const long long start = (long long)(i < n ? i : 0) * m + c0 + col;
                    T* to = &w_ring[kw % SLOTS][r][col];
                    copy_piece<V>(to, w, start, left, wide_w);
                }
            }
        }
    };
    if (SGD) {  // w's first SLOTS - STAGES octets, in a group before group 0
#pragma unroll 1
        for (int kw = 0; kw < SLOTS - STAGES; ++kw) {
            copy_group(kw - (SLOTS - STAGES));
        }
        commit_copies();
    }
#pragma unroll 1
    for (int k = 0; k < STAGES - 1; ++k) {
        copy_group(k);
        commit_copies();
    }
    T x[COLS][S / V][V];
#pragma unroll
    for (int e = 0; e < COLS; ++e) {
        const int j = j0 + e;
        const T* a_j = a + (long long)(j < m ? j : 0) * batch;
#pragma unroll
        for (int q = 0; q < S / V; ++q) {
            const int s = h * S + q * V;
            load_piece(x[e][q], a_j, s, batch, j < m, wide);
        }
    }
    if (BIAS) {  // while the loads of a are in flight: rows 8 u0 + p, p + 8 gridDim.x, ... of this row of blocks,
                 // p = 8 blockIdx.x + warp, as many trips for every warp (one past the end sums the last row again and
                 // stores nothing)
        const int end = 8 * u1 < n ? 8 * u1 : n;
#pragma unroll 1
        for (int first = 8 * u0 + 8 * blockIdx.x; first < end; first += 8 * gridDim.x) {
            const int row = first + g < end ? first + g : end - 1;
            const T sum = row_sum<4>(delta + (long long)row * batch, batch, lane);
            if (lane == 0 && first + g < end) {
                nabla_b[row] = sum;
            }
        }
    }
    const bool wide_out = m % V == 0 && aligned16(out);
    for (int u = u0; u < u1; ++u) {
        const int k = u - u0;
        wait_copies<STAGES - 2>();  // group k has landed (octet u's delta; its w, in an older group), for this
        __syncthreads();            // thread's copies, and for everyone's; every thread is past octet u - 1
        copy_group(k + STAGES - 1);  // into octet u - 1's stage and slot
        commit_copies();
        T acc[COLS];
#pragma unroll
        for (int e = 0; e < COLS; ++e) {
            acc[e] = T(0);
        }
#pragma unroll
        for (int q = 0; q < S / V; ++q) {
            T d[V];
            load16_plain(d, &d_stage[k % STAGES][g][h * PART + q * V]);
#pragma unroll
            for (int k2 = 0; k2 < V; ++k2) {
#pragma unroll
                for (int e = 0; e < COLS; ++e) {
                    acc[e] += d[k2] * x[e][q][k2];
                }
            }
        }
        int first = 0;  // the H threads of a column's samples meet: thread h keeps columns first.. of its 8
        if constexpr (H >= 2) {
            first += fold_half<COLS / 2>(acc, lane, 1);
        }
        if constexpr (H >= 4) {
            first += fold_half<COLS / 4>(acc, lane, 2);
        }
        const int i = 8 * u + g, j = j0 + first;
        if (i < n) {
            T value[KEPT];
#pragma unroll
            for (int e = 0; e < KEPT; ++e) {
                if constexpr (SGD) {
                    value[e] = w_ring[k % SLOTS][g][j - c0 + e] - scale * acc[e];
                } else {
                    value[e] = acc[e];
                }
            }
            T* row = out + (long long)i * m + j;
            if (wide_out && KEPT % V == 0 && j + KEPT <= m) {
#pragma unroll
                for (int e = 0; e < KEPT; e += V) {
                    T piece[V];
#pragma unroll
                    for (int k2 = 0; k2 < V; ++k2) {
                        piece[k2] = value[e + k2];
                    }
                    store16(row + e, piece);
                }
            } else {
#pragma unroll
                for (int e = 0; e < KEPT; ++e) {
                    if (j + e < m) {
                        row[e] = value[e];
                    }
                }
            }
        }
    }
}

#endif

// The path rank_update_launch picked: in rows (-DRANK_PARTS) or in tiles.
template <typename T, bool SGD, bool BIAS>
__device__ void rank_update(T* out, T* nabla_b, const T* delta, const T* a, int n, int m, int batch, T scale) {
#if defined(RANK_PARTS)
    rank_rows<T, SGD, BIAS>(out, nabla_b, delta, a, n, m, batch, scale);
#else
    rank_tiles<T, SGD, BIAS>(out, nabla_b, delta, a, n, m, batch, scale);
#endif
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
