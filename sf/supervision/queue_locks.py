"""A run's queue that a dead process left locked, and how a restart takes it back, only on proof that the holder is
dead.

faster-fifo guards each queue with a process-shared pthread mutex that is not robust: a process killed inside a put
or a get leaves it locked, and every later put or get waits forever (`sf.runner.mailbox`). A run that restarts a
dead component (one in 20-30 kills of a busy rollout worker lands inside a put) must take such a lock back first.
faster-fifo keeps the mutex at a fixed place of the queue's shared header, after the ring's counters (`head`,
`tail`, `size`, `num_elem`); glibc keeps in it a lock word (`__lock`, first 32-bit word) and the thread id of the
holder (`__owner`, third word).

Proof that the holder is dead (`dead_holder`). glibc writes `__owner` only while holding the lock: it sets it after
the lock word is taken and clears it before the lock word is released (a condition wait releases and retakes the
same way). The lock word alone therefore says nothing about who holds the lock (a live thread holds it with owner 0
in those two gaps, and a scan on a busy queue hits them thousands of times an hour), while an owner word that reads
T says that the thread with id T held the lock at the moment of that read. A lock is taken back when all of this
holds, checked in this order:

1. the owner word names T, a thread id of a component process that has ended (`Supervisor.ended_threads`, read
   from /proc/<pid>/task while it ran): owner 0 (a gap) or the id of any other thread is never a proof;
2. no live thread has id T now (/proc/T is absent or a zombie), and then the lock word is still set and the owner
   word still reads T: the thread with id T that holds the lock at this second read is not alive, so it cannot
   release it, nor can anyone else enter, and the critical section is ours to finish;
3. no thread id was given out between the first and the last read that could be T (the kernel's pid cursor,
   /proc/sys/kernel/ns_last_pid, did not pass T; ids are given out cyclically, so T comes back only after every
   other id of the pid space, which takes far longer than the few microseconds `WINDOW_S` allows the reads): a
   thread with a reused id T could otherwise have been born, taken the lock and written T between the checks.

Robust mutexes (PTHREAD_MUTEX_ROBUST, the kernel marks a dead holder's lock and the next locker gets EOWNERDEAD) are
not used: faster-fifo ignores what pthread_mutex_lock returns, so a put or get would carry on over a half-written
ring, unlock without pthread_mutex_consistent, and leave the mutex unrecoverable, every later lock failing at once
while the caller goes on unprotected. Where the header does not look as expected (another faster-fifo, a libc that
lays the mutex out otherwise, no readable pid cursor) nothing is touched, and the restart is refused instead.

What the dead thread was doing under the lock is known from faster-fifo's code: a get pops message by message,
moving `head` only after each copy, so the ring is whole whatever the moment; a put appends a message's 8-byte
length, then its bytes, advancing `tail` and `size` after each, so the ring may end in a length whose bytes never
came. `repair` finishes the critical section in the dead thread's place: it walks the ring from `head`, cuts that
last partial message off, recounts the messages, releases the mutex and wakes whoever waits for it.

A process killed at another moment may leave sleepers that nobody wakes: glibc releases a lock word first and wakes
its sleepers after, so a death in between leaves a waiter for the mutex, which has no deadline, asleep over a free
lock (`wake_sleepers` wakes every sleeper of every queue at each restart; spurious wakes are harmless). One killed
inside pthread_cond_signal, which faster-fifo calls under the mutex, leaves the condition's internal lock taken:
the repair frees it too (`_free_condition`).

A process killed while it waited on a queue leaves its condition variables unusable for the next waiter (glibc keeps
a reference for each sleeper, which nobody drops); a restart therefore gives the replacement a fresh queue. Once no
process uses the old one any more, `renew` initializes its mutex, conditions and ring again, so that the spares never
run out in a run of days.
"""

from __future__ import annotations

import ctypes
import platform
import time

import numpy as np

MUTEX_OFFSET = 56  # of the mutex in faster-fifo's queue header: after six size_t counters and the mutex attributes
HEAD, TAIL, SIZE, COUNT = 2, 3, 4, 5  # the ring's counters, 64-bit words of the header
MUTEX_ATTR, COND_ATTR, WAITERS, CONDITIONS = 48, 96, 100, (112, 160)  # the rest of the header, byte offsets
_PSHARED_KIND = 128  # PTHREAD_MUTEX_PSHARED_BIT in `__kind`, the fifth word of the mutex
_LOCK, _OWNER, _USERS = MUTEX_OFFSET // 4, MUTEX_OFFSET // 4 + 2, MUTEX_OFFSET // 4 + 3  # 32-bit words
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAKE = 1
_COND_LOCK = 32  # `__g1_orig_size` in glibc's pthread_cond_t: its two low bits are the condition's internal lock
CONDITION_HELD_S = 0.1
# in glibc's pthread_cond_t (2.25 and later), byte offsets of the words sleepers wait on: `__g_refs[2]`,
# `__g1_orig_size` (the internal lock) and `__g_signals[2]`
_FUTEX_WORDS = (16, 20, 32, 40, 44)
WINDOW_S = 0.002  # the longest the reads of one proof may take (ids come back only after ~30,000 others)
PROOF_TRIES = 5


def _words(queue) -> np.ndarray:
    return np.frombuffer(queue.queue_obj_buffer, dtype=np.int32)


def layout_known(queue) -> bool:
    """The header holds a process-shared mutex where this module reads it (and the futex call is known here)."""
    words = _words(queue)
    return (
        _SYS_FUTEX is not None
        and len(words) * 4 >= MUTEX_OFFSET + 20
        and words[(MUTEX_OFFSET + 16) // 4] & _PSHARED_KIND != 0
    )


def holder(queue) -> int | None:
    """The owner word of a held lock (0 in the gaps where a live thread holds it unnamed), or None when it is free:
    what a test reads; no proof of anything (`dead_holder`)."""
    words = _words(queue)
    if words[MUTEX_OFFSET // 4] == 0:
        return None
    return int(words[(MUTEX_OFFSET + 8) // 4])


def dead_holders(queues: dict[str, object], ended_threads: set[int]) -> dict[str, int] | str:
    """The queues whose lock a thread of an ended component process holds, proven dead (module docstring), with that
    thread's id; a string (why) when a lock cannot be read. A read the scheduler interrupted is tried again."""
    if _last_pid() is None:
        return "the kernel's pid cursor (/proc/sys/kernel/ns_last_pid) cannot be read"
    found = {}
    for name, queue in queues.items():
        if not layout_known(queue):
            return f"the lock of the queue {name} cannot be read"
        for _ in range(PROOF_TRIES):
            proof = dead_holder(queue, ended_threads)
            if proof is not _RETRY:
                break
        if isinstance(proof, int):
            found[name] = proof
    return found


_RETRY = object()


def dead_holder(queue, ended_threads: set[int]):
    """The id of the thread that holds the queue's lock when that thread is proven dead and was one of
    `ended_threads`; None when not (free, held by a live thread, in a gap, or by a thread not known to have ended);
    `_RETRY` when the reads took longer than `WINDOW_S` (the scheduler interrupted them)."""
    words = _words(queue)
    start, cursor = time.monotonic(), _last_pid()
    tid = int(words[_OWNER])
    if words[_LOCK] == 0 or tid <= 0 or tid not in ended_threads or _alive(tid):
        return None
    if words[_LOCK] == 0 or int(words[_OWNER]) != tid:
        return None
    if time.monotonic() - start > WINDOW_S:
        return _RETRY
    if _given_out(tid, cursor, _last_pid()):
        return None
    return tid


def _last_pid() -> int | None:
    """The last thread id the kernel gave out in this pid namespace."""
    try:
        with open("/proc/sys/kernel/ns_last_pid") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _given_out(tid: int, before: int | None, after: int | None) -> bool:
    """Whether `tid` may have been given out while the pid cursor moved from `before` to `after` (ids are given out
    cyclically: the interval may wrap)."""
    if before is None or after is None:
        return True
    if after >= before:
        return before < tid <= after
    return tid > before or tid <= after


def _alive(tid: int) -> bool:
    """The thread exists and is not a zombie (a killed process stays one until its parent reaps it)."""
    try:
        with open(f"/proc/{tid}/stat") as f:
            text = f.read()
    except OSError:
        return False
    return text[text.rindex(")") + 2] not in "ZX"


def repair(queue) -> int:
    """Take back the lock of `queue` from a dead thread: cut a message it left half-written off the ring, recount,
    release, wake the waiters. Only while the holder is dead (nobody else is inside). Returns the bytes cut off."""
    header = np.frombuffer(queue.queue_obj_buffer, dtype=np.int64)
    ring = np.frombuffer(queue.shared_memory, dtype=np.uint8)
    capacity, at, left = int(header[0]), int(header[HEAD]), int(header[SIZE])
    count = 0
    while left >= 8:
        length = int(np.frombuffer(np.take(ring, np.arange(at, at + 8) % capacity).tobytes(), dtype="<u8")[0])
        if 8 + length > left:
            break
        at, left, count = (at + 8 + length) % capacity, left - 8 - length, count + 1
    header[TAIL] = (int(header[TAIL]) - left) % capacity
    header[SIZE] -= left
    header[COUNT] = count
    words = np.frombuffer(queue.queue_obj_buffer, dtype=np.int32)
    for condition in CONDITIONS:  # while the mutex is still held: the dead thread may have died inside a signal
        _free_condition(queue, condition)
    words[_OWNER] = 0
    words[_USERS] = max(0, int(words[_USERS]) - 1)
    words[_LOCK] = 0
    _wake_all(queue, MUTEX_OFFSET)
    return left


def wake_sleepers(queue) -> None:
    """Wake every thread asleep on one of the queue's futex words: its mutex's lock word and, in each condition
    variable, the internal lock, the signal counters and the group references (`_FUTEX_WORDS`). A process killed
    between releasing one of these words and waking its sleepers (glibc's unlock is an exchange, then a wake) leaves
    them asleep for good over a lock that is free: a waiter for the mutex (or for its retaking after a condition
    wait) has no deadline. Spurious wakes are harmless by the futex contract: every glibc sleeper looks at its word
    again and sleeps anew if it must, so waking a live queue's sleepers changes nothing but a few context switches."""
    _wake_all(queue, MUTEX_OFFSET)
    for condition in CONDITIONS:
        for word in _FUTEX_WORDS:
            _wake_all(queue, condition + word)


def _wake_all(queue, offset: int) -> None:
    word = ctypes.addressof(ctypes.c_int32.from_buffer(queue.queue_obj_buffer, offset))
    ctypes.CDLL(None, use_errno=True).syscall(_SYS_FUTEX, ctypes.c_void_p(word), _FUTEX_WAKE, 2**31 - 1, None, None, 0)


def _free_condition(queue, condition: int) -> bool:
    """Release the internal lock of the condition variable at byte `condition` when the dead holder of the mutex left
    it taken (it died inside pthread_cond_signal, which faster-fifo calls under the mutex): every later signal, and
    every waiter whose wait times out, would wait for it forever. Freed only when it stays taken for
    `CONDITION_HELD_S`, sampled every millisecond: a live thread holds it for a few instructions (a waiter giving up
    its wait), and the dead one can no longer be racing anyone for it. It guards only the condition's record of whom
    to wake; faster-fifo's waits all have a deadline and look at the ring under the mutex, so whatever that record
    says costs a waiter at most its deadline, never a message. True when it was freed."""
    at = (condition + _COND_LOCK) // 4
    words = _words(queue)
    deadline = time.monotonic() + CONDITION_HELD_S
    while time.monotonic() < deadline:
        if words[at] & 3 == 0:
            return False
        time.sleep(0.001)
    words[at] &= ~3
    _wake_all(queue, condition + _COND_LOCK)
    return True


def idle(queue) -> bool:
    """No process is inside a put or a get of `queue`, nor waits for room in it (once none routes to it)."""
    words = _words(queue)
    return holder(queue) is None and words[WAITERS // 4 + 1] == 0


def renew(queue) -> None:
    """Make a queue no process uses any more as good as new: empty ring, fresh mutex and conditions (with the
    process-shared attributes faster-fifo made them with)."""
    header = np.frombuffer(queue.queue_obj_buffer, dtype=np.int64)
    header[[HEAD, TAIL, SIZE, COUNT]] = 0
    words = _words(queue)
    words[WAITERS // 4 : WAITERS // 4 + 2] = 0
    base = ctypes.addressof(queue.queue_obj_buffer)
    libc = ctypes.CDLL(None)
    libc.pthread_mutex_init(ctypes.c_void_p(base + MUTEX_OFFSET), ctypes.c_void_p(base + MUTEX_ATTR))
    for offset in CONDITIONS:
        libc.pthread_cond_init(ctypes.c_void_p(base + offset), ctypes.c_void_p(base + COND_ATTR))
