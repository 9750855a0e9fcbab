"""Ctrl-C held off while a step is enqueued: a step interrupted half-way through its launches would leave some
units updated and not others, so ``Network.train_step`` enqueues each step inside ``held()``."""

import contextlib
import signal
import threading


@contextlib.contextmanager
def held():
    """A SIGINT that lands in the block is raised again once the block ends, to the handler in force before it
    (Python's ``KeyboardInterrupt`` by default; an ignored SIGINT stays ignored). Off the main thread, where no
    handler can be set, or where SIGINT's handler was not set from Python, nothing changes."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    landed = []
    signal.signal(signal.SIGINT, lambda signum, frame: landed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if landed:
            signal.raise_signal(signal.SIGINT)  # to the handler in force again, as if it landed now
