"""Tools: the commands and their helpers, built on the library.

``leapfrog-train`` (``train``: the command and its exit statuses) with its options (``train_options``),
training loop (``train_loop``), data loaders (``data``), checkpoints (``checkpoint``), metrics
(``metrics``) and profiler windows (``profiling``); ``leapfrog-bench`` (``bench``: the command line) with
its measurements (``bench_measure``), report (``bench_report``), plot (``bench_plot``), data-parallel part
(``bench_parallel``), the memory-traffic model (``traffic``), the PyTorch anchor (``torch_anchor``), the
count of an eager step's calls into CuPy (``call_count``), and the commands of its own of ``--model rnn``
(``bench_rnn``) and ``--model dag`` (``bench_dag``); the stream timeline both draw (``timeline``); and
what the commands share (``cli``). The console scripts start here (``leapfrog_train``, ``leapfrog_bench``),
which import their command behind a Ctrl-C guard. Tools may import the library and the backends; nothing
in the package imports a tool but ``python -m leapfrog_gpu``.
"""

import sys


def leapfrog_train():
    """The ``leapfrog-train`` command (``leapfrog_gpu.tools.train``): its exit status."""
    try:
        from .train import main
    except KeyboardInterrupt:
        return _interrupted_while_starting("leapfrog-train")
    return main()


def leapfrog_bench():
    """The ``leapfrog-bench`` command (``leapfrog_gpu.tools.bench``): its exit status."""
    try:
        from .bench import main
    except KeyboardInterrupt:
        return _interrupted_while_starting("leapfrog-bench")
    return main()


def _interrupted_while_starting(prog):
    """Ctrl-C while a command imports what it runs on: one line, not a traceback, and exit status 130."""
    print(f"{prog}: interrupted while starting; nothing was run", file=sys.stderr)
    return 130
