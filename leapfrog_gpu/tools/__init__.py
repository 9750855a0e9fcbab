"""Tools: the commands and their helpers, built on the library.

``leapfrog-train`` (``train``) with its data loaders (``data``), checkpoints (``checkpoint``), metrics
(``metrics``) and profiler windows (``profiling``); ``leapfrog-bench`` (``bench``) with its plot
(``bench_plot``), the memory-traffic model (``traffic``) and the PyTorch anchor (``torch_anchor``); the
stream timeline both draw (``timeline``); and what the commands share (``cli``). Tools may import the
library and the backends; nothing in the package imports a tool but ``python -m leapfrog_gpu``.
"""
