"""The BLAS threads of the process while backends that set them are open.

BLAS threads are process-wide (threadpoolctl sets them in every loaded BLAS library), but backends open
and close in any order: two networks that each own a backend, a backend closed while another made
later is still open. ``hold(threads)`` sets the threads and returns a ticket; ``release(ticket)`` gives
the setting back. The newest open holder's setting is the one in force; when the last holder is released,
the BLAS libraries get back the threads they had before the first.
"""

import threading

import threadpoolctl

_lock = threading.Lock()
_held = {}  # ticket: threads, in the order held (dicts keep it)
_original = None  # the threadpoolctl limiter of the first holder, which knows the threads from before
_tickets = iter(range(1, 2**63))


def hold(threads):
    """Set the BLAS libraries to ``threads`` threads until ``release(ticket)``; return the ticket."""
    global _original
    with _lock:
        ticket = next(_tickets)
        _held[ticket] = threads
        limiter = threadpoolctl.threadpool_limits(threads, user_api="blas")
        if _original is None:
            _original = limiter
        return ticket


def release(ticket):
    """Give back what ``hold`` returned ``ticket`` for; a ticket already released is ignored."""
    global _original
    with _lock:
        if _held.pop(ticket, None) is None:
            return
        if _held:
            threadpoolctl.threadpool_limits(list(_held.values())[-1], user_api="blas")
        else:
            _original.restore_original_limits()
            _original = None

