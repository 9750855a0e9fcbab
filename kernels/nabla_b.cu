// Bias gradient, equation (6): nabla_b^l[i] = sum_s delta^l[i, s], summed over the minibatch.
// delta is (n, B) row-major, nabla_b is (n,).
//
// Launch: 1-D, block = BIAS_BLOCK threads (-D option from leapfrog_gpu/backends/launch.py),
// grid = ceil(n / BIAS_BLOCK); one thread per row, summing its B elements in order, so the result
// does not depend on the launch shape (bias_launch). Bytes: n*B reads (delta) + n writes (nabla_b), in
// elements (times 4 or 8); leapfrog_gpu/tools/traffic.py holds the same counts for kernels/README.md.

#ifndef BIAS_BLOCK
#define BIAS_BLOCK 128
#endif

template <typename T>
__device__ void bias_sum(T* nabla_b, const T* delta, int n, int batch) {
    const int i = blockIdx.x * BIAS_BLOCK + threadIdx.x;
    if (i < n) {
        const T* row = delta + (long long)i * batch;
        T acc = T(0);
        for (int s = 0; s < batch; ++s) {
            acc += row[s];
        }
        nabla_b[i] = acc;
    }
}

extern "C" __global__ void bias_sum_f32(float* nabla_b, const float* delta, int n, int batch) {
    bias_sum<float>(nabla_b, delta, n, batch);
}

extern "C" __global__ void bias_sum_f64(double* nabla_b, const double* delta, int n, int batch) {
    bias_sum<double>(nabla_b, delta, n, batch);
}
