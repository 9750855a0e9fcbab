// 16-byte loads, shared by the kernels that stream rows: Vec<T>::width elements of T (4 floats, or 2
// doubles) in one float4 or double2 load. A kernel takes the vector path only where aligned16 says the
// rows start on 16 bytes (a row length that is a multiple of the width, and an aligned base), and a
// scalar path otherwise that sums the same elements in the same order, so both give the same bits.

template <typename T>
struct Vec;
template <>
struct Vec<float> {
    static constexpr int width = 4;
};
template <>
struct Vec<double> {
    static constexpr int width = 2;
};

// out[0..width) = p[0..width), one 16-byte load through the read-only cache (p is not written by the
// kernel that reads it, and is 16-byte aligned).
__device__ __forceinline__ void load16(float (&out)[4], const float* p) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p));
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
}

__device__ __forceinline__ void load16(double (&out)[2], const double* p) {
    const double2 v = __ldg(reinterpret_cast<const double2*>(p));
    out[0] = v.x;
    out[1] = v.y;
}

// The same without the read-only cache: for shared memory, and for an array the kernel writes.
__device__ __forceinline__ void load16_plain(float (&out)[4], const float* p) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
}

__device__ __forceinline__ void load16_plain(double (&out)[2], const double* p) {
    const double2 v = *reinterpret_cast<const double2*>(p);
    out[0] = v.x;
    out[1] = v.y;
}

// p[0..width) = in[0..width), one 16-byte store (p 16-byte aligned).
__device__ __forceinline__ void store16(float* p, const float (&in)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(in[0], in[1], in[2], in[3]);
}

__device__ __forceinline__ void store16(double* p, const double (&in)[2]) {
    *reinterpret_cast<double2*>(p) = make_double2(in[0], in[1]);
}

// out[0..N) = row[s..s + N) of a row of `batch` elements, zero past its end and everywhere when the row is
// not `inside` the matrix: one 16-byte load where the rows are aligned (`wide`) and the piece starts inside,
// else element by element.
template <int N, typename T>
__device__ __forceinline__ void load_piece(T (&out)[N], const T* row, int s, int batch, bool inside, bool wide) {
    if (wide && inside && s < batch) {
        load16(out, row + s);
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k) {
            out[k] = inside && s + k < batch ? row[s + k] : T(0);
        }
    }
}

// Whether the pointer p is 16-byte aligned.
template <typename P>
__device__ __forceinline__ bool aligned16(P p) {
    return ((unsigned long long)p & 15) == 0;
}

// The sum of value over the 32 lanes of a warp, in lane 0, by halves (lane l adds lane l + 16, then
// l + 8, ...): a fixed order. Every lane of the warp must call it.
template <typename T>
__device__ __forceinline__ T warp_sum(T value) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        value += __shfl_down_sync(0xffffffffu, value, offset);
    }
    return value;
}

// One level of a sum across lanes by halves: the lanes `offset` apart hold sums of the same outputs, part[0,
// 2 HALF); the lower one keeps the first HALF, the upper the second, each adding its partner's to its own
// into part[0, HALF). Returns where the kept half starts (0 or HALF). Every lane of the warp must call it.
template <int HALF, typename T, int N>
__device__ __forceinline__ int fold_half(T (&part)[N], int lane, int offset) {
    const bool upper = lane & offset;
#pragma unroll
    for (int e = 0; e < HALF; ++e) {
        const T low = part[e], high = part[e + HALF];
        part[e] = (upper ? high : low) + __shfl_xor_sync(0xffffffffu, upper ? low : high, offset);
    }
    return upper ? HALF : 0;
}

// The type a sum over the batch runs in: double for float, whose error, added one term after another, grows with B
// (the host's (6) sums float32 in float64 too).
template <typename T>
struct Wide {
    using type = T;
};
template <>
struct Wide<float> {
    using type = double;
};

// The sum of row[0, batch) over the 32 lanes of a warp, in lane `lane` 0, in Wide<T> rounded once to T: lane l adds
// row[l], row[l + 32], ... in order, UNROLL of them loaded before their sum (which does not change the order), then
// the lanes' sums meet in warp_sum. Every lane of the warp must call it. bias_sum (6) and rank_update_bias sum with
// it, so they give the same bits.
template <int UNROLL, typename T>
__device__ __forceinline__ T row_sum(const T* row, int batch, int lane) {
    using Acc = typename Wide<T>::type;
    Acc acc = Acc(0);
    for (int s0 = 0; s0 < batch; s0 += 32 * UNROLL) {
        T values[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int s = s0 + u * 32 + lane;
            values[u] = s < batch ? row[s] : T(0);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            acc += Acc(values[u]);
        }
    }
    return T(warp_sum(acc));
}
