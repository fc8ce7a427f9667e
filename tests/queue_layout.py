"""What the tests do to faster-fifo's process-shared mutex: take it and keep it (a process that dies holding it), or
read whether it is held (a writer killed inside a put). Where it lives is `sf.supervision.queue_locks`' to know."""

from __future__ import annotations

import ctypes
from functools import cache

import faster_fifo

from sf.supervision.queue_locks import MUTEX_OFFSET, holder, layout_known


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def mutex_address(queue: faster_fifo.Queue) -> int:
    return ctypes.addressof(queue.queue_obj_buffer) + MUTEX_OFFSET


def lock_queue(queue: faster_fifo.Queue) -> bool:
    """Take the queue's mutex (pthread_mutex_lock) and keep it."""
    return _libc().pthread_mutex_lock(ctypes.c_void_p(mutex_address(queue))) == 0


def queue_locked(queue: faster_fifo.Queue) -> bool:
    """Whether someone holds the queue's mutex (its lock word is set); reading it changes nothing."""
    return holder(queue) is not None


def layout_recognised() -> bool:
    """The mutex is where sf reads it: free, it reads unlocked; taken by this thread, locked."""
    queue = faster_fifo.Queue(1024)
    if not layout_known(queue) or queue_locked(queue) or not lock_queue(queue):
        return False
    held = queue_locked(queue)
    _libc().pthread_mutex_unlock(ctypes.c_void_p(mutex_address(queue)))
    return held and not queue_locked(queue)
