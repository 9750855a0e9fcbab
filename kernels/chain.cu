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
//   FWD_LANES, FWD_ROWS   forward GEMV block: FWD_LANES threads (a power of two) share each of FWD_ROWS rows
//   BWD_COLS, BWD_SPLIT   backward GEMV block: BWD_SPLIT threads (a power of two) share each of BWD_COLS columns
//   TILE                  tile edge of the B > 1 kernels (16 or 32)

#include "activation.h"

#ifndef FWD_LANES
#define FWD_LANES 32
#endif
#ifndef FWD_ROWS
#define FWD_ROWS 8
#endif
#ifndef BWD_COLS
#define BWD_COLS 32
#endif
#ifndef BWD_SPLIT
#define BWD_SPLIT 16
#endif
#ifndef TILE
#define TILE 16
#endif

// Sums values[0], values[stride], ..., values[(count - 1) * stride] into values[0] in a binary tree
// (count a power of two): at each level thread `index` adds in the value half the level away, then the
// block meets at a barrier, so every thread of the block must call it, with its own index.
template <typename T>
__device__ void tree_sum(T* values, int index, int count, int stride) {
    for (int half = count / 2; half > 0; half /= 2) {
        if (index < half) {
            values[index * stride] += values[(index + half) * stride];
        }
        __syncthreads();
    }
}

// (2)(3) for B = 1, a GEMV: z = w a_prev + b, a = sigma(z), sp = sigma'(z).
// Launch: block (FWD_LANES, FWD_ROWS), grid ceil(n / FWD_ROWS). The lanes of a row read it in strides of
// FWD_LANES (coalesced), each summing its share in order; the partial sums then meet in tree_sum.
// Bytes: n*m + m + n reads (w, a_prev, b) + 3n writes (z, a, sp).
template <typename T>
__device__ void forward_gemv(T* z, T* a, T* sp, const T* w, const T* a_prev, const T* b, int n, int m,
                             int act) {
    __shared__ T partial[FWD_ROWS][FWD_LANES + 1];
    const int lane = threadIdx.x;
    const int row = threadIdx.y;
    const int i = blockIdx.x * FWD_ROWS + row;
    T acc = T(0);
    if (i < n) {
        const T* w_i = w + (long long)i * m;
#pragma unroll 4
        for (int j = lane; j < m; j += FWD_LANES) {
            acc += w_i[j] * a_prev[j];
        }
    }
    partial[row][lane] = acc;
    __syncthreads();
    tree_sum(&partial[row][0], lane, FWD_LANES, 1);
    if (lane == 0 && i < n) {
        store_activation(z, a, sp, i, partial[row][0] + b[i], act);
    }
}

// (5) for B = 1, a transposed GEMV: delta = (w^T delta_next) * sp.
// Launch: block (BWD_COLS, BWD_SPLIT), grid ceil(n / BWD_COLS). Thread (c, p) sums rows k = p, p +
// BWD_SPLIT, ... of column i = c of its block (consecutive threads read consecutive columns of a row:
// coalesced); the BWD_SPLIT partial sums of a column meet in tree_sum.
// Bytes: m*n + m + n reads (w, delta_next, sp) + n writes (delta).
template <typename T>
__device__ void backward_gemv(T* delta, const T* w, const T* delta_next, const T* sp, int n, int m) {
    __shared__ T partial[BWD_SPLIT][BWD_COLS + 1];
    const int col = threadIdx.x;
    const int part = threadIdx.y;
    const int i = blockIdx.x * BWD_COLS + col;
    T acc = T(0);
    if (i < n) {
#pragma unroll 4
        for (int k = part; k < m; k += BWD_SPLIT) {
            acc += w[(long long)k * n + i] * delta_next[k];
        }
    }
    partial[part][col] = acc;
    __syncthreads();
    tree_sum(&partial[0][col], part, BWD_SPLIT, BWD_COLS + 1);
    if (part == 0 && i < n) {
        delta[i] = partial[0][col] * sp[i];
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
