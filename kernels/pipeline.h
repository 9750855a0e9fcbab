// Asynchronous copies from global to shared memory, for kernels that keep the next stages' loads in flight
// while they compute on the current one (cp.async, sm_80 and later). A kernel file takes them with
// #include "pipeline.h" (leapfrog_gpu/backends/sources.py inlines it, as it does vector.h).
//
//   copy_async<N>(shared, source, valid)  copies N elements (4, 8 or 16 bytes, both addresses aligned to
//                                         that) from global to shared memory: the first `valid` of them
//                                         from source, zeros for the others (valid = 0: zeros only, and
//                                         source is not read)
//   commit_copies()                       closes this thread's group of the copies issued since the last
//                                         commit (an empty group if there were none)
//   wait_copies<N>()                      waits until at most this thread's N most recent groups are in
//                                         flight
//   copy_piece<N>(shared, row, start, left, wide)
//                                         copies N elements of a row, from row + start, of which `left` lie
//                                         inside it (none if left <= 0): by one N-wide copy where the row's
//                                         pieces are aligned (`wide`), else by N one-element copies
//
// A copy lands some time between its issue and the wait that covers it, so a thread may read a stage once
// every thread that copied into it has waited for it and a __syncthreads() separates them; it may copy into
// a stage again once every thread is past its last read of it (a __syncthreads() again).
//
// With -DLEAPFROG_PLAIN_COPY (launch.PLAIN_COPY) a copy is an ordinary load and store, done at once, and
// commit and wait do nothing: the same kernels with nothing in flight, to compare against. Compiled for the
// host, as the CPU harness compiles these kernels, the copies are CUDA's pipeline primitives
// (cuda_pipeline_primitives.h), which land them at the wait.

#if defined(LEAPFROG_PLAIN_COPY)

template <int N, typename T>
__device__ __forceinline__ void copy_async(T* shared, const T* source, int valid) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
        shared[e] = e < valid ? source[e] : T(0);
    }
}

__device__ __forceinline__ void commit_copies() {}

template <int N>
__device__ __forceinline__ void wait_copies() {}

#elif defined(__CUDA_ARCH__)

template <int N, typename T>
__device__ __forceinline__ void copy_async(T* shared, const T* source, int valid) {
    static_assert(N * sizeof(T) == 4 || N * sizeof(T) == 8 || N * sizeof(T) == 16, "cp.async moves 4, 8 or 16 bytes");
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    const int bytes = valid * static_cast<int>(sizeof(T));
    if constexpr (N * sizeof(T) == 16) {  // .cg: around L1, into shared memory
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(source), "r"(bytes) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(to), "l"(source), "n"(N * sizeof(T)),
                     "r"(bytes)
                     : "memory");
    }
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void wait_copies() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#else

template <int N, typename T>
__device__ __forceinline__ void copy_async(T* shared, const T* source, int valid) {
    __pipeline_memcpy_async(shared, source, N * sizeof(T), (N - valid) * sizeof(T));
}

__device__ __forceinline__ void commit_copies() { __pipeline_commit(); }

template <int N>
__device__ __forceinline__ void wait_copies() {
    __pipeline_wait_prior(N);
}

#endif

template <int N, typename T>
__device__ __forceinline__ void copy_piece(T* shared, const T* row, long long start, int left, bool wide) {
    if (wide) {
        copy_async<N>(shared, left > 0 ? row + start : row, left <= 0 ? 0 : left < N ? left : N);
    } else {
#pragma unroll
        for (int e = 0; e < N; ++e) {
            copy_async<1>(shared + e, e < left ? row + start + e : row, e < left ? 1 : 0);
        }
    }
}
