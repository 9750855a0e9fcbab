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
//   GEMM_ROWS, GEMM_THREADS  B > 1 block: GEMM_THREADS threads (256) for GEMM_ROWS rows (8) of the result
//   GEMM_STAGE             elements of m a B > 1 block stages in shared memory at a time (in float32)
//   GEMM_UNROLL            vectors of a_prev (delta_next) each thread loads before their sum

#include "activation.h"
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
#ifndef GEMM_STAGE
#define GEMM_STAGE 1024
#endif
#ifndef GEMM_UNROLL
#define GEMM_UNROLL 16
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
// is (m, n)), for a block of GEMM_ROWS rows of out and S = 8 * V columns of the batch (32 in float32,
// 16 in float64), then the epilogue: + b, then a = sigma(z) and sp_out = sigma'(z) (forward), or * sp
// (backward; a, sp_out and b are unused there).
// Launch: block GEMM_THREADS (256), grid (ceil(B / S), ceil(n / GEMM_ROWS)) (chain_launch). The block
// walks m in stages of K = GEMM_STAGE elements (half as many in float64): it loads the stage's
// (GEMM_ROWS, K) slab of w, 8 vectors a thread (16 bytes when the rows are aligned, else one by one;
// zero beyond every edge), all before it stores them to shared memory. Thread t then takes the columns
// s0 + (t % 8) * V, ... of x (a_prev, or delta_next) and the rows k = t / 8, t / 8 + 32, ... of the
// stage: it loads GEMM_UNROLL vectors of x before it multiplies them by the 8 rows' w[., k] (shared
// loads, one for 2 * V FMAs), summing over k in order. The 32 partial sums of an output meet in a fixed
// order: by halves in shuffles within a warp (4 of them), then the 8 warps' in order in shared memory.
// Bytes: n*m + m*B + n (forward: w, a_prev, b) or m*n + m*B + n*B (backward: w, delta_next, sp) reads
// + 3*n*B (z, a, sp) or n*B (delta) writes; every block of a column of the grid re-reads the whole of
// x's columns (m * S elements), ceil(n / GEMM_ROWS) times in all, from L2.
template <typename T, bool BACKWARD>
__device__ void chain_gemm(T* out, T* a, T* sp_out, const T* sp, const T* w, const T* x, const T* b, int n, int m,
                           int batch, int act) {
    constexpr int V = Vec<T>::width, S = 8 * V, R = GEMM_ROWS, K = GEMM_STAGE * 4 / sizeof(T);
    constexpr int SLICES = GEMM_THREADS / 8, LOADS = R * K / V / GEMM_THREADS;
    static_assert(R == 8 && GEMM_THREADS == 256 && R * K % (V * GEMM_THREADS) == 0 && K % (SLICES * GEMM_UNROLL) == 0,
                  "8 rows; a slab divides among 256 threads; a stage among the slices");
    __shared__ __align__(16) T slab[R][K];
    const int t = threadIdx.x, lane = t % 32, g = t % 8, p = t / 8;
    const int i0 = blockIdx.y * R, s = blockIdx.x * S + g * V;
    const bool wide_w = (BACKWARD ? n : m) % V == 0 && aligned16(w);
    const bool wide_x = batch % V == 0 && aligned16(x);
    T acc[R][V];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
            acc[r][e] = T(0);
        }
    }
    for (int k0 = 0; k0 < m; k0 += K) {
        T staged[LOADS][V];
#pragma unroll
        for (int q = 0; q < LOADS; ++q) {
            const int v = t + q * GEMM_THREADS;
            // Forward: row r of the slab is row i0 + r of w, vector kv along it. Backward: row k of w,
            // vector rv along its n, which the slab holds transposed.
            const int r = BACKWARD ? v % (R / V) * V : v / (K / V), k = BACKWARD ? v / (R / V) : v % (K / V) * V;
            const bool in = BACKWARD ? k0 + k < m : i0 + r < n;
            const long long start = BACKWARD ? (long long)(k0 + k) * n + i0 + r : (long long)(i0 + r) * m + k0 + k;
            const int left = BACKWARD ? n - (i0 + r) : m - (k0 + k);  // elements of the vector inside w's row
            if (wide_w && in && left > 0) {
                load16(staged[q], w + start);
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    staged[q][e] = in && e < left ? w[start + e] : T(0);
                }
            }
        }
#pragma unroll
        for (int q = 0; q < LOADS; ++q) {
            const int v = t + q * GEMM_THREADS;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                if (BACKWARD) {
                    slab[v % (R / V) * V + e][v / (R / V)] = staged[q][e];
                } else {
                    slab[v / (K / V)][v % (K / V) * V + e] = staged[q][e];
                }
            }
        }
        __syncthreads();
        for (int kk = p; kk < K; kk += SLICES * GEMM_UNROLL) {
            T xv[GEMM_UNROLL][V];
#pragma unroll
            for (int u = 0; u < GEMM_UNROLL; ++u) {
                const int k = k0 + kk + u * SLICES;
                const T* x_k = x + (long long)(k < m ? k : 0) * batch;
                if (wide_x && k < m && s < batch) {
                    load16(xv[u], x_k + s);
                } else {
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        xv[u][e] = k < m && s + e < batch ? x_k[s + e] : T(0);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < GEMM_UNROLL; ++u) {
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const T w_rk = slab[r][kk + u * SLICES];
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        acc[r][e] += w_rk * xv[u][e];
                    }
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
            acc[r][e] += __shfl_down_sync(0xffffffffu, acc[r][e], 16);
            acc[r][e] += __shfl_down_sync(0xffffffffu, acc[r][e], 8);
        }
    }
    T* partial = &slab[0][0];  // (8 warps, R, S), the slab's memory once every thread is past it
    if (lane < 8) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                partial[(t / 32 * R + r) * S + lane * V + e] = acc[r][e];
            }
        }
    }
    __syncthreads();
    const int r = t / S, col = blockIdx.x * S + t % S, i = i0 + r;
    if (t < R * S && i < n && col < batch) {
        T sum = partial[r * S + t % S];
        for (int warp = 1; warp < GEMM_THREADS / 32; ++warp) {
            sum += partial[(warp * R + r) * S + t % S];
        }
        const long long idx = (long long)i * batch + col;
        if (BACKWARD) {
            out[idx] = sum * sp[idx];
        } else {
            store_activation(out, a, sp_out, idx, sum + b[i], act);
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
