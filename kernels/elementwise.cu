// Elementwise parts of one pass: the forward activation (3) with its derivative, the output error (4),
// the Hadamard factor of (5), the SGD update, the
// updates of the optimizers (momentum, Adam), the check of the gradients for NaN and Inf and the mark of a
// step's end. Arrays are
// row-major; an (n, B) array is a minibatch stored as columns, so element (i, s) sits at i * B + s.
//
// Launch shape (every kernel here): 1-D grid-stride loop over the `size` = n*B elements, block =
// ELEMENTWISE_BLOCK threads, grid = min(ceil(size / block), ELEMENTWISE_MAX_GRID), from
// leapfrog_gpu/backends/launch.py (elementwise_launch). Bytes are given in elements: times 4 (float)
// or 8 (double). They are what each kernel must move; profiling/kernel_traffic.py holds the same
// counts for kernels/README.md.
//
// Activation codes: kernels/activation.h.
// Cost codes (leapfrog_gpu/backends/ops_cuda.py): 0 quadratic, 1 cross-entropy (sigmoid output only).

#include "activation.h"
#include "vector.h"

// (2) bias half and (3): z += b (broadcast over the batch), a = sigma(z), sp = sigma'(z).
// Moves n*B + n reads (z, b) + 3*n*B writes (z, a, sp).
template <typename T>
__device__ void bias_activation(T* z, T* a, T* sp, const T* b, int n, int batch, int act) {
    const long long size = (long long)n * batch;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < size;
         idx += (long long)gridDim.x * blockDim.x) {
        store_activation(z, a, sp, idx, z[idx] + b[idx / batch], act);
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

// The SGD step after (6) and (7): param -= scale * nabla, for w (size n*m) and b (size n). The step's
// controls live in device memory, so that a captured CUDA graph reads the current ones: controls[0]
// is scale = eta / B, and controls[1] a refusal, 0 to update and otherwise a code left by check_finite
// (or a value the host set), in which case nothing is written. Moves 2*size reads (param, nabla) +
// size writes (param).
template <typename T>
__device__ void sgd_update(T* param, const T* nabla, T scale, long long size) {
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < size;
         idx += (long long)gridDim.x * blockDim.x) {
        param[idx] -= scale * nabla[idx];
    }
}

// The update of a layer in one launch: w -= scale * nabla_w (size_w elements), then b -= scale * nabla_b
// (size_b), one grid-stride loop over both, each element as sgd_update computes it. Moves 2*(size_w +
// size_b) reads + size_w + size_b writes.
template <typename T>
__device__ void sgd_update_layer(T* w, const T* nabla_w, long long size_w, T* b, const T* nabla_b, long long size_b,
                                 T scale) {
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < size_w + size_b;
         idx += (long long)gridDim.x * blockDim.x) {
        if (idx < size_w) {
            w[idx] -= scale * nabla_w[idx];
        } else {
            b[idx - size_w] -= scale * nabla_b[idx - size_w];
        }
    }
}

// a * b, a + b and a - b, each rounded on its own: never contracted into one fused multiply-add, as NVRTC's
// default --fmad=true contracts a * b + c (every FFMA in the SASS of these updates otherwise). The optimizers'
// updates use them so that they are bitwise what their NumPy twins' separate operations compute (and what the
// CPU harness, which has no FMA, computes). The SGD updates (sgd_update here, the fused *_sgd kernels of
// nabla_w.cu) keep the contraction: all of them contract p - scale * g alike, so fused and plain steps agree.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }

// The updates of leapfrog_gpu/core/optimizers.py, torch.optim's rules, one pass over param, nabla and the state.
// Besides controls[1] (the refusal, as above) they read controls[2] = lr, controls[3] = 1 / B (nabla is the
// gradient summed over the batch; g = nabla / B that of the batch-mean cost), controls[4] = t, the step
// count from 1, and Adam's bias corrections controls[5] = 1 - b1^t and controls[6] = sqrt(1 - b2^t), which
// the host computes as torch.optim does; the hyper-parameters are arguments, fixed for a network's life.
//
// SGD: g = nabla / B + wd * p; with momentum mu (buf is then read), buf = g at t = 1, else mu buf + (1 - d) g,
// the step buf (g + mu buf with nesterov); p -= lr * step. undamped = 1 - d comes from the host, rounded once
// to T from its double (as torch.optim's alpha = 1 - dampening and the NumPy twin's cast(1 - dampening)), not
// computed here from d rounded to T first. Moves 3*size reads (param, nabla, buf) + 2*size writes
// (param, buf) with momentum, 2*size reads + size writes without (buf is then not touched).
template <typename T>
__device__ void momentum_update(T* param, const T* nabla, T* buf, const T* controls, long long size, T momentum,
                                T undamped, int nesterov, T weight_decay) {
    const T lr = controls[2], scale = controls[3];
    const bool first = controls[4] == T(1);
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < size;
         idx += (long long)gridDim.x * blockDim.x) {
        const T p = param[idx];
        T g = mul_rn(nabla[idx], scale);
        if (weight_decay != T(0)) g = add_rn(g, mul_rn(p, weight_decay));
        if (momentum != T(0)) {
            const T b = first ? g : add_rn(mul_rn(buf[idx], momentum), mul_rn(g, undamped));
            buf[idx] = b;
            g = nesterov ? add_rn(g, mul_rn(b, momentum)) : b;
        }
        param[idx] = sub_rn(p, mul_rn(g, lr));
    }
}

// Adam (decoupled = 0) and AdamW (1): g = nabla / B, plus wd * p (Adam) or with p *= 1 - lr wd first (AdamW);
// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
// the corrections read from controls[5] and controls[6]. c1 = 1 - b1 and c2 = 1 - b2 come from the host, each
// rounded once to T from its double (torch.optim's 1 - beta1 and value=1 - beta2; the twin's cast(1 - beta)):
// 1 - b2 computed here in float32 from b2 = 0.999f is 0.0009999871, not 0.001f.
// Moves 4*size reads (param, nabla, m, v) + 3*size writes (param, m, v).
template <typename T>
__device__ void adam_update(T* param, const T* nabla, T* m, T* v, const T* controls, long long size, T beta1,
                            T c1, T beta2, T c2, T eps, T weight_decay, int decoupled) {
    const T lr = controls[2], scale = controls[3], step_size = lr / controls[5], root = controls[6];
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < size;
         idx += (long long)gridDim.x * blockDim.x) {
        T p = param[idx];
        T g = mul_rn(nabla[idx], scale);
        if (decoupled) {
            p = mul_rn(p, sub_rn(T(1), mul_rn(lr, weight_decay)));
        } else if (weight_decay != T(0)) {
            g = add_rn(g, mul_rn(p, weight_decay));
        }
        const T mi = add_rn(mul_rn(m[idx], beta1), mul_rn(g, c1));
        const T vi = add_rn(mul_rn(v[idx], beta2), mul_rn(mul_rn(g, c2), g));
        m[idx] = mi;
        v[idx] = vi;
        param[idx] = sub_rn(p, mul_rn(mi / add_rn(sqrt(vi) / root, eps), step_size));
    }
}

// check_finite: controls[1] = code when x holds a NaN or an Inf and controls[1] is still 0, so the
// first gradient found wanting in a step names itself and the updates after it write nothing. Every
// thread that finds one writes the same value: no atomics, and the same result in any order. Launched over
// ceil(size / 4) threads (check_finite_launch), each visits 16 bytes at a time: a float4 or double2 when x
// is aligned, else the same elements one by one. Moves size reads.
template <typename T>
__device__ void check_finite(T* controls, const T* x, long long size, T code) {
    constexpr int V = Vec<T>::width;
    const bool wide = aligned16(x);
    bool finite = true;
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v * V < size;
         v += (long long)gridDim.x * blockDim.x) {
        T values[V];
        if (wide && (v + 1) * V <= size) {
            load16(values, x + v * V);
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                values[e] = v * V + e < size ? x[v * V + e] : T(0);
            }
        }
#pragma unroll
        for (int e = 0; e < V; ++e) {
            finite = finite && isfinite(values[e]);
        }
    }
    if (!finite && controls[1] == T(0)) {
        controls[1] = code;
    }
}

// step_done, the last launch of a step, on the main stream behind its join: controls[7] = controls[4], the
// step count t of the step whose updates have run, unless controls[1] holds a refusal (they wrote nothing).
// After a step that failed or was refused, controls[7] is the t of the last step that updated. One thread;
// moves 2 reads + 1 write.
template <typename T>
__device__ void step_done(T* controls) {
    if (controls[1] == T(0)) {
        controls[7] = controls[4];
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
    extern "C" __global__ void sgd_update_##SUFFIX(T* param, const T* nabla, const T* controls,     \
                                                   long long size) {                                 \
        if (controls[1] == T(0)) sgd_update<T>(param, nabla, controls[0], size);                     \
    }                                                                                                \
    extern "C" __global__ void sgd_update_layer_##SUFFIX(T* w, const T* nabla_w, long long size_w, T* b,  \
                                                         const T* nabla_b, long long size_b,             \
                                                         const T* controls) {                           \
        if (controls[1] == T(0)) sgd_update_layer<T>(w, nabla_w, size_w, b, nabla_b, size_b, controls[0]); \
    }                                                                                                \
    extern "C" __global__ void momentum_update_##SUFFIX(T* param, const T* nabla, T* buf,            \
                                                        const T* controls, long long size, T momentum, \
                                                        T undamped, int nesterov, T weight_decay) {   \
        if (controls[1] == T(0))                                                                     \
            momentum_update<T>(param, nabla, buf, controls, size, momentum, undamped, nesterov,        \
                               weight_decay);                                                        \
    }                                                                                                \
    extern "C" __global__ void adam_update_##SUFFIX(T* param, const T* nabla, T* m, T* v,           \
                                                    const T* controls, long long size, T beta1,      \
                                                    T c1, T beta2, T c2, T eps, T weight_decay,      \
                                                    int decoupled) {                                 \
        if (controls[1] == T(0))                                                                     \
            adam_update<T>(param, nabla, m, v, controls, size, beta1, c1, beta2, c2, eps, weight_decay, \
                           decoupled);                                                               \
    }                                                                                                \
    extern "C" __global__ void check_finite_##SUFFIX(T* controls, const T* x, long long size,       \
                                                     T code) {                                       \
        check_finite<T>(controls, x, size, code);                                                    \
    }                                                                                                \
    extern "C" __global__ void step_done_##SUFFIX(T* controls) {                                     \
        step_done<T>(controls);                                                                      \
    }

LEAPFROG_ELEMENTWISE(float, f32)
LEAPFROG_ELEMENTWISE(double, f64)
