// The chain of a pass on our own kernels: the forward layer (2)(3) and the backward layer (5), each one
// kernel, so that a whole step can be captured in a CUDA graph (CuPy refuses cuBLAS during capture).
// Arrays are row-major; an (n, B) array is a minibatch stored as columns, element (i, s) at i * B + s.
// Forward, layer l: w is (n, m) = (n_l, n_{l-1}), a_prev is (m, B); z, a, sp are (n, B); b is (n,).
// Backward, layer l: w is w^{l+1}, (m, n) = (n_{l+1}, n_l); delta_next is (m, B); delta, sp are (n, B).
//
// Every sum runs in an order fixed by the launch shape alone (no atomics), so a launch gives the same
// bits every time. Bytes are given in elements (times 4 or 8); leapfrog_gpu/tools/traffic.py holds the
// same counts for kernels/README.md. Tuning values come in as -D options from
// leapfrog_gpu/backends/launch.py (chain_launch):
//   FWD_ROWS, FWD_UNROLL   forward GEMV block: a warp per row, FWD_ROWS rows; FWD_UNROLL 16-byte loads
//                          of a row per lane before their sum
//   BWD_THREADS, BWD_COLS  backward GEMV block: BWD_THREADS threads share BWD_COLS columns
//   BWD_UNROLL             rows of w each of them loads before their sum
//   TILE                   tile edge of the B > 1 kernels (16 or 32)

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
#ifndef TILE
#define TILE 16
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

// (2)(3) for B > 1, a tiled GEMM: z = w a_prev + b (b broadcast over the batch), a = sigma(z), sp.
// Launch: block (TILE, TILE), grid (ceil(B / TILE), ceil(n / TILE)); thread (x, y) owns z[i0 + y, s0 + x].
// The block walks m in chunks of TILE, staging a TILE x TILE slab of w and of a_prev in shared memory
// (zero beyond every edge), and each thread sums its chunk's terms in order.
// Bytes: n*m + m*B + n reads (w, a_prev, b) + 3*n*B writes (z, a, sp); the blocks of a row of tiles
// re-read its slab of w, ceil(B / TILE) times in all, mostly from L2.
template <typename T>
__device__ void forward_gemm(T* z, T* a, T* sp, const T* w, const T* a_prev, const T* b, int n, int m,
                             int batch, int act) {
    __shared__ T w_tile[TILE][TILE + 1];
    __shared__ T a_tile[TILE][TILE + 1];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int i = blockIdx.y * TILE + ty;
    const int s = blockIdx.x * TILE + tx;
    T acc = T(0);
    for (int j0 = 0; j0 < m; j0 += TILE) {
        w_tile[ty][tx] = (i < n && j0 + tx < m) ? w[(long long)i * m + j0 + tx] : T(0);
        a_tile[ty][tx] = (j0 + ty < m && s < batch) ? a_prev[(long long)(j0 + ty) * batch + s] : T(0);
        __syncthreads();
        for (int t = 0; t < TILE; ++t) {
            acc += w_tile[ty][t] * a_tile[t][tx];
        }
        __syncthreads();
    }
    if (i < n && s < batch) {
        store_activation(z, a, sp, (long long)i * batch + s, acc + b[i], act);
    }
}

// (5) for B > 1, a tiled GEMM with the transpose: delta = (w^T delta_next) * sp.
// Launch: block (TILE, TILE), grid (ceil(B / TILE), ceil(n / TILE)); thread (x, y) owns delta[i0 + y,
// s0 + x]. The block walks m in chunks of TILE, staging w[k0.., i0..] (read along rows: coalesced) and
// delta_next[k0.., s0..] in shared memory, zero beyond every edge.
// Bytes: m*n + m*B + n*B reads (w, delta_next, sp) + n*B writes (delta).
template <typename T>
__device__ void backward_gemm(T* delta, const T* w, const T* delta_next, const T* sp, int n, int m,
                              int batch) {
    __shared__ T w_tile[TILE][TILE + 1];
    __shared__ T d_tile[TILE][TILE + 1];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int i0 = blockIdx.y * TILE;
    const int s = blockIdx.x * TILE + tx;
    T acc = T(0);
    for (int k0 = 0; k0 < m; k0 += TILE) {
        w_tile[ty][tx] = (k0 + ty < m && i0 + tx < n) ? w[(long long)(k0 + ty) * n + i0 + tx] : T(0);
        d_tile[ty][tx] = (k0 + ty < m && s < batch) ? delta_next[(long long)(k0 + ty) * batch + s] : T(0);
        __syncthreads();
        for (int t = 0; t < TILE; ++t) {
            acc += w_tile[t][ty] * d_tile[t][tx];
        }
        __syncthreads();
    }
    if (i0 + ty < n && s < batch) {
        const long long idx = (long long)(i0 + ty) * batch + s;
        delta[idx] = acc * sp[idx];
    }
}

#define LEAPFROG_CHAIN(T, SUFFIX)                                                                     \
    extern "C" __global__ void forward_gemv_##SUFFIX(T* z, T* a, T* sp, const T* w, const T* a_prev, \
                                                     const T* b, int n, int m, int act) {             \
        forward_gemv<T>(z, a, sp, w, a_prev, b, n, m, act);                                           \
    }                                                                                                 \
    extern "C" __global__ void forward_gemm_##SUFFIX(T* z, T* a, T* sp, const T* w, const T* a_prev, \
                                                     const T* b, int n, int m, int batch, int act) {  \
        forward_gemm<T>(z, a, sp, w, a_prev, b, n, m, batch, act);                                    \
    }                                                                                                 \
    extern "C" __global__ void backward_gemv_##SUFFIX(T* delta, const T* w, const T* delta_next,     \
                                                      const T* sp, int n, int m) {                    \
        backward_gemv<T>(delta, w, delta_next, sp, n, m);                                             \
    }                                                                                                 \
    extern "C" __global__ void backward_gemm_##SUFFIX(T* delta, const T* w, const T* delta_next,     \
                                                      const T* sp, int n, int m, int batch) {         \
        backward_gemm<T>(delta, w, delta_next, sp, n, m, batch);                                      \
    }

LEAPFROG_CHAIN(float, f32)
LEAPFROG_CHAIN(double, f64)
