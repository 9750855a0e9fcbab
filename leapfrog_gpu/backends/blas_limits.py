"""The BLAS threads of the process while backends that set them are open.

BLAS threads are process-wide (threadpoolctl sets them in every loaded BLAS library), but backends open
and close in any order: two networks that each own a backend, a backend closed while another made
later is still open. ``hold(threads)`` sets the threads and returns a ticket; ``release(ticket)`` gives
the setting back. The holders form a stack: the newest open one's setting is in force; releasing it
brings back what was in force before it was held, and releasing one below it changes nothing now but
hands what it found on to the holder above, so that the threads from before the stack come back when
its last holder is released, in whatever order they are.
"""

import threading

import threadpoolctl

_lock = threading.Lock()
_stack = []  # [ticket, limiter]: the limiter restores what was in force before that ticket's hold
_tickets = iter(range(1, 2**63))


def hold(threads):
    """Set the BLAS libraries to ``threads`` threads until ``release(ticket)``; return the ticket."""
    with _lock:
        ticket = next(_tickets)
        _stack.append([ticket, threadpoolctl.threadpool_limits(threads, user_api="blas")])
        return ticket


def release(ticket):
    """Give back what ``hold`` returned ``ticket`` for; a ticket already released is ignored."""
    with _lock:
        place = next((i for i, (held, _) in enumerate(_stack) if held == ticket), None)
        if place is None:
            return
        _, limiter = _stack.pop(place)
        if place < len(_stack):
            _stack[place][1] = limiter  # the holder above now restores what this one found
        else:
            limiter.restore_original_limits()
