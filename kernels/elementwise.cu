// Elementwise parts of one pass: the forward activation (3) with its derivative, the output error (4),
// the Hadamard factor of (5), the SGD update, and the finiteness check of the gradients. Arrays are
// row-major; an (n, B) array is a minibatch stored as columns, so element (i, s) sits at i * B + s.
//
// Launch shape (every kernel here): 1-D grid-stride loop over the `size` = n*B elements, block =
// ELEMENTWISE_BLOCK threads, grid = min(ceil(size / block), ELEMENTWISE_MAX_GRID), from
// leapfrog_gpu/backends/launch.py (elementwise_launch). Bytes are given in elements: times 4 (float)
// or 8 (double). They are what each kernel must move; leapfrog_gpu/tools/traffic.py holds the same
// counts for kernels/README.md.
//
// Activation codes (leapfrog_gpu/backends/ops_cuda.py): 0 sigmoid, 1 tanh, 2 relu, 3 identity.
// Cost codes (the same file): 0 quadratic, 1 cross-entropy (sigmoid output only).

template <typename T>
__device__ T activate(T z, int act) {
    switch (act) {
    case 0: return T(1) / (T(1) + exp(-z));
    case 1: return tanh(z);
    case 2: return z > T(0) ? z : T(0);
    default: return z;
    }
}

template <typename T>
__device__ T activate_prime(T z, T a, int act) {
    switch (act) {
    case 0: return a * (T(1) - a);
    case 1: return T(1) - a * a;
    case 2: return z > T(0) ? T(1) : T(0);
    default: return T(1);
    }
}

// (2) bias half and (3): z += b (broadcast over the batch), a = sigma(z), sp = sigma'(z).
// Moves n*B + n reads (z, b) + 3*n*B writes (z, a, sp).
template <typename T>
__device__ void bias_activation(T* z, T* a, T* sp, const T* b, int n, int batch, int act) {
    const long long size = (long long)n * batch;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < size;
         idx += (long long)gridDim.x * blockDim.x) {
        const T zi = z[idx] + b[idx / batch];
        const T ai = activate(zi, act);
        z[idx] = zi;
        a[idx] = ai;
        sp[idx] = activate_prime(zi, ai, act);
    }
}

// (4): delta^L = (a^L - y) * sigma'(z^L) for the quadratic cost, a^L - y for cross-entropy.
// Moves 3*n*B reads (a, y, sp; 2*n*B for cross-entropy, which skips sp) + n*B writes (delta).
template <typename T>
__device__ void delta_output(T* delta, const T* a, const T* y, const T* sp, long long size, int cost) {
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < size;
         idx += (long long)gridDim.x * blockDim.x) {
        const T diff = a[idx] - y[idx];
        delta[idx] = cost == 0 ? diff * sp[idx] : diff;
    }
}

// (5), Hadamard half: delta^l *= sigma'(z^l), after delta^l = (w^{l+1})^T delta^{l+1}.
// Moves 2*n*B reads (delta, sp) + n*B writes (delta).
template <typename T>
__device__ void delta_hidden(T* delta, const T* sp, long long size) {
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < size;
         idx += (long long)gridDim.x * blockDim.x) {
        delta[idx] *= sp[idx];
    }
}

// The SGD step after (6) and (7): param -= scale * nabla, with scale = eta / B, for w (size n*m) and b
// (size n). Moves 2*size reads (param, nabla) + size writes (param).
template <typename T>
__device__ void sgd_update(T* param, const T* nabla, T scale, long long size) {
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < size;
         idx += (long long)gridDim.x * blockDim.x) {
        param[idx] -= scale * nabla[idx];
    }
}

// The check of check_finite: flag[0] = 1 when x holds a NaN or an Inf; otherwise flag is left as it is,
// so one flag, cleared first, collects the check of every gradient and the host reads it once.
// Moves size reads (and a write of flag[0] per non-finite element).
template <typename T>
__device__ void flag_nonfinite(T* flag, const T* x, long long size) {
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < size;
         idx += (long long)gridDim.x * blockDim.x) {
        if (!isfinite(x[idx])) flag[0] = T(1);
    }
}

#define LEAPFROG_ELEMENTWISE(T, SUFFIX)                                                              \
    extern "C" __global__ void bias_activation_##SUFFIX(T* z, T* a, T* sp, const T* b, int n,       \
                                                        int batch, int act) {                       \
        bias_activation<T>(z, a, sp, b, n, batch, act);                                              \
    }                                                                                                \
    extern "C" __global__ void delta_output_##SUFFIX(T* delta, const T* a, const T* y, const T* sp, \
                                                     long long size, int cost) {                     \
        delta_output<T>(delta, a, y, sp, size, cost);                                                \
    }                                                                                                \
    extern "C" __global__ void delta_hidden_##SUFFIX(T* delta, const T* sp, long long size) {       \
        delta_hidden<T>(delta, sp, size);                                                            \
    }                                                                                                \
    extern "C" __global__ void sgd_update_##SUFFIX(T* param, const T* nabla, T scale,               \
                                                   long long size) {                                 \
        sgd_update<T>(param, nabla, scale, size);                                                    \
    }                                                                                                \
    extern "C" __global__ void flag_nonfinite_##SUFFIX(T* flag, const T* x, long long size) {       \
        flag_nonfinite<T>(flag, x, size);                                                            \
    }

LEAPFROG_ELEMENTWISE(float, f32)
LEAPFROG_ELEMENTWISE(double, f64)
