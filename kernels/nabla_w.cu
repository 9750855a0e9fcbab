// Weight gradient, equation (7): nabla_w^l = delta^l (a^{l-1})^T, summed over the minibatch.
// delta is (n, B), a is (m, B), nabla_w is (n, m); all row-major.
//
// The *_sgd variants fuse the SGD update: w -= scale * (delta a^T), so that nabla_w never goes to
// memory. Each element's product or sum is formed exactly as in the plain kernel and rounded to T
// before the update, so the result is bitwise that of the plain kernel followed by sgd_update. They
// take the step's controls as sgd_update does (kernels/elementwise.cu): scale = controls[0], and
// nothing is written when controls[1] is not 0.
//
// Bytes are given in elements: times 4 (float) or 8 (double); leapfrog_gpu/tools/traffic.py holds the
// same counts for kernels/README.md. Tuning values come in as -D options from
// leapfrog_gpu/backends/launch.py:
//   OUTER_BX, OUTER_BY  block shape of the B = 1 outer product
//   TILE                tile edge of the rank-B update (16 or 32)

#ifndef OUTER_BX
#define OUTER_BX 32
#endif
#ifndef OUTER_BY
#define OUTER_BY 8
#endif
#ifndef TILE
#define TILE 16
#endif

// (7) for B = 1: nabla_w[i, j] = delta[i] * a[j], an outer product.
// Launch: block (OUTER_BX, OUTER_BY), grid (ceil(m / OUTER_BX), ceil(n / OUTER_BY)) (outer_launch); one
// thread per element, consecutive threads along j so that the store is coalesced.
// Bytes: n + m reads (delta, a) + n*m writes (nabla_w). The fused outer_sgd reads w as well and writes
// it instead: n + m + n*m reads + n*m writes.
template <typename T, bool SGD>
__device__ void outer(T* out, const T* delta, const T* a, int n, int m, T scale) {
    const int j = blockIdx.x * OUTER_BX + threadIdx.x;
    const int i = blockIdx.y * OUTER_BY + threadIdx.y;
    if (i < n && j < m) {
        const T g = delta[i] * a[j];
        if (SGD) {
            out[(long long)i * m + j] -= scale * g;
        } else {
            out[(long long)i * m + j] = g;
        }
    }
}

// (7) for B > 1: nabla_w[i, j] = sum_s delta[i, s] * a[j, s], a rank-B update.
// Launch: block (TILE, TILE), grid (ceil(m / TILE), ceil(n / TILE)) (rank_update_launch). Each block
// walks the batch in chunks of TILE, staging a TILE x TILE slab of delta and of a in shared memory (rows
// padded by one to keep the column reads free of bank conflicts); loads and stores are masked at every
// edge. Bytes: (n + m) * B reads (delta, a) + n*m writes (nabla_w); the fused rank_update_sgd reads w as
// well and writes it instead: (n + m) * B + n*m reads + n*m writes. The blocks of a row re-read its
// slab of delta, ceil(m / TILE) times in all (a: ceil(n / TILE) times), mostly from L2.
template <typename T, bool SGD>
__device__ void rank_update(T* out, const T* delta, const T* a, int n, int m, int batch, T scale) {
    __shared__ T delta_tile[TILE][TILE + 1];
    __shared__ T a_tile[TILE][TILE + 1];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int i0 = blockIdx.y * TILE;
    const int j0 = blockIdx.x * TILE;
    T acc = T(0);
    for (int s0 = 0; s0 < batch; s0 += TILE) {
        const int s = s0 + tx;
        delta_tile[ty][tx] = (i0 + ty < n && s < batch) ? delta[(long long)(i0 + ty) * batch + s] : T(0);
        a_tile[ty][tx] = (j0 + ty < m && s < batch) ? a[(long long)(j0 + ty) * batch + s] : T(0);
        __syncthreads();
        for (int t = 0; t < TILE; ++t) {
            acc += delta_tile[ty][t] * a_tile[tx][t];
        }
        __syncthreads();
    }
    if (i0 + ty < n && j0 + tx < m) {
        if (SGD) {
            out[(long long)(i0 + ty) * m + j0 + tx] -= scale * acc;
        } else {
            out[(long long)(i0 + ty) * m + j0 + tx] = acc;
        }
    }
}

#define LEAPFROG_NABLA_W(T, SUFFIX)                                                                  \
    extern "C" __global__ void outer_##SUFFIX(T* nabla_w, const T* delta, const T* a, int n, int m) { \
        outer<T, false>(nabla_w, delta, a, n, m, T(0));                                              \
    }                                                                                                \
    extern "C" __global__ void outer_sgd_##SUFFIX(T* w, const T* delta, const T* a, int n, int m,   \
                                                  const T* controls) {                              \
        if (controls[1] == T(0)) outer<T, true>(w, delta, a, n, m, controls[0]);                     \
    }                                                                                                \
    extern "C" __global__ void rank_update_##SUFFIX(T* nabla_w, const T* delta, const T* a, int n,  \
                                                    int m, int batch) {                             \
        rank_update<T, false>(nabla_w, delta, a, n, m, batch, T(0));                                 \
    }                                                                                                \
    extern "C" __global__ void rank_update_sgd_##SUFFIX(T* w, const T* delta, const T* a, int n,    \
                                                        int m, int batch, const T* controls) {      \
        if (controls[1] == T(0)) rank_update<T, true>(w, delta, a, n, m, batch, controls[0]);        \
    }

LEAPFROG_NABLA_W(float, f32)
LEAPFROG_NABLA_W(double, f64)
