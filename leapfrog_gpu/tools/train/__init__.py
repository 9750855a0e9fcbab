"""``leapfrog-train`` (``command``: the command and its exit statuses), with its options (``options``),
the models it trains and their data (``leapfrog_gpu.datasets``) and networks (``models``), what it adds to the
library's training loop (``loop``: ``core.fitting``), checkpoints (``checkpoint``), its words for the metrics
and the divergence rule (``metrics``) and profiler windows (``profiling``).
"""
