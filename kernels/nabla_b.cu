// Bias gradient, equation (6): nabla_b^l[i] = sum_s delta^l[i, s], summed over the minibatch.
// delta is (n, B) row-major, nabla_b is (n,).
//
// Launch: block (32, BIAS_ROWS), grid ceil(n / BIAS_ROWS) (bias_launch, with the -D options from
// leapfrog_gpu/backends/launch.py): a warp per row, summed by row_sum (vector.h): lane l loads elements l,
// l + 32, ... of its row, BIAS_UNROLL of them before it adds them in order, and the lanes' sums meet in
// warp_sum: an order fixed by the launch shape. A warp past the last row reads the last one and stores
// nothing. Bytes: n*B reads (delta) + n writes (nabla_b), in elements (times 4 or 8);
// profiling/kernel_traffic.py holds the same counts for kernels/README.md.

#include "vector.h"

#ifndef BIAS_ROWS
#define BIAS_ROWS 8
#endif
#ifndef BIAS_UNROLL
#define BIAS_UNROLL 4
#endif

template <typename T>
__device__ void bias_sum(T* nabla_b, const T* delta, int n, int batch) {
    const int lane = threadIdx.x;
    const int i = blockIdx.x * BIAS_ROWS + threadIdx.y;
    const T sum = row_sum<BIAS_UNROLL>(delta + (long long)(i < n ? i : n - 1) * batch, batch, lane);
    if (lane == 0 && i < n) {
        nabla_b[i] = sum;
    }
}

extern "C" __global__ void bias_sum_f32(float* nabla_b, const float* delta, int n, int batch) {
    bias_sum<float>(nabla_b, delta, n, batch);
}

extern "C" __global__ void bias_sum_f64(double* nabla_b, const double* delta, int n, int batch) {
    bias_sum<double>(nabla_b, delta, n, batch);
}
