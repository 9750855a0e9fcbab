// Runs the CUDA kernels of kernels/*.cu on the CPU, unchanged, so that CI executes them without a GPU.
//
// Blocks run one at a time. Each CUDA thread of a block is a fiber (ucontext) on its own small stack;
// __syncthreads() parks the fiber and the scheduler runs the next one, and once every fiber of the
// block has arrived at the same barrier all of them go on. A fiber is made once (makecontext) and then
// runs thread after thread, block after block; it switches with _setjmp/_longjmp, which, unlike
// swapcontext, leave the signal mask alone and so make no system call. __shared__ is a static, so one
// copy is shared by the fibers of the block; it is filled with NaN bytes before each block (shared memory
// starts undefined on a GPU too, so a read of an element nobody wrote shows in the result). A block
// whose threads do not all meet at the same barrier (some finished, or waiting at another one) stops
// the launch with a message: on a GPU that is undefined behaviour.
//
// Warp shuffles (__shfl_down_sync, __shfl_xor_sync) are warp-level barriers: a lane leaves its value and
// parks, and once all 32 lanes of its warp (consecutive linear thread indices, as on a GPU) wait at the
// same shuffle, each takes its partner's value and all go on. A shuffle that not every lane of the warp
// reaches (some finished, at another shuffle or at __syncthreads), one in a warp of fewer than 32 lanes,
// or one whose mask is not 0xffffffff stops the launch: the kernels here use only full-warp shuffles.
//
// Global memory is bounds-checked: the harness compiles every `T*` of a kernel source as
// cuda_cpu::global<T> (tests/harness/cuda_cpu/__init__.py rewrites the source), a pointer that knows the buffer of
// the kernel argument it comes from, so an access outside that buffer stops the launch with the index, the
// buffer's size, the argument and the thread and block that made it. A pointer that comes from no argument
// (into shared memory, or taken from an element's address) is not checked; an access through it that
// faults (the tests put a PROT_NONE page after every array) stops the launch with the thread and block.
//
// 16-byte loads and stores: the vector types float4, float2 and double2 (with make_float4, ...), and
// `reinterpret_cast<const float4*>(p)` of a checked pointer, which the source rewrite turns into a
// cuda_cpu::vector<float4> view: each access checks that the whole vector lies in the buffer and that its
// address is a multiple of the vector's size (a misaligned vector access faults on a GPU). `(unsigned long
// long)p` gives a checked pointer's address, so a kernel can test the alignment before it takes the vector
// path. __ldg(p) is *p.
//
// Asynchronous copies into shared memory: CUDA's pipeline primitives (cuda_pipeline_primitives.h),
// __pipeline_memcpy_async(shared, global, bytes, zfill), __pipeline_commit() and __pipeline_wait_prior(n),
// which kernels/pipeline.h uses when compiled for the host. A copy checks its source against the argument's
// buffer and both addresses against its size's alignment when it is issued, and lands (reading its source
// then) only when the thread that issued it waits for its group: the latest moment CUDA allows. So a stage
// read before the wait that covers it, or before the __syncthreads() after the other threads' waits, still
// holds the NaN bytes every block starts with; a thread that ends with copies it never waited for stops the
// launch.
//
// Supported: dim3, threadIdx/blockIdx/blockDim/gridDim, __global__/__device__/__shared__ (static
// sizes), __syncthreads, the warp shuffles above, the vector types, __ldg, the pipeline primitives above,
// and exp, tanh and isfinite on float and double (the <cmath> ones). Add intrinsics here as the kernels
// need them. `#pragma unroll` is CUDA's and means nothing here.
//
// Each kernel is exported by CUDA_CPU_EXPORT(name) as
//     int cuda_cpu_<name>(const unsigned grid[3], const unsigned block[3], void** args)
// with the arguments passed as in cuLaunchKernel (an array of pointers to the values; for a pointer
// parameter, to a cuda_cpu::Buffer); it returns 0, or 1 with the reason in cuda_cpu_error().
// cuda_cpu_signature_<name>() spells its parameter types.

#pragma once

#undef _FORTIFY_SOURCE  // its longjmp check refuses a jump to another fiber's stack
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <setjmp.h>
#include <ucontext.h>
#include <utility>
#include <vector>

using std::exp;   // CUDA's float overloads: exp(float) stays in float, as on the device
using std::isfinite;
using std::sqrt;  // sqrt(float) stays in float, as CUDA's device overload does (::sqrt is double)
using std::tanh;

// CUDA's rounded arithmetic intrinsics, which never become a fused multiply-add on the device; the harness
// is built with -ffp-contract=off, so a plain * + - is each rounded on its own here as well.
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dsub_rn(double a, double b) { return a - b; }

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(bytes) __attribute__((aligned(bytes)))
#define __syncthreads() cuda_cpu::syncthreads(__LINE__)
#define __shfl_down_sync(mask, value, delta) cuda_cpu::shuffle(mask, value, delta, false, __LINE__)
#define __shfl_xor_sync(mask, value, lane_mask) cuda_cpu::shuffle(mask, value, lane_mask, true, __LINE__)

struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) double2 {
    double x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

template <typename P>
auto __ldg(P pointer) {
    return *pointer;
}

inline dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace cuda_cpu {

// A fiber's stack: the kernels are leaf code, and 1024-thread blocks need 1024 stacks. They are left
// uninitialised, so the system maps only the pages a fiber touches.
constexpr size_t STACK_BYTES = 32 * 1024;

enum State { READY, AT_BARRIER, AT_SHUFFLE, DONE };

// An asynchronous copy into shared memory that has not landed yet: `bytes` from `from` to `to`, then
// `zeros` zero bytes; `group` is its commit group (0 until committed).
struct Copy {
    char* to;
    const char* from;
    size_t bytes, zeros;
    int group;
};

struct Fiber {
    ucontext_t context;        // its start, on its stack (resume)
    jmp_buf where;             // where it parked
    bool started = false;      // runs fiber_main's loop (false: made anew at its next resume)
    std::vector<Copy> copies;  // issued and not landed
    int committed = 0;         // groups committed so far
    dim3 index;
    State state = READY;
    int line = 0;  // source line of the barrier or shuffle it waits at
    unsigned char sent[8], received[8];  // a shuffle's value left for the warp, and the one taken
    int partner = 0;                     // the lane whose value a shuffle takes
};

inline jmp_buf scheduler;
inline std::vector<Fiber> fibers;
inline std::unique_ptr<char[]> stacks;
inline size_t stack_count = 0;
inline Fiber* current = nullptr;
inline std::function<void()> body;
inline std::string error;
inline std::vector<std::pair<char*, size_t>> shared;  // the __shared__ statics, set by the caller
inline char signal_stack[256 * 1024];

// The fiber in `current` gives the CPU back to the scheduler until it resumes it.
inline void park() {
    if (!_setjmp(current->where)) _longjmp(scheduler, 1);
}

// Abandons the fiber in `current` (its thread stopped the launch): back to the scheduler, for good.
[[noreturn]] inline void abandon() {
    _longjmp(scheduler, 1);
}

inline void syncthreads(int line) {
    current->state = AT_BARRIER;
    current->line = line;
    park();
}

[[noreturn]] inline void stop(const std::string& reason);

// A full-warp shuffle: lane l of the warp gets the value of lane l + delta (down; its own where that
// is past lane 31) or of lane l ^ delta (xor). See the header comment.
template <typename V>
V shuffle(unsigned mask, V value, int delta, bool exclusive_or, int line) {
    static_assert(sizeof(V) <= 8 && std::is_trivially_copyable_v<V>, "a shuffle moves up to 8 bytes");
    const unsigned count = blockDim.x * blockDim.y * blockDim.z;
    const unsigned t = static_cast<unsigned>(current - fibers.data());
    const unsigned lane = t % 32;
    if (mask != 0xffffffffu) stop("warp shuffle with mask " + std::to_string(mask) + ": only full warps are supported");
    if (count - (t - lane) < 32) stop("warp shuffle in a warp of fewer than 32 lanes (block of " +
                                      std::to_string(count) + " threads)");
    if (delta < 0 || delta > 31) stop("warp shuffle by " + std::to_string(delta) + " lanes");
    const unsigned source = exclusive_or ? (lane ^ delta) : (lane + delta < 32 ? lane + delta : lane);
    std::memcpy(current->sent, &value, sizeof(V));
    current->partner = static_cast<int>(t - lane + source);
    current->state = AT_SHUFFLE;
    current->line = line;
    park();
    V out;
    std::memcpy(&out, current->received, sizeof(V));
    return out;
}

inline void fiber_main() {
    for (;;) {  // a thread of `body` each time the scheduler resumes it after a DONE
        body();
        if (!current->copies.empty())
            stop("the thread ended with " + std::to_string(current->copies.size()) +
                 " asynchronous copies it never waited for");
        current->state = DONE;
        park();
    }
}

inline std::string str(const dim3& d) {
    return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

// Stops the launch with `reason`, naming the thread and block in `current`.
[[noreturn]] inline void stop(const std::string& reason) {
    error = reason + " (thread " + str(threadIdx) + " of block " + str(blockIdx) + ")";
    abandon();  // and the block; the launch reports the error
}

// Stops the launch: the thread in `current` accessed element `index` of a buffer of `size` elements,
// the kernel's argument `argument`.
[[noreturn]] inline void out_of_range(int argument, long long index, long long size) {
    error = "out-of-range access by thread " + str(threadIdx) + " of block " + str(blockIdx) + ": index " +
            std::to_string(index) + " of argument " + std::to_string(argument) + ", a buffer of " +
            std::to_string(size) + " elements";
    abandon();  // and the block; the launch reports the error
}

// What the caller passes for a pointer parameter: the buffer's address and its number of elements.
struct Buffer {
    void* data;
    long long size;
};

// A pointer into global memory, checked at every access against the buffer of the kernel argument it
// comes from (`size` elements from `base`, argument number `argument`); one made from a plain `T*`
// (shared memory) has no buffer and is not checked. Kernels use it as they use a `T*`: p[i], *p, p + k.
template <typename T>
struct global {
    using element = T;
    T* base = nullptr;
    long long offset = 0;  // where it points, in elements from base
    long long size = -1;   // -1: not checked
    int argument = -1;

    global() = default;
    global(T* pointer) : base(pointer) {}
    global(const Buffer& buffer, int index)
        : base(static_cast<T*>(buffer.data)), size(buffer.size), argument(index) {}
    template <typename U>
        requires std::is_convertible_v<U*, T*>
    global(const global<U>& other)
        : base(other.base), offset(other.offset), size(other.size), argument(other.argument) {}

    T& operator[](long long i) const { return at(offset + i); }
    T& operator*() const { return at(offset); }
    global operator+(long long k) const {
        global moved = *this;
        moved.offset += k;
        return moved;
    }

    T& at(long long index) const {
        if (size >= 0 && (index < 0 || index >= size)) out_of_range(argument, index, size);
        return base[index];
    }
    explicit operator unsigned long long() const { return reinterpret_cast<unsigned long long>(base + offset); }
};

// `reinterpret_cast<V*>(p)` of a global<T> p (the source rewrite spells it vector_cast<V>(p)): V is a
// vector of T, and each access checks the whole vector against p's buffer, and its alignment.
template <typename V, typename T>
struct vector {
    static constexpr long long WIDTH = sizeof(V) / sizeof(T);
    global<T> pointer;

    V& operator[](long long i) const {
        const long long first = pointer.offset + i * WIDTH;
        if (pointer.size >= 0 && (first < 0 || first + WIDTH > pointer.size))
            out_of_range(pointer.argument, first < 0 ? first : first + WIDTH - 1, pointer.size);
        T* address = pointer.base + first;
        if (reinterpret_cast<unsigned long long>(address) % alignof(V) != 0)
            stop("misaligned " + std::to_string(sizeof(V)) + "-byte access at element " + std::to_string(first) +
                 " of argument " + std::to_string(pointer.argument));
        return *reinterpret_cast<V*>(address);
    }
    V& operator*() const { return (*this)[0]; }
    vector operator+(long long k) const { return {pointer + k * WIDTH}; }
};

template <typename V, typename T>
vector<V, T> vector_cast(const global<T>& pointer) {
    static_assert(sizeof(V) % sizeof(T) == 0 && (std::is_const_v<V> || !std::is_const_v<T>), "not a vector of T");
    return {pointer};
}

template <typename A>
struct is_global : std::false_type {};
template <typename T>
struct is_global<global<T>> : std::true_type {};

// An asynchronous copy of `size` bytes (4, 8 or 16, both addresses aligned to it), of which the last `zfill`
// are zeros, from global memory at `from` to shared memory at `to`: checked now, landed at the wait.
template <typename D, typename S>
void memcpy_async(const global<D>& to, const global<S>& from, size_t size, size_t zfill) {
    if (size != 4 && size != 8 && size != 16) stop("asynchronous copy of " + std::to_string(size) + " bytes");
    if (zfill > size || (size - zfill) % sizeof(S) != 0)
        stop("asynchronous copy of " + std::to_string(size) + " bytes with " + std::to_string(zfill) + " zero-filled");
    const auto target = reinterpret_cast<unsigned long long>(to.base + to.offset);
    const auto source = reinterpret_cast<unsigned long long>(from.base + from.offset);
    if (target % size != 0 || (size > zfill && source % size != 0))
        stop("misaligned " + std::to_string(size) + "-byte asynchronous copy");
    const long long count = static_cast<long long>((size - zfill) / sizeof(S));
    if (count > 0 && from.size >= 0 && (from.offset < 0 || from.offset + count > from.size))
        out_of_range(from.argument, from.offset < 0 ? from.offset : from.offset + count - 1, from.size);
    current->copies.push_back({reinterpret_cast<char*>(target), reinterpret_cast<const char*>(source), size - zfill,
                               zfill, 0});
}

inline void commit() {
    ++current->committed;
    for (Copy& copy : current->copies)
        if (copy.group == 0) copy.group = current->committed;
}

// Lands every copy of this thread's committed groups but the `prior` most recent.
inline void wait_prior(size_t prior) {
    std::vector<Copy> pending;
    for (const Copy& copy : current->copies) {
        if (copy.group != 0 && copy.group + static_cast<long long>(prior) <= current->committed) {
            std::memcpy(copy.to, copy.from, copy.bytes);
            std::memset(copy.to + copy.bytes, 0, copy.zeros);
        } else {
            pending.push_back(copy);
        }
    }
    current->copies.swap(pending);
}

inline void on_fault(int signal, siginfo_t* info, void*) {
    if (current == nullptr) {  // not in a kernel: the harness itself faulted, so crash as usual
        std::signal(signal, SIG_DFL);
        return;
    }
    char where[64];
    std::snprintf(where, sizeof where, "%p", info->si_addr);
    error = "invalid memory access at " + std::string(where) + " by thread " + str(threadIdx) +
            " of block " + str(blockIdx);
    abandon();  // and the block (SA_NODEFER: leaving the handler so unblocks nothing); the launch reports it
}

// Once no fiber can run: every warp whose lanes all wait at the same shuffle takes its values and goes
// on (true if any did). A warp with some lanes at a shuffle and others not sets `error`.
inline bool release_shuffles(unsigned count) {
    bool released = false;
    for (unsigned first = 0; first < count; first += 32) {
        const unsigned last = first + 32 < count ? first + 32 : count;
        unsigned waiting = 0;
        for (unsigned t = first; t < last; ++t) waiting += fibers[t].state == AT_SHUFFLE;
        if (waiting == 0) continue;
        const Fiber* at = &fibers[first];
        while (at->state != AT_SHUFFLE) ++at;
        for (unsigned t = first; t < last; ++t) {
            const Fiber& f = fibers[t];
            if (f.state != AT_SHUFFLE || f.line != at->line) {
                error = "divergent warp shuffle in block " + str(blockIdx) + ": lane " + std::to_string(t % 32) +
                        " of warp " + std::to_string(first / 32) + " " +
                        (f.state == DONE ? std::string("finished") : "waits at line " + std::to_string(f.line)) +
                        " while others wait at the shuffle of line " + std::to_string(at->line);
                return false;
            }
        }
        for (unsigned t = first; t < last; ++t) std::memcpy(fibers[t].received, fibers[fibers[t].partner].sent, 8);
        for (unsigned t = first; t < last; ++t) fibers[t].state = READY;
        released = true;
    }
    return released;
}

// Runs fiber `f` until it parks or is abandoned: where it parked, or, made anew on its stack, from the start.
inline void resume(Fiber& f) {
    if (_setjmp(scheduler)) return;
    if (f.started) _longjmp(f.where, 1);
    f.started = true;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = stacks.get() + (size_t)(&f - fibers.data()) * STACK_BYTES;
    f.context.uc_stack.ss_size = STACK_BYTES;
    f.context.uc_link = nullptr;  // fiber_main never returns
    makecontext(&f.context, fiber_main, 0);
    setcontext(&f.context);
}

// Runs one block; false (with `error` set) on a fault, a divergent barrier or a divergent shuffle.
inline bool run_block() {
    for (auto [bytes, size] : shared) std::memset(bytes, 0xFF, size);
    const unsigned count = blockDim.x * blockDim.y * blockDim.z;
    for (unsigned t = 0; t < count; ++t) {
        Fiber& f = fibers[t];
        f.index = {t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
        f.state = READY;
        f.copies.clear();
        f.committed = 0;
    }
    for (;;) {
        for (unsigned t = 0; t < count; ++t) {
            if (fibers[t].state != READY) continue;
            current = &fibers[t];
            threadIdx = current->index;
            resume(*current);
            current = nullptr;
            if (!error.empty()) return false;
        }
        if (release_shuffles(count)) continue;
        if (!error.empty()) return false;
        unsigned done = 0, waiting = 0;
        int line = 0;
        for (unsigned t = 0; t < count; ++t) {
            const Fiber& f = fibers[t];
            if (f.state == DONE) {
                ++done;
            } else if (waiting++ == 0) {
                line = f.line;
            } else if (f.line != line) {
                error = "divergent __syncthreads() in block " + str(blockIdx) + ": thread " +
                        str(f.index) + " waits at line " + std::to_string(f.line) +
                        " while others wait at line " + std::to_string(line);
                return false;
            }
        }
        if (done == count) return true;
        if (done > 0) {
            error = "divergent __syncthreads() in block " + str(blockIdx) + ": " +
                    std::to_string(done) + " threads finished while " + std::to_string(waiting) +
                    " wait at line " + std::to_string(line);
            return false;
        }
        for (Fiber& f : fibers) f.state = READY;
    }
}

inline int launch(const unsigned* grid, const unsigned* block, std::function<void()> kernel) {
    error.clear();
    const unsigned count = block[0] * block[1] * block[2];
    if (count == 0 || count > 1024 || grid[0] * grid[1] * grid[2] == 0) {
        error = "invalid launch: block " + std::to_string(count) + " threads, grid " +
                std::to_string(grid[0]) + " x " + std::to_string(grid[1]) + " x " + std::to_string(grid[2]);
        return 1;
    }
    gridDim = {grid[0], grid[1], grid[2]};
    blockDim = {block[0], block[1], block[2]};
    fibers.resize(count);
    if (stack_count < count) {
        stacks.reset(new char[(size_t)count * STACK_BYTES]);
        stack_count = count;
        for (Fiber& f : fibers) f.started = false;  // their stacks are gone
    }
    body = std::move(kernel);

    stack_t alternate{}, old_alternate;
    alternate.ss_sp = signal_stack;
    alternate.ss_size = sizeof signal_stack;
    struct sigaction action {}, old_segv, old_bus;
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaltstack(&alternate, &old_alternate);
    sigaction(SIGSEGV, &action, &old_segv);
    sigaction(SIGBUS, &action, &old_bus);

    bool ok = true;
    for (unsigned z = 0; ok && z < grid[2]; ++z)
        for (unsigned y = 0; ok && y < grid[1]; ++y)
            for (unsigned x = 0; ok && x < grid[0]; ++x) {
                blockIdx = {x, y, z};
                ok = run_block();
            }

    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
    sigaltstack(&old_alternate, nullptr);
    current = nullptr;
    if (!ok)
        for (Fiber& f : fibers) f.started = false;  // some were abandoned mid-thread: made anew next time
    return ok ? 0 : 1;
}

// Kernel arguments arrive as in cuLaunchKernel: args[i] points to the value of parameter i (a Buffer for
// a pointer parameter).
template <typename A>
A unpack(void* arg, int index) {
    if constexpr (is_global<A>::value) {
        return A(*static_cast<const Buffer*>(arg), index);
    } else {
        return *static_cast<A*>(arg);
    }
}

template <typename... Args, size_t... I>
int launch_packed(void (*kernel)(Args...), const unsigned* grid, const unsigned* block, void** args,
                  std::index_sequence<I...>) {
    std::tuple<Args...> values{unpack<Args>(args[I], static_cast<int>(I))...};
    return launch(grid, block, [kernel, values] { std::apply(kernel, values); });
}

template <typename... Args>
int launch_packed(void (*kernel)(Args...), const unsigned* grid, const unsigned* block, void** args) {
    return launch_packed(kernel, grid, block, args, std::index_sequence_for<Args...>{});
}

// The parameter types as one letter each, so the caller can check what it packs:
// f/d float/double, i/l int/long long, F/D float*/double* (const or not).
template <typename T>
constexpr char type_code() {
    if constexpr (is_global<T>::value) {
        using U = std::remove_cv_t<typename T::element>;
        static_assert(std::is_same_v<U, float> || std::is_same_v<U, double>, "unsupported pointer");
        return std::is_same_v<U, float> ? 'F' : 'D';
    } else {
        using U = std::remove_cv_t<T>;
        static_assert(std::is_same_v<U, float> || std::is_same_v<U, double> || std::is_same_v<U, int> ||
                          std::is_same_v<U, long long>,
                      "unsupported kernel parameter type");
        if constexpr (std::is_same_v<U, float>) return 'f';
        if constexpr (std::is_same_v<U, double>) return 'd';
        if constexpr (std::is_same_v<U, int>) return 'i';
        return 'l';
    }
}

template <typename... Args>
const char* signature(void (*)(Args...)) {
    static const char codes[] = {type_code<Args>()..., '\0'};
    return codes;
}

}  // namespace cuda_cpu

template <typename D, typename S>
void __pipeline_memcpy_async(cuda_cpu::global<D> to, cuda_cpu::global<S> from, size_t size_and_align,
                             size_t zfill = 0) {
    cuda_cpu::memcpy_async(to, from, size_and_align, zfill);
}
inline void __pipeline_commit() { cuda_cpu::commit(); }
inline void __pipeline_wait_prior(size_t prior) { cuda_cpu::wait_prior(prior); }

#define CUDA_CPU_API extern "C" __attribute__((visibility("default")))

CUDA_CPU_API const char* cuda_cpu_error() { return cuda_cpu::error.c_str(); }

// Registers the __shared__ statics (address and size of each) to fill with NaN bytes before each
// block; the caller finds them in the symbol table (GCC drops section attributes on template statics).
CUDA_CPU_API void cuda_cpu_set_shared(char** bytes, size_t* sizes, int count) {
    cuda_cpu::shared.clear();
    for (int i = 0; i < count; ++i) cuda_cpu::shared.emplace_back(bytes[i], sizes[i]);
}

#define CUDA_CPU_EXPORT(name)                                                                     \
    CUDA_CPU_API int cuda_cpu_##name(const unsigned* grid, const unsigned* block, void** args) {  \
        return cuda_cpu::launch_packed(name, grid, block, args);                                  \
    }                                                                                             \
    CUDA_CPU_API const char* cuda_cpu_signature_##name() { return cuda_cpu::signature(name); }
