"""A short demo: a few SGD steps under Sequential and Leapfrog(2), and whether they agree to the bit."""

import numpy as np

from leapfrog_gpu import MLP, Leapfrog, Sequential

sizes = [64, 128, 128, 128, 128, 10]
rng = np.random.default_rng(0)
nets = {schedule: MLP(sizes, backend="auto") for schedule in (Sequential(), Leapfrog(2))}
for step in range(20):
    x, y = rng.random((64, 32)), np.eye(10)[:, rng.integers(0, 10, 32)]
    for schedule, net in nets.items():
        net.sgd_step(x, y, 0.5, schedule)
(seq, seq_net), (leap, leap_net) = nets.items()
same = all((a == b).all() for a, b in zip(seq_net.weights + seq_net.biases, leap_net.weights + leap_net.biases))
print(f"{seq_net.backend!r}: 20 SGD steps, {seq} and {leap} parameters bitwise equal: {same}")
for net in nets.values():
    net.close()
