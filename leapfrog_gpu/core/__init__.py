"""The core the three networks share: the network base (backend, parameters, step controls, handed-out copies;
``feedforward``, ``gradients``, ``train_step`` and ``sgd_step`` written once; the optimizers, ``optimizers``),
the pass of one batch shape (``plan``: streams, events, buffers; the pass and the step over what each
network's pass gives), the backward driver (``driver``: the chain's units handed off to k worker streams
through ``handoff``, the join), the schedules every network takes (``Sequential``, ``Leapfrog``) and the
calibration of ``Leapfrog("auto")`` (``calibrate``), graph mode (a step captured once and launched), Ctrl-C
held off while a step is enqueued (``interrupts``), the convergence test of the forward solvers
(``convergence``), the triangular solvers the schedules lower onto (``triangular``: recursive doubling, cyclic
reduction, block Jacobi, their counters and memory check), the checks and names of what a network is given, the
role of a launch by its name (``launches``), and what the PyTorch bridges share (``torch_io``). It imports the
backends and the data-parallel transport (``parallel``), and no model package.
"""
