"""The BLAS threads of the process while backends that set them are open.

BLAS threads are process-wide (threadpoolctl sets them in every loaded BLAS library), but backends open
and close in any order: two networks that each own a backend, a backend closed while another made
later is still open. ``hold(threads)`` sets the threads and returns a ticket; ``release(ticket)`` gives
the setting back. The holders form a stack: the newest open one's setting is in force; releasing it
brings back what was in force before it was held, and releasing one below it changes nothing now but
hands what it found on to the holder above, so that the threads from before the stack come back when
its last holder is released, in whatever order they are. The holder above keeps what it found too: a library
loaded between the two holds is known to its limiter alone.

``release`` never waits: a finalizer calls it (a network collected unclosed), on any thread, perhaps while
this very thread is inside ``hold``. A ticket released while another call has the stack is taken off by that
call before it lets go. Bringing the threads back is left to the thread that set what comes back (for OpenBLAS
threadpoolctl heeds only the thread that set them, while it lives): a limiter handed up the stack keeps the
thread that made it, and the newest ticket released on another thread comes off at that thread's next ``hold``
or ``release`` (the thread of the oldest limiter it holds), so that the stack comes off in its order.
"""

import itertools
import threading

import threadpoolctl

_lock = threading.Lock()
_stack = []  # [ticket, limiters]: each (limiter, setter) restores, in turn, what was in force before a hold (this
# ticket's, then those below it released meanwhile), as the thread ``setter`` saw it
_released = []  # tickets released and not yet taken off the stack
_tickets = itertools.count(1)
_changes = [0]  # holds and releases taken off so far: what ``changes()`` counts


def hold(threads):
    """Set the BLAS libraries to ``threads`` threads until ``release(ticket)``; return the ticket."""
    with _lock:
        ticket = next(_tickets)
        limiter = threadpoolctl.threadpool_limits(threads, user_api="blas")
        _stack.append([ticket, [(limiter, threading.current_thread())]])
        _changes[0] += 1
    _settle()
    return ticket


def changes():
    """How many times the stack has changed the threads in force (a hold, a release taken off): a caller that
    set the threads itself in between (``host_blas.share``) leaves the stack's setting as it is."""
    return _changes[0]


def release(ticket):
    """Give back what ``hold`` returned ``ticket`` for; a ticket already released is ignored. Never waits."""
    _released.append(ticket)
    _settle()


def _settle():
    """Take off the stack the released tickets this thread may take off, unless another call has the stack;
    again while one released meanwhile waits."""
    while _lock.acquire(blocking=False):
        try:
            for ticket in [ticket for ticket in _released if _ours(ticket)]:
                _released.remove(ticket)
                _take_off(ticket)
        finally:
            _lock.release()
        if not any(map(_ours, _released)):
            return


def _ours(ticket):
    """Whether this thread may take ``ticket`` off: any may, but the newest one's threads come back on the thread
    that set what its oldest limiter brings back (while that thread lives)."""
    if not _stack or _stack[-1][0] != ticket:
        return True
    setter = _stack[-1][1][-1][1]
    return setter is threading.current_thread() or not setter.is_alive()


def _take_off(ticket):
    place = next((i for i, (held, _) in enumerate(_stack) if held == ticket), None)
    if place is None:
        return
    _changes[0] += 1
    _, limiters = _stack.pop(place)
    if place < len(_stack):
        _stack[place][1] += limiters  # the holder above restores what it found, then what this one found
    else:
        for limiter, _ in limiters:
            limiter.restore_original_limits()
