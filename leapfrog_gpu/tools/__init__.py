"""Tools: the commands and their helpers, built on the library.

``train``: ``leapfrog-train`` and what it is built of (options, training loops, data, checkpoints,
metrics); ``bench``: ``leapfrog-bench`` and its measurements, report and plot; what both share: the
schedules of each network by name (``schedules``), the stream timeline (``timeline``) and the
command-line helpers (``cli``). The console scripts start here
(``leapfrog_train``, ``leapfrog_bench``), which import their command behind a Ctrl-C guard and end quietly
when their output's reader goes (``| head``). Tools may
import the library and the backends; nothing in the package imports a tool but ``python -m leapfrog_gpu``.
"""

import os
import sys

CLOSED_PIPE = 141
"""The exit status of a command whose stdout was closed under it (``leapfrog-train | head -3``): 128 + SIGPIPE,
as the shell reports ``cat`` or ``yes`` stopped that way; the run stops at the line it could not write."""


def leapfrog_train():
    """The ``leapfrog-train`` command (``leapfrog_gpu.tools.train.command``): its exit status."""
    try:
        from .train.command import main
    except KeyboardInterrupt:
        return _interrupted_while_starting("leapfrog-train")
    return _quiet_on_a_closed_pipe(main)


def leapfrog_bench():
    """The ``leapfrog-bench`` command (``leapfrog_gpu.tools.bench.command``): its exit status."""
    try:
        from .bench.command import main
    except KeyboardInterrupt:
        return _interrupted_while_starting("leapfrog-bench")
    return _quiet_on_a_closed_pipe(main)


def _interrupted_while_starting(prog):
    """Ctrl-C while a command imports what it runs on: one line, not a traceback, and exit status 130."""
    print(f"{prog}: interrupted while starting; nothing was run", file=sys.stderr)
    return 130


def _quiet_on_a_closed_pipe(main):
    """``main()``, or ``CLOSED_PIPE`` without a traceback once stdout's reader has gone; stdout then goes to
    devnull, so that Python's own flush at exit does not raise again (the ``signal`` module's docs' advice)."""
    try:
        status = main()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE
