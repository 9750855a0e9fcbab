"""The CPU harness (tests/harness/cuda_cpu) itself: barriers, bounds checks, guards, asynchronous copies, argument
checks and build errors."""

import numpy as np
import pytest

import cuda_cpu

# Small kernels in the style of kernels/*.cu: a template, a __shared__ array inside it, extern "C".
SOURCE = r"""
template <typename T>
__device__ void reverse(T* out, const T* in) {
    __shared__ T buffer[1024];
    const int i = threadIdx.y * blockDim.x + threadIdx.x;
    const int count = blockDim.x * blockDim.y;
    buffer[i] = in[blockIdx.x * count + i];
    __syncthreads();  // every element of the block is loaded before any is read back
    out[blockIdx.x * count + i] = buffer[count - 1 - i];
}

extern "C" __global__ void reverse_f64(double* out, const double* in) { reverse<double>(out, in); }

extern "C" __global__ void early_exit_f32(float* x, int n) {
    if (threadIdx.x >= n) return;
    __syncthreads();
    x[threadIdx.x] = 1.0f;
}

extern "C" __global__ void two_barriers_f32(float* x) {
    if (threadIdx.x % 2 == 0) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    x[threadIdx.x] = 1.0f;
}

template <typename T>
__device__ void finite(T* out, const T* in) {
    out[threadIdx.x] = isfinite(in[threadIdx.x]) ? T(1) : T(0);
}

extern "C" __global__ void finite_f32(float* out, const float* in) { finite<float>(out, in); }
extern "C" __global__ void finite_f64(double* out, const double* in) { finite<double>(out, in); }

extern "C" __global__ void fill_f32(float* x, int n, int offset) {
    const int i = threadIdx.x;
    if (i < n) x[i + offset] = 2.0f;
}

extern "C" __global__ void fill_row_f64(double* x, const double* value, int row, int width) {
    double* start = x + (long long)row * width;
    start[threadIdx.x] = *value;
}

extern "C" __global__ void fill_unchecked_f32(float* x, int offset) {
    const int i = threadIdx.x;
    float* p = &x[0];  // a pointer from an element's address: no buffer to check against
    p[i + offset] = 2.0f;
}

extern "C" __global__ void shuffle_f64(double* out, const double* in, int xor_lanes, int delta) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double v = in[i];
    out[i] = xor_lanes ? __shfl_xor_sync(0xffffffffu, v, delta) : __shfl_down_sync(0xffffffffu, v, delta);
}

extern "C" __global__ void shuffle_twice_f32(float* out, const float* in) {
    const int i = threadIdx.x;
    float v = in[i];
    v += __shfl_xor_sync(0xffffffffu, v, 1);  // lanes swap values: each needs the other's before a new one
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    out[i] = v;
}

extern "C" __global__ void early_shuffle_f32(float* x, int n) {
    if (threadIdx.x >= n) return;
    x[threadIdx.x] = __shfl_down_sync(0xffffffffu, x[threadIdx.x], 1);
}

extern "C" __global__ void vector_copy_f32(float* out, const float* in, int offset) {
    const int i = threadIdx.x * 4 + offset;
    if ((unsigned long long)(in + i) % 16 == 0) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(in + i));
        *reinterpret_cast<float4*>(out + i) = make_float4(v.w, v.z, v.y, v.x);
    }
}

extern "C" __global__ void vector_first_f32(float* out, const float* in, int offset) {
    out[0] = (*reinterpret_cast<const float4*>(in + offset)).x;  // no alignment test
}

// Each of 32 threads copies 16 bytes of `in` into two stages asynchronously, a group each (the first with
// `valid` of its 4 floats, zeros after them), then reads its neighbour's piece of the first stage.
extern "C" __global__ void stage_f32(float* out, const float* in, int offset, int valid, int wait, int sync,
                                     int finish) {
    __shared__ __align__(16) float stage[2][128];
    const int t = threadIdx.x;
    __pipeline_memcpy_async(&stage[0][4 * t], in + offset + 4 * t, 16, 4 * (4 - valid));
    __pipeline_commit();
    __pipeline_memcpy_async(&stage[1][4 * t], in + offset + 4 * t, 16, 0);
    __pipeline_commit();
    if (wait) __pipeline_wait_prior(1);  // the first group, not the second
    if (sync) __syncthreads();
    for (int e = 0; e < 4; ++e) out[4 * t + e] = stage[0][(4 * t + 4 + e) % 128];
    if (finish) __pipeline_wait_prior(0);
}
"""


@pytest.fixture(scope="module")
def module():
    if not cuda_cpu.available():
        pytest.fail(f"the CPU harness needs a C++ compiler ({cuda_cpu.CXX}) on the PATH")
    return cuda_cpu.RawModule(code=SOURCE)


@pytest.mark.parametrize("block", [(32, 32, 1), (7, 3, 1), (1, 1, 1)])
def test_barrier_makes_a_block_see_each_others_writes(module, block):
    """1024 threads (the largest block) and odd ones: reversal within each block needs the barrier."""
    count = block[0] * block[1]
    x = np.arange(3 * count, dtype=np.float64)
    out = np.zeros_like(x)
    module.get_function("reverse_f64")((3, 1, 1), block, (out, x))
    np.testing.assert_array_equal(out, x.reshape(3, count)[:, ::-1].ravel())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_isfinite_in_the_precision_of_its_argument(module, dtype):
    info = np.finfo(dtype)
    x = np.array([0.0, -1.5, info.max, -info.max, info.tiny / 4, np.nan, np.inf, -np.inf], dtype)
    out = np.full_like(x, 7)
    module.get_function(f"finite_f{8 * x.itemsize}")((1, 1, 1), (x.size, 1, 1), (out, x))
    np.testing.assert_array_equal(out, np.isfinite(x))


def test_threads_leaving_before_a_barrier_stop_the_launch(module):
    x = np.zeros(32, np.float32)
    with pytest.raises(cuda_cpu.KernelError, match=r"divergent __syncthreads\(\).*10 threads finished"):
        module.get_function("early_exit_f32")((1, 1, 1), (32, 1, 1), (x, np.int32(22)))
    module.get_function("early_exit_f32")((1, 1, 1), (32, 1, 1), (x, np.int32(32)))  # no divergence
    assert np.all(x == 1)


def test_threads_at_different_barriers_stop_the_launch(module):
    x = np.zeros(8, np.float32)
    with pytest.raises(cuda_cpu.KernelError, match=r"divergent __syncthreads\(\).*waits at line"):
        module.get_function("two_barriers_f32")((1, 1, 1), (8, 1, 1), (x,))


@pytest.mark.parametrize("offset, index", [(1, 5), (-1, -1)], ids=["past the end", "before the start"])
def test_an_access_outside_an_argument_stops_the_launch_with_the_index_and_the_size(module, offset, index):
    x = np.ones(5, np.float32)
    kernel = module.get_function("fill_f32")
    kernel((1, 1, 1), (8, 1, 1), (x, np.int32(5), np.int32(0)))
    np.testing.assert_array_equal(x, 2)
    thread = 4 if offset > 0 else 0
    with pytest.raises(cuda_cpu.KernelError, match=rf"^fill_f32: out-of-range access by thread \({thread}, 0, 0\) of "
                                                   rf"block \(0, 0, 0\): index {index} of argument 0, a buffer of 5 "
                                                   r"elements$"):
        kernel((1, 1, 1), (8, 1, 1), (x, np.int32(5), np.int32(offset)))


def test_bounds_are_the_arguments_own_a_view_and_a_pointer_moved_along_it_included(module):
    """A view's buffer is the view (a gradient is a view of one flat buffer); ``p + k`` keeps p's buffer."""
    whole = np.zeros((3, 4))
    rows = whole[:2]
    kernel = module.get_function("fill_row_f64")
    kernel((1, 1, 1), (4, 1, 1), (rows, np.full(1, 7.0), np.int32(1), np.int32(4)))
    np.testing.assert_array_equal(whole, [[0] * 4, [7] * 4, [0] * 4])
    with pytest.raises(cuda_cpu.KernelError, match=r"thread \(0, 0, 0\) .*: index 8 of argument 0, a buffer of 8 "):
        kernel((1, 1, 1), (4, 1, 1), (rows, np.full(1, 7.0), np.int32(2), np.int32(4)))
    np.testing.assert_array_equal(whole[2], 0)  # the launch stopped at the first access outside the view
    with pytest.raises(cuda_cpu.KernelError, match=r"index 0 of argument 1, a buffer of 0 elements"):
        kernel((1, 1, 1), (4, 1, 1), (rows, np.full(1, 7.0)[1:], np.int32(0), np.int32(4)))


def test_an_unchecked_access_past_the_end_of_a_guarded_array_stops_the_launch(module):
    x = cuda_cpu.guarded(np.ones(5, np.float32))
    kernel = module.get_function("fill_unchecked_f32")
    kernel((1, 1, 1), (5, 1, 1), (x, np.int32(0)))
    np.testing.assert_array_equal(x, 2)
    with pytest.raises(cuda_cpu.KernelError, match=r"invalid memory access .* by thread \(4, 0, 0\)"):
        kernel((1, 1, 1), (5, 1, 1), (x, np.int32(1)))


def test_an_unchecked_write_before_the_start_is_seen(module):
    x = cuda_cpu.guarded(np.ones(5, np.float32))
    assert cuda_cpu.untouched_before(x)
    module.get_function("fill_unchecked_f32")((1, 1, 1), (1, 1, 1), (x, np.int32(-1)))
    assert not cuda_cpu.untouched_before(x)


def test_arguments_of_the_wrong_type_are_refused(module):
    x = np.ones(5, np.float32)
    kernel = module.get_function("fill_f32")
    with pytest.raises(TypeError, match="takes arguments of types 'Fii', got 'Fli'"):
        kernel((1, 1, 1), (8, 1, 1), (x, np.int64(5), np.int32(0)))
    with pytest.raises(TypeError, match="got 'Dii'"):
        kernel((1, 1, 1), (8, 1, 1), (x.astype(np.float64), np.int32(5), np.int32(0)))


def test_block_over_1024_threads_is_refused(module):
    x = np.zeros(2048, np.float64)
    with pytest.raises(cuda_cpu.KernelError, match="invalid launch: block 2048 threads"):
        module.get_function("reverse_f64")((1, 1, 1), (64, 32, 1), (x, x))


@pytest.mark.parametrize("xor_lanes, delta", [(0, 1), (0, 16), (1, 3), (1, 16)])
def test_warp_shuffles_exchange_values_within_each_warp(module, xor_lanes, delta):
    """Two warps of 32 lanes in a block of 64, two blocks: lane l takes lane l + delta (its own past
    lane 31) or lane l ^ delta of its own warp."""
    x = np.arange(128, dtype=np.float64)
    out = np.zeros_like(x)
    module.get_function("shuffle_f64")((2, 1, 1), (64, 1, 1), (out, x, np.int32(xor_lanes), np.int32(delta)))
    lane = np.arange(128) % 32
    source = lane ^ delta if xor_lanes else np.where(lane + delta < 32, lane + delta, lane)
    np.testing.assert_array_equal(out, x - lane + source)


def test_a_shuffle_after_a_shuffle_sees_the_values_of_the_first(module):
    x = np.arange(32, dtype=np.float32)
    out = np.zeros_like(x)
    module.get_function("shuffle_twice_f32")((1, 1, 1), (32, 1, 1), (out, x))
    pair = x + x[np.arange(32) ^ 1]
    np.testing.assert_array_equal(out, pair + pair[np.arange(32) ^ 2])


def test_a_shuffle_not_every_lane_reaches_stops_the_launch(module):
    x = np.zeros(32, np.float32)
    with pytest.raises(cuda_cpu.KernelError, match=r"divergent warp shuffle .*lane 31 of warp 0 finished"):
        module.get_function("early_shuffle_f32")((1, 1, 1), (32, 1, 1), (x, np.int32(31)))
    with pytest.raises(cuda_cpu.KernelError, match=r"warp shuffle in a warp of fewer than 32 lanes"):
        module.get_function("early_shuffle_f32")((1, 1, 1), (48, 1, 1), (np.zeros(48, np.float32), np.int32(48)))


def test_vector_accesses_check_the_bounds_and_the_alignment(module):
    """``reinterpret_cast<const float4*>`` of a checked pointer: the whole vector inside the buffer, its
    address on 16 bytes."""
    x = np.empty(40, np.float32)
    start = (-x.ctypes.data % 16) // 4
    x, out = x[start:start + 32], np.zeros(40, np.float32)[start:start + 32]
    assert x.ctypes.data % 16 == 0 and out.ctypes.data % 16 == 0
    x[:] = np.arange(32)
    kernel = module.get_function("vector_copy_f32")
    kernel((1, 1, 1), (8, 1, 1), (out, x, np.int32(0)))
    np.testing.assert_array_equal(out, x.reshape(8, 4)[:, ::-1].ravel())
    with pytest.raises(cuda_cpu.KernelError, match=r"thread \(7, 0, 0\).*index 35 of argument 1, a buffer of 32"):
        kernel((1, 1, 1), (8, 1, 1), (out, x, np.int32(4)))
    first = module.get_function("vector_first_f32")
    first((1, 1, 1), (1, 1, 1), (out, x, np.int32(4)))
    assert out[0] == 4
    with pytest.raises(cuda_cpu.KernelError, match=r"misaligned 16-byte access at element 1 of argument 1"):
        first((1, 1, 1), (1, 1, 1), (out, x, np.int32(1)))


def _aligned(count):
    """A float32 array of ``count`` elements that starts on 16 bytes."""
    x = np.empty(count + 4, np.float32)
    start = (-x.ctypes.data % 16) // 4
    return x[start:start + count]


def _stage(module, x, offset=0, valid=4, wait=1, sync=1, finish=1):
    out = np.full(128, np.nan, np.float32)
    flags = map(np.int32, (offset, valid, wait, sync, finish))
    module.get_function("stage_f32")((1, 1, 1), (32, 1, 1), (out, x, *flags))
    return out


def test_asynchronous_copies_land_at_the_wait_that_covers_them(module):
    """A copy waited for, then a barrier: every thread sees every piece, the bytes past ``valid`` zero. Without
    the wait, or without the barrier after the other threads' waits, the piece still holds the NaN bytes a
    block starts with (the harness lands a copy at its thread's wait, the latest moment CUDA allows)."""
    x = _aligned(128)
    x[:] = np.arange(1, 129)
    np.testing.assert_array_equal(_stage(module, x), np.roll(x, -4))
    zeros = np.roll(np.where(np.arange(128) % 4 < 3, x, 0), -4)
    np.testing.assert_array_equal(_stage(module, x, valid=3), zeros)
    for late in ({"wait": 0}, {"sync": 0}):  # the last thread's neighbour, thread 0, ran (and finished) first
        assert np.isnan(_stage(module, x, **late)[:-4]).all()


def test_asynchronous_copies_are_checked_when_issued(module):
    x = _aligned(132)
    with pytest.raises(cuda_cpu.KernelError, match=r"misaligned 16-byte asynchronous copy"):
        _stage(module, x, offset=1)
    with pytest.raises(cuda_cpu.KernelError, match=r"thread \(31, 0, 0\).*index 135 of argument 1, a buffer of 132"):
        _stage(module, x, offset=8)


def test_a_thread_that_never_waits_for_its_copies_stops_the_launch(module):
    with pytest.raises(cuda_cpu.KernelError, match=r"ended with 1 asynchronous copies it never waited for"):
        _stage(module, _aligned(128), finish=0)


def test_compiler_errors_come_with_the_compiler_log():
    with pytest.raises(cuda_cpu.BuildError, match=r"kernel\.cu:2:.*error"):
        cuda_cpu.RawModule(code='extern "C" __global__ void broken_f32(float* x) {\n    x[0] = y;\n}\n')
