// The chain of a pass on our own kernels: the forward layer (2)(3) and the backward layer (5), each one
// kernel, so that a whole step can be captured in a CUDA graph (CuPy refuses cuBLAS during capture).
// Arrays are row-major; an (n, B) array is a minibatch stored as columns, element (i, s) at i * B + s.
// Forward, layer l: w is (n, m) = (n_l, n_{l-1}), a_prev is (m, B); z, a, sp are (n, B); b is (n,).
// Backward, layer l: w is w^{l+1}, (m, n) = (n_{l+1}, n_l); delta_next is (m, B); delta, sp are (n, B).
//
// Every sum runs in an order fixed by the launch shape alone (no atomics), so a launch gives the same
// bits every time. Bytes are given in elements (times 4 or 8); profiling/kernel_traffic.py holds the
// same counts for kernels/README.md. Tuning values come in as -D options from
// leapfrog_gpu/backends/launch.py (chain_launch):
//   FWD_ROWS, FWD_UNROLL   forward GEMV block: a warp per row, FWD_ROWS rows; FWD_UNROLL 16-byte loads
//                          of a row per lane before their sum
//   BWD_THREADS, BWD_COLS  backward GEMV block: BWD_THREADS threads share BWD_COLS columns
//   BWD_UNROLL             rows of w each of them loads before their sum
//   GEMM_ROWS, GEMM_THREADS  B > 1 block: GEMM_THREADS threads (256) for GEMM_ROWS rows (8, 16 or 32) of the
//                          result
//   GEMM_COLUMNS           ... and GEMM_COLUMNS groups of 8 floats (4 doubles) of its columns (2 or 4)
//   GEMM_STAGES            stages of w a B > 1 block holds in shared memory (8 KB each), all but one in flight

#include "activation.h"
#include "pipeline.h"
#include "vector.h"

#ifndef FWD_ROWS
#define FWD_ROWS 4
#endif
#ifndef FWD_UNROLL
#define FWD_UNROLL 8
#endif
#ifndef BWD_THREADS
#define BWD_THREADS 256
#endif
#ifndef BWD_COLS
#define BWD_COLS 8
#endif
#ifndef BWD_UNROLL
#define BWD_UNROLL 8
#endif
#ifndef GEMM_ROWS
#define GEMM_ROWS 8
#endif
#ifndef GEMM_THREADS
#define GEMM_THREADS 256
#endif
#ifndef GEMM_COLUMNS
#define GEMM_COLUMNS 4
#endif
#ifndef GEMM_STAGES
#define GEMM_STAGES 4
#endif

// (2)(3) for B = 1, a GEMV: z = w a_prev + b, a = sigma(z), sp = sigma'(z).
// Launch: block (32, FWD_ROWS), grid ceil(n / FWD_ROWS): a warp per row. The row goes in chunks of
// 32 * FWD_UNROLL vectors: lane l loads vectors l, l + 32, ... of the chunk (of w and of a_prev; 16-byte
// loads when the rows are aligned, else the same elements one by one), all before it sums them in order;
// the lanes' sums then meet in warp_sum. A warp past the last row reads the last one and stores nothing.
// Bytes: n*m + m + n reads (w, a_prev, b) + 3n writes (z, a, sp).
template <typename T>
__device__ void forward_gemv(T* z, T* a, T* sp, const T* w, const T* a_prev, const T* b, int n, int m,
                             int act) {
    constexpr int V = Vec<T>::width;
    const int lane = threadIdx.x;
    const int i = blockIdx.x * FWD_ROWS + threadIdx.y;
    const T* w_i = w + (long long)(i < n ? i : n - 1) * m;
    const bool wide = m % V == 0 && aligned16(w) && aligned16(a_prev);
    T acc = T(0);
    for (int j0 = 0; j0 < m; j0 += 32 * V * FWD_UNROLL) {
        T wv[FWD_UNROLL][V], av[FWD_UNROLL][V];
#pragma unroll
        for (int u = 0; u < FWD_UNROLL; ++u) {
            const int j = j0 + (u * 32 + lane) * V;
            if (wide && j < m) {
                load16(wv[u], w_i + j);
                load16(av[u], a_prev + j);
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    wv[u][e] = j + e < m ? w_i[j + e] : T(0);
                    av[u][e] = j + e < m ? a_prev[j + e] : T(0);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < FWD_UNROLL; ++u) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                acc += wv[u][e] * av[u][e];
            }
        }
    }
    acc = warp_sum(acc);
    if (lane == 0 && i < n) {
        store_activation(z, a, sp, i, acc + b[i], act);
    }
}

// (5) for B = 1, a transposed GEMV: delta = (w^T delta_next) * sp.
// Launch: block BWD_THREADS, grid ceil(n / BWD_COLS). Thread t owns the V columns i0 + (t % A) * V, ...
// (A = BWD_COLS / V threads across) and the rows k = p, p + P, ... (p = t / A, P = BWD_THREADS / A);
// it loads BWD_UNROLL rows' vectors (16 bytes when the rows are aligned, else one by one) and their
// delta_next before it sums them in order. The P partial sums of a column meet in a fixed order: the
// 32 / A of a warp by halves in shuffles, then the warps' in order in shared memory.
// Bytes: m*n + m + n reads (w, delta_next, sp) + n writes (delta).
template <typename T>
__device__ void backward_gemv(T* delta, const T* w, const T* delta_next, const T* sp, int n, int m) {
    constexpr int V = Vec<T>::width, ACROSS = BWD_COLS / V, PARTS = BWD_THREADS / ACROSS;
    static_assert(BWD_COLS % V == 0 && ACROSS <= 32 && BWD_THREADS % 32 == 0, "a warp holds whole rows");
    __shared__ T partial[BWD_THREADS / 32][BWD_COLS];
    const int t = threadIdx.x;
    const int i = blockIdx.x * BWD_COLS + (t % ACROSS) * V;
    const bool wide = n % V == 0 && aligned16(w);
    T acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
        acc[e] = T(0);
    }
    for (int k0 = t / ACROSS; k0 < m; k0 += PARTS * BWD_UNROLL) {
        T wv[BWD_UNROLL][V], d[BWD_UNROLL];
#pragma unroll
        for (int u = 0; u < BWD_UNROLL; ++u) {
            const int k = k0 + u * PARTS;
            const T* w_k = w + (long long)(k < m ? k : 0) * n;
            d[u] = k < m ? delta_next[k] : T(0);
            if (wide && k < m && i < n) {
                load16(wv[u], w_k + i);
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    wv[u][e] = k < m && i + e < n ? w_k[i + e] : T(0);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < BWD_UNROLL; ++u) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                acc[e] += wv[u][e] * d[u];
            }
        }
    }
#pragma unroll
    for (int offset = 16; offset >= ACROSS; offset /= 2) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
            acc[e] += __shfl_down_sync(0xffffffffu, acc[e], offset);
        }
    }
    if (t % 32 < ACROSS) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
            partial[t / 32][t % 32 * V + e] = acc[e];
        }
    }
    __syncthreads();
    const int col = blockIdx.x * BWD_COLS + t;
    if (t < BWD_COLS && col < n) {
        T sum = partial[0][t];
        for (int warp = 1; warp < BWD_THREADS / 32; ++warp) {
            sum += partial[warp][t];
        }
        delta[col] = sum * sp[col];
    }
}

// (2)(3) and (5) for B > 1: out = w a_prev (forward; w is (n, m)) or out = w^T delta_next (backward; w
// is (m, n)), for a block of R = GEMM_ROWS rows of out and S = 2 V GEMM_COLUMNS columns of the batch
// (GEMM_COLUMNS groups of 8 floats or 4 doubles), then the epilogue: + b, then a = sigma(z) and sp_out =
// sigma'(z) (forward), or * sp (backward; a, sp_out and b are unused there).
// Launch: block GEMM_THREADS (256), grid (ceil(B / S), Y, Z) (chain_launch, which picks R and S; Y Z >= ceil(n / R),
// Y <= 65535: launch.rows_grid), rows i0 = R (blockIdx.y + Y blockIdx.z).. of out.
// Thread t holds an 8 x 2V register tile of out (8 rows, 2V columns: 64 sums in float32), tile t % TILES
// of the block's TILES = GEMM_COLUMNS R / 8, and sums it over the slice p = t / TILES of m: k = p, p + P,
// ... (P = 256 / TILES slices). The block walks m in stages of K columns of w (8 KB each), GEMM_STAGES of
// them in shared memory: while it computes on one, the copies of the next GEMM_STAGES - 1 are in flight
// (pipeline.h; 16 bytes each where the rows of w are aligned, else element by element; zeros beyond every
// edge). Its x (a_prev, or delta_next) it loads straight into registers, a stage ahead: 2 16-byte loads
// of a row of x for each of its k's (or the same elements one by one). Each k then costs 8 shared loads
// of w (two 16-byte loads backward) and 2 V x 8 FMAs. The sums of the P slices of an output meet in a
// fixed order: by halves in shuffles within a warp (fold_half), each lane keeping half of what it held,
// then the 8 warps' in order in shared memory (the stages' memory, once every thread is past them).
// Bank conflicts: a row of a stage is padded (forward by 32 bytes, backward by 16), and forward a tile
// takes rows rg, rg + R / 8, ... (rg = its row group), so that the slices and row groups of a warp read
// different banks.
// Bytes: n*m + m*B + n (forward: w, a_prev, b) or m*n + m*B + n*B (backward: w, delta_next, sp) reads
// + 3*n*B (z, a, sp) or n*B (delta) writes; every block of a column of the grid re-reads the whole of
// x's columns (m * S elements), ceil(n / R) times in all, and every block of a row its rows of w,
// ceil(B / S) times in all, from L2.
template <typename T, bool BACKWARD>
__device__ void chain_gemm(T* out, T* a, T* sp_out, const T* sp, const T* w, const T* x, const T* b, int n, int m,
                           int batch, int act) {
    constexpr int V = Vec<T>::width, TC = 2 * V, G = GEMM_COLUMNS, S = G * TC, R = GEMM_ROWS, GROUPS = R / 8;
    constexpr int TILES = G * GROUPS, SLICES = GEMM_THREADS / TILES, K = 8192 / (R * (int)sizeof(T)), PER = K / SLICES;
    constexpr int PAD = (BACKWARD ? 16 : 32) / sizeof(T), PIECES = R * K / V / GEMM_THREADS, SUMS = 8 * TC;
    constexpr int FIRST = BACKWARD ? K : R, SECOND = (BACKWARD ? R : K) + PAD;  // a stage: [row][k] or [k][row]
    static_assert(GEMM_THREADS == 256 && R % 8 == 0 && 32 % TILES == 0 && K % SLICES == 0 && PIECES >= 1 &&
                  R * K == PIECES * V * GEMM_THREADS && GEMM_STAGES >= 2,
                  "256 threads; tiles of 8 rows; a warp holds whole slices; a stage divides among the threads");
    __shared__ __align__(16) T stage[GEMM_STAGES][FIRST][SECOND];
    static_assert(sizeof(T) * 8 * TILES * (SUMS + 1) <= sizeof(stage), "the partial sums fit in the stages");
    const int by = blockIdx.y + gridDim.y * blockIdx.z;
    if (by >= (n + R - 1) / R) {
        return;  // past the last row of blocks (in the last z): nothing to do
    }
    const int t = threadIdx.x, lane = t % 32, tile = t % TILES, p = t / TILES, rg = tile / G, g = tile % G;
    const int i0 = by * R, s0 = blockIdx.x * S + g * TC, stages = (m + K - 1) / K;
    const bool wide_w = (BACKWARD ? n : m) % V == 0 && aligned16(w);
    const bool wide_x = batch % V == 0 && aligned16(x);

    // Stage number st of w into buffer buf: forward rows i0.. of w, columns st * K..; backward rows st * K..
    // of w, columns i0.., transposed. Piece v is V elements along w's rows.
    auto copy_stage = [&](int buf, int st) {
#pragma unroll
        for (int q = 0; q < PIECES; ++q) {
            const int v = t + q * GEMM_THREADS;
            const int r = BACKWARD ? v % (R / V) * V : v / (K / V), k = BACKWARD ? v / (R / V) : v % (K / V) * V;
            const int k_w = st * K + k, i = i0 + r;
            const long long start = BACKWARD ? (long long)k_w * n + i : (long long)i * m + k_w;
            const int left = BACKWARD ? (k_w < m ? n - i : 0) : (i < n ? m - k_w : 0);  // elements inside w's row
            T* to = BACKWARD ? &stage[buf][k][r] : &stage[buf][r][k];
            copy_piece<V>(to, w, start, left, wide_w);
        }
    };
    // x[k, s0..s0 + TC) for the k's of this thread in stage st, zero beyond every edge.
    T x_next[PER][TC / V][V], x_now[PER][TC / V][V];
    auto load_x = [&](int st) {
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int k = st * K + j * SLICES + p;
            const T* x_k = x + (long long)(k < m ? k : 0) * batch;
#pragma unroll
            for (int h = 0; h < TC / V; ++h) {
                const int s = s0 + h * V;
                load_piece(x_next[j][h], x_k, s, batch, k < m, wide_x);
            }
        }
    };
    T acc[8][TC / V][V];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int h = 0; h < TC / V; ++h) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                acc[r][h][e] = T(0);
            }
        }
    }
#pragma unroll
    for (int st = 0; st < GEMM_STAGES - 1; ++st) {
        if (st < stages) {
            copy_stage(st, st);
        }
        commit_copies();
    }
    load_x(0);
    for (int st = 0; st < stages; ++st) {
        wait_copies<GEMM_STAGES - 2>();  // stage st has landed, for this thread's copies
        __syncthreads();                 // ... and for everyone's; every thread is past stage st - 1
        const int ahead = st + GEMM_STAGES - 1, buf = st % GEMM_STAGES;
        if (ahead < stages) {
            copy_stage(ahead % GEMM_STAGES, ahead);
        }
        commit_copies();
#pragma unroll
        for (int j = 0; j < PER; ++j) {
#pragma unroll
            for (int h = 0; h < TC / V; ++h) {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    x_now[j][h][e] = x_next[j][h][e];
                }
            }
        }
        if (st + 1 < stages) {
            load_x(st + 1);
        }
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int k = j * SLICES + p;
            T w_k[8 / V][V];
#pragma unroll
            for (int u = 0; u < 8 / V; ++u) {
                if (BACKWARD) {
                    load16_plain(w_k[u], &stage[buf][k][8 * rg + u * V]);
                } else {
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        w_k[u][e] = stage[buf][rg + GROUPS * (u * V + e)][k];
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < 8; ++r) {
#pragma unroll
                for (int h = 0; h < TC / V; ++h) {
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        acc[r][h][e] += w_k[r / V][r % V] * x_now[j][h][e];
                    }
                }
            }
        }
    }
    __syncthreads();  // every thread is past the stages (the groups still open are empty): their memory takes the
                      // partial sums

    // The warp's 32 / TILES slices of each tile, by halves: at each level a lane keeps the half of its sums
    // its bit says and adds its partner's, so that it ends with SUMS * TILES / 32 sums from `base`.
    T part[SUMS];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
#pragma unroll
        for (int h = 0; h < TC / V; ++h) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                part[r * TC + h * V + e] = acc[r][h][e];
            }
        }
    }
    static_assert(TILES == 2 || TILES == 4 || TILES == 8 || TILES == 16, "a warp holds 16, 8, 4 or 2 slices");
    int base = fold_half<SUMS / 2>(part, lane, TILES);
    if constexpr (TILES <= 8) {
        base += fold_half<SUMS / 4>(part, lane, 2 * TILES);
    }
    if constexpr (TILES <= 4) {
        base += fold_half<SUMS / 8>(part, lane, 4 * TILES);
    }
    if constexpr (TILES == 2) {
        base += fold_half<SUMS / 16>(part, lane, 8 * TILES);
    }
    constexpr int KEPT = SUMS * TILES / 32;
    T* partial = &stage[0][0][0];  // (8 warps, TILES, SUMS + 1)
#pragma unroll
    for (int e = 0; e < KEPT; ++e) {
        partial[(t / 32 * TILES + tile) * (SUMS + 1) + base + e] = part[e];
    }
    __syncthreads();
    for (int o = t; o < R * S; o += GEMM_THREADS) {
        const int o_tile = o / SUMS, e = o % SUMS, r = e / TC, o_rg = o_tile / G;
        const int i = i0 + (BACKWARD ? 8 * o_rg + r : o_rg + GROUPS * r);
        const int col = blockIdx.x * S + o_tile % G * TC + e % TC;
        if (i < n && col < batch) {
            T sum = partial[o_tile * (SUMS + 1) + e];
            for (int warp = 1; warp < GEMM_THREADS / 32; ++warp) {
                sum += partial[(warp * TILES + o_tile) * (SUMS + 1) + e];
            }
            const long long idx = (long long)i * batch + col;
            if (BACKWARD) {
                out[idx] = sum * sp[idx];
            } else {
                store_activation(out, a, sp_out, idx, sum + b[i], act);
            }
        }
    }
}

#define LEAPFROG_CHAIN(T, SUFFIX)                                                                     \
    extern "C" __global__ void forward_gemv_##SUFFIX(T* z, T* a, T* sp, const T* w, const T* a_prev, \
                                                     const T* b, int n, int m, int act) {             \
        forward_gemv<T>(z, a, sp, w, a_prev, b, n, m, act);                                           \
    }                                                                                                 \
    extern "C" __global__ void forward_gemm_##SUFFIX(T* z, T* a, T* sp, const T* w, const T* a_prev, \
                                                     const T* b, int n, int m, int batch, int act) {  \
        chain_gemm<T, false>(z, a, sp, nullptr, w, a_prev, b, n, m, batch, act);                      \
    }                                                                                                 \
    extern "C" __global__ void backward_gemv_##SUFFIX(T* delta, const T* w, const T* delta_next,     \
                                                      const T* sp, int n, int m) {                    \
        backward_gemv<T>(delta, w, delta_next, sp, n, m);                                             \
    }                                                                                                 \
    extern "C" __global__ void backward_gemm_##SUFFIX(T* delta, const T* w, const T* delta_next,     \
                                                      const T* sp, int n, int m, int batch) {         \
        chain_gemm<T, true>(delta, nullptr, nullptr, sp, w, delta_next, nullptr, n, m, batch, 0);     \
    }

LEAPFROG_CHAIN(float, f32)
LEAPFROG_CHAIN(double, f64)
