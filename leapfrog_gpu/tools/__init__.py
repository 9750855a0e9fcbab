"""Tools: the commands and their helpers, built on the library.

``train``: ``leapfrog-train`` and what it is built of (options, training loops, data, checkpoints, metrics);
``bench``: ``leapfrog-bench`` and its measurements, report and plot; what both share: the schedules of each network
by name (``schedules``), the stream timeline (``timeline``) and the command-line helpers (``cli``). The console
scripts start here (``leapfrog_train``, ``leapfrog_bench``). Tools may import the library and the backends; nothing
in the package imports a tool but ``python -m leapfrog_gpu``.
"""

import importlib
import os
import sys
import time

CLOSED_PIPE = 141
"""The exit status of a command whose stdout was closed under it (``leapfrog-train | head -3``): 128 + SIGPIPE,
as the shell reports ``cat`` or ``yes`` stopped that way; the run stops at the line it could not write."""
CLOSED_PIPE_STATUS = (CLOSED_PIPE,
                      "stdout closed (| head): stopped at the line it could not write, without a traceback")
"""``CLOSED_PIPE`` as each command's ``--help`` lists it."""
PEERS_INTERRUPTED = 10.0
"""Seconds a rank other than 0 waits, once Ctrl-C has interrupted it under mpiexec, before it says so and ends the
job: Ctrl-C at the terminal reaches every rank, and rank 0's line and ``MPI_Abort`` end the job first."""


def leapfrog_train():
    """The ``leapfrog-train`` command (``leapfrog_gpu.tools.train.command``): its exit status."""
    return _run("train", "leapfrog-train")


def leapfrog_bench():
    """The ``leapfrog-bench`` command (``leapfrog_gpu.tools.bench.command``): its exit status."""
    return _run("bench", "leapfrog-bench")


def _run(package, prog):
    """The ``main()`` of ``package``'s command, imported behind a Ctrl-C guard and run by ``guarded``."""
    try:
        main = importlib.import_module(f"{__name__}.{package}.command").main
    except KeyboardInterrupt:
        return _interrupted(prog, "interrupted while starting", "; nothing was run")
    return guarded(main, prog)


def guarded(main, prog):
    """The exit status of ``main()``, the command ``prog``, run behind a Ctrl-C guard (one line, not a traceback, and
    exit status 130), and ``CLOSED_PIPE`` without a traceback once stdout's reader has gone, or one line and exit
    status 5 once stdout cannot be written (a full disk); stdout then goes to devnull, so that Python's own flush at
    exit does not raise again (the ``signal`` module's docs' advice). A file the command could not write and did not
    say so itself (``cli.Unwritten``) is one line too, exit status 5."""
    stdout = sys.stdout = None if sys.stdout is None else _Stdout(sys.stdout)
    try:
        status = main()
        if stdout is not None:  # None: started with stdout closed (>&-), its lines dropped as print drops them
            stdout.flush()
        return status
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE
    except OSError as error:  # stdout's own write failing (a full disk: > /dev/full) is one line, exit status 5
        if stdout is None or stdout.failed is not error:
            raise
        from .cli import UNWRITTEN

        os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
        print(f"{prog}: error: cannot write to stdout ({error.strerror or error})", file=sys.stderr)
        return UNWRITTEN
    except KeyboardInterrupt:  # where the command does not catch it itself (importing torch, or MPI, say)
        return _interrupted(prog, "interrupted (SIGINT)")
    except Exception as error:  # a file the command could not write, where it does not say so itself: one line
        from .cli import UNWRITTEN, Unwritten

        if not isinstance(error, Unwritten):
            raise
        print(f"{prog}: error: {error}", file=sys.stderr)
        return UNWRITTEN
    finally:
        if stdout is not None:
            sys.stdout = stdout.stream


def _interrupted(prog, what, alone=""):
    """Exit status 130 once Ctrl-C stopped the command before it set MPI up, said in one line (``what``, and ``alone``
    where no other rank ran). Under a launcher of several processes the rank still sets MPI up, in which the others
    wait for it (one that left would leave them waiting there for ever), then ends every rank as the command does:
    rank 0 says so and aborts the job; another rank waits ``PEERS_INTERRUPTED`` for rank 0 to, then does itself."""
    from ..parallel.launcher import launcher_size  # the environment's word: NumPy may be half imported

    if launcher_size() > 1:
        try:
            from ..parallel import comm as parallel

            comm = parallel.world(prog)
        except (Exception, KeyboardInterrupt):  # no MPI to end the others by (NumPy cut off, no mpi4py); Ctrl-C
            comm = None
        if comm is not None:
            if comm.rank > 0:
                time.sleep(PEERS_INTERRUPTED)
            print(f"{prog}: {what}{alone}" if comm.rank == 0 else
                  f"{prog}: error: rank {comm.rank} of {comm.size}: {what}; stopping every rank", file=sys.stderr)
            comm.abort(130, quiet=True)
    print(f"{prog}: {what}{alone}", file=sys.stderr)
    return 130


class _Stdout:
    """``sys.stdout`` while a command runs, which marks an error of its own writes (``failed``): a full disk under
    stdout told from any other OSError."""

    def __init__(self, stream):
        self.stream, self.failed = stream, None

    def __getattr__(self, name):
        return getattr(self.stream, name)

    def write(self, text):
        return self._marked(self.stream.write, text)

    def flush(self):
        return self._marked(self.stream.flush)

    def _marked(self, call, *args):
        try:
            return call(*args)
        except OSError as error:
            self.failed = error
            raise
