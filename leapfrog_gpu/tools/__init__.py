"""Tools: the commands and their helpers, built on the library.

``train``: ``leapfrog-train`` and what it is built of (options, training loops, data, checkpoints,
metrics); ``bench``: ``leapfrog-bench`` and its measurements, report and plot; what both share: the
stream timeline (``timeline``), every network's schedules by name (``schedules``) and the command-line
helpers (``cli``). The console scripts start here (``leapfrog_train``, ``leapfrog_bench``), which import
their command behind a Ctrl-C guard. Tools may import the library and the backends; nothing in the
package imports a tool but ``python -m leapfrog_gpu``.
"""

import sys


def leapfrog_train():
    """The ``leapfrog-train`` command (``leapfrog_gpu.tools.train.command``): its exit status."""
    try:
        from .train.command import main
    except KeyboardInterrupt:
        return _interrupted_while_starting("leapfrog-train")
    return main()


def leapfrog_bench():
    """The ``leapfrog-bench`` command (``leapfrog_gpu.tools.bench.command``): its exit status."""
    try:
        from .bench.command import main
    except KeyboardInterrupt:
        return _interrupted_while_starting("leapfrog-bench")
    return main()


def _interrupted_while_starting(prog):
    """Ctrl-C while a command imports what it runs on: one line, not a traceback, and exit status 130."""
    print(f"{prog}: interrupted while starting; nothing was run", file=sys.stderr)
    return 130
