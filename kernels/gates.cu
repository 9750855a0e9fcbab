// The elementwise parts of one time step t (0-based) of a gated recurrent layer of width N = n, forward and
// backward: PyTorch's GRU (gates r, z, n) and LSTM (gates i, f, g, o), as leapfrog_gpu/rnn/cells.py writes
// them. A sequence (rows, tau, B) is row-major and contiguous: element (row, t, s) sits at
// (row * tau + t) * B + s; a step's columns (rows, B) at row * B + s. The state before the first step (h^0,
// c^0) is zero and is not read.
//
// Launch shape (every kernel here): 1-D grid-stride loop over the n*B units of the step (for_each_unit), block =
// GATES_BLOCK threads (a compile-time constant: the index arithmetic uses it, so a launch must use that block),
// grid = min(ceil(n*B / block), GATES_MAX_GRID), from leapfrog_gpu/backends/launch.py (gates_launch). Each thread
// owns one (unit j, sample s) and reads and writes every gate row of it. Bytes are given in elements, for the
// step: profiling/kernel_traffic.py holds the same counts (n rows, batch B).

#ifndef GATES_BLOCK
#error "GATES_BLOCK must be defined (-DGATES_BLOCK=..., leapfrog_gpu/backends/launch.py)"
#endif

template <typename T>
__device__ T gate_sigmoid(T x) {
    return T(1) / (T(1) + exp(-x));
}

// The unit (j, s) a thread owns at step t: j; idx, its element of a step's columns (n, B); row, its element of a
// (G*n, tau, B) sequence's first gate (row j at step t), the next gate's `gate` further on (n*tau*B); before,
// row's element at step t - 1 (read only where t > 0).
struct GateUnit {
    long long j, idx, row, gate, before;
};

// Calls step(unit) for every unit (j, s) of the n*B of step t that this thread owns: the grid-stride loop of every
// kernel here.
template <typename Step>
__device__ void for_each_unit(int n, int t, int tau, int batch, Step step) {
    const long long size = (long long)n * batch, gate = size * tau;
    for (long long idx = blockIdx.x * (long long)GATES_BLOCK + threadIdx.x; idx < size;
         idx += (long long)gridDim.x * GATES_BLOCK) {
        const long long j = idx / batch, s = idx - j * batch, row = (j * tau + t) * batch + s;
        step(GateUnit{j, idx, row, gate, row - batch});
    }
}

// GRU forward: r = sig(z_r + uh_r), u = sig(z_z + uh_z), hn = uh_n + b_hn, n = tanh(z_n + r hn),
// h^t = (h^{t-1} - n) u + n; gates (r, u, n) and hn kept for the backward pass. z (3n, tau, B) holds
// w x + b, uh (3n, B) is u^l h^{t-1}.
// Moves 3*n*B (z) + 3*n*B (uh) + n (b_hn) + n*B (h^{t-1}, none at t = 0) reads + 3*n*B (gates) + n*B (hn)
// + n*B (h^t) writes.
template <typename T>
__device__ void gru_forward(const T* z, T* gates, T* hn, T* h, const T* uh, const T* b_hn, int n, int t, int tau,
                            int batch) {
    const long long size = (long long)n * batch;
    for_each_unit(n, t, tau, batch, [&](const GateUnit& unit) {
        const long long rr = unit.row, ru = rr + unit.gate, rn = ru + unit.gate;
        const T r = gate_sigmoid(z[rr] + uh[unit.idx]);
        const T u = gate_sigmoid(z[ru] + uh[unit.idx + size]);
        const T hidden = uh[unit.idx + 2 * size] + b_hn[unit.j];
        const T candidate = tanh(z[rn] + r * hidden);
        const T previous = t ? h[unit.before] : T(0);
        gates[rr] = r;
        gates[ru] = u;
        gates[rn] = candidate;
        hn[rr] = hidden;
        h[rr] = (previous - candidate) * u + candidate;
    });
}

// GRU backward from dh = delta_h^t (complete): delta_n = dh (1 - u)(1 - n^2), delta_z = dh (h^{t-1} - n) u (1 - u),
// delta_r = delta_n hn r (1 - r) into delta (3n, tau, B); delta_u = (delta_r, delta_z, r delta_n); and at t > 0
// delta_h^{t-1} += u dh (the recurrent product (u^l)^T delta_u is added after, by BLAS).
// Moves n*B (dh) + 3*n*B (gates) + n*B (hn) + n*B (h^{t-1}) + n*B (delta_h^{t-1}) reads + 3*n*B (delta)
// + 3*n*B (delta_u) + n*B (delta_h^{t-1}) writes; at t = 0, 2*n*B reads and n*B writes fewer.
template <typename T>
__device__ void gru_backward(T* delta, T* delta_u, T* delta_h, const T* gates, const T* hn, const T* h, int n,
                             int t, int tau, int batch) {
    for_each_unit(n, t, tau, batch, [&](const GateUnit& unit) {
        const long long rr = unit.row, ru = rr + unit.gate, rn = ru + unit.gate;
        const T dh = delta_h[rr], r = gates[rr], u = gates[ru], candidate = gates[rn];
        const T previous = t ? h[unit.before] : T(0);
        const T dn = dh * (T(1) - u) * (T(1) - candidate * candidate);
        const T dz = dh * (previous - candidate) * u * (T(1) - u);
        const T dr = dn * hn[rr] * r * (T(1) - r);
        delta[rr] = dr;
        delta[ru] = dz;
        delta[rn] = dn;
        delta_u[rr] = dr;
        delta_u[ru] = dz;
        delta_u[rn] = dn * r;
        if (t) {
            delta_h[unit.before] += u * dh;
        }
    });
}

// LSTM forward: i, f, o = sig(z_i, z_f, z_o), g = tanh(z_g), c^t = f c^{t-1} + i g, h^t = o tanh(c^t); z (4n, tau,
// B) holds w x + b + u^l h^{t-1}.
// Moves 4*n*B (z) + n*B (c^{t-1}, none at t = 0) reads + 4*n*B (gates) + n*B (c^t) + n*B (h^t) writes.
template <typename T>
__device__ void lstm_forward(const T* z, T* gates, T* c, T* h, int n, int t, int tau, int batch) {
    for_each_unit(n, t, tau, batch, [&](const GateUnit& unit) {
        const long long ri = unit.row, rf = ri + unit.gate, rg = rf + unit.gate, ro = rg + unit.gate;
        const T i = gate_sigmoid(z[ri]), f = gate_sigmoid(z[rf]), g = tanh(z[rg]), o = gate_sigmoid(z[ro]);
        const T previous = t ? c[unit.before] : T(0);
        const T cell = f * previous + i * g;
        gates[ri] = i;
        gates[rf] = f;
        gates[rg] = g;
        gates[ro] = o;
        c[ri] = cell;
        h[ri] = tanh(cell) * o;
    });
}

// LSTM backward from dh = delta_h^t (complete) and dc (n, B), the adjoint of c^t through c^{t+1}:
// dc += dh o (1 - tanh^2 c^t), delta_i = dc g i (1 - i), delta_f = dc c^{t-1} f (1 - f), delta_g = dc i (1 - g^2),
// delta_o = dh tanh(c^t) o (1 - o) into delta (4n, tau, B); then dc *= f, the adjoint of c^{t-1} through c^t.
// Moves n*B (dh) + 4*n*B (gates) + n*B (c^t) + n*B (c^{t-1}, none at t = 0) + n*B (dc) reads + 4*n*B (delta)
// + n*B (dc) writes.
template <typename T>
__device__ void lstm_backward(T* delta, T* dc, const T* delta_h, const T* gates, const T* c, int n, int t, int tau,
                              int batch) {
    for_each_unit(n, t, tau, batch, [&](const GateUnit& unit) {
        const long long ri = unit.row, rf = ri + unit.gate, rg = rf + unit.gate, ro = rg + unit.gate;
        const T dh = delta_h[ri], i = gates[ri], f = gates[rf], g = gates[rg], o = gates[ro];
        const T tanh_c = tanh(c[ri]);
        const T previous = t ? c[unit.before] : T(0);
        const T carried = dc[unit.idx] + dh * o * (T(1) - tanh_c * tanh_c);
        delta[ri] = carried * g * i * (T(1) - i);
        delta[rf] = carried * previous * f * (T(1) - f);
        delta[rg] = carried * i * (T(1) - g * g);
        delta[ro] = dh * tanh_c * o * (T(1) - o);
        dc[unit.idx] = carried * f;
    });
}

#define LEAPFROG_GATES(T, SUFFIX)                                                                                    \
    extern "C" __global__ void gru_forward_##SUFFIX(const T* z, T* gates, T* hn, T* h, const T* uh, const T* b_hn,   \
                                                    int n, int t, int tau, int batch) {                              \
        gru_forward<T>(z, gates, hn, h, uh, b_hn, n, t, tau, batch);                                                 \
    }                                                                                                                \
    extern "C" __global__ void gru_backward_##SUFFIX(T* delta, T* delta_u, T* delta_h, const T* gates, const T* hn,  \
                                                     const T* h, int n, int t, int tau, int batch) {                 \
        gru_backward<T>(delta, delta_u, delta_h, gates, hn, h, n, t, tau, batch);                                    \
    }                                                                                                                \
    extern "C" __global__ void lstm_forward_##SUFFIX(const T* z, T* gates, T* c, T* h, int n, int t, int tau,        \
                                                     int batch) {                                                    \
        lstm_forward<T>(z, gates, c, h, n, t, tau, batch);                                                           \
    }                                                                                                                \
    extern "C" __global__ void lstm_backward_##SUFFIX(T* delta, T* dc, const T* delta_h, const T* gates, const T* c, \
                                                      int n, int t, int tau, int batch) {                            \
        lstm_backward<T>(delta, dc, delta_h, gates, c, n, t, tau, batch);                                            \
    }

LEAPFROG_GATES(float, f32)
LEAPFROG_GATES(double, f64)
