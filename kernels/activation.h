// The activations sigma and their derivatives, shared by elementwise.cu and chain.cu. A kernel file
// takes them with #include "activation.h", which leapfrog_gpu/backends/sources.py replaces by this text
// (cupy.RawModule compiles one source with no include path).
//
// Activation codes (leapfrog_gpu/backends/ops_cuda.py): 0 sigmoid, 1 tanh, 2 relu, 3 identity.

template <typename T>
__device__ T activate(T z, int act) {
    switch (act) {
    case 0: return T(1) / (T(1) + exp(-z));
    case 1: return tanh(z);
    case 2: return z > T(0) || z != z ? z : T(0);  // a NaN stays NaN, as NumPy's maximum(z, 0) keeps it
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

// The end of (2) and (3) for one element: z = zi, a = sigma(zi), sp = sigma'(zi), stored at idx.
template <typename T>
__device__ void store_activation(T* z, T* a, T* sp, long long idx, T zi, int act) {
    const T ai = activate(zi, act);
    z[idx] = zi;
    a[idx] = ai;
    sp[idx] = activate_prime(zi, ai, act);
}
