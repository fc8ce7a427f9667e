"""The main process's side of the run's queues: one thread does every get and put, the runner waits with deadlines.

faster-fifo guards a queue with a process-shared mutex that is not robust: a process killed inside a put or a get
leaves it locked for good, and a put writes the message's size before its bytes, so a forced unlock could hand a
reader half a message. Outside a restart, which takes such a lock back only on proof that its holder is dead
(`sf.supervision.queue_locks`), nothing in sf unlocks a dead process's mutex: such a queue is dead, and so is the
run. The components' own loops may then wait on it forever; the supervisor kills them after the grace period. The main
process must not wait forever too: it reads its inbox and sends its few messages (save requests) through this
thread, and only ever waits for the thread with a timeout. A stuck thread is a daemon and dies with the process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

import faster_fifo

from sf.utils.errors import exception_line

log = logging.getLogger("sf")

POLL_S = 0.05  # the longest an outgoing message waits for the thread to come back from a get
PUT_TIMEOUT_S = 5.0


class Mailbox:
    """Duck-types the inbox queue for the runner's event loop (`get_many`, `empty`, `loads`); `sender(queue)` stands
    in for a destination's queue in its routes."""

    def __init__(self, inbox: faster_fifo.Queue):
        self.inbox = inbox
        self._received: deque[list] = deque()
        self._outgoing: deque[tuple[faster_fifo.Queue, tuple]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.error: str | None = None  # why the thread stopped reading, if it did
        self._empty_gets = 0
        self._posted = 0  # messages handed to the thread so far
        self._handled = 0  # of those, how many it has put (or dropped)
        self._thread = threading.Thread(target=self._run, name="sf-mailbox", daemon=True)

    @property
    def loads(self):
        return self.inbox.loads

    @loads.setter
    def loads(self, fn) -> None:
        self.inbox.loads = fn

    def start(self) -> Mailbox:
        self._thread.start()
        return self

    def close(self) -> None:
        """Let the thread end after its current call (never waited for: it may be stuck on a dead owner's lock)."""
        self._closed = True

    def _run(self) -> None:
        try:
            self._pump()
        except Exception as exc:  # a message that does not unpickle: the run cannot trust its inbox any more
            self.error = exception_line(exc)
            log.error("the runner's inbox failed: %s", self.error)

    def _pump(self) -> None:
        while not self._closed:
            with self._cond:
                outgoing, self._outgoing = self._outgoing, deque()
            for queue, wire in outgoing:
                try:
                    queue.put(wire, block=True, timeout=PUT_TIMEOUT_S)
                except faster_fifo.Full:
                    dest, _, _ = wire
                    log.warning("a message for %s was dropped: its queue stayed full for %.0f s", dest, PUT_TIMEOUT_S)
                self._handled += 1
            try:
                msgs = self.inbox.get_many(block=True, timeout=POLL_S)
            except faster_fifo.Empty:
                with self._cond:
                    self._empty_gets += 1
                    self._cond.notify_all()
                continue
            with self._cond:
                self._received.append(msgs)
                self._cond.notify_all()

    def get_many(self, block: bool = True, timeout: float = 0.0) -> list:
        """The messages received so far; raises faster_fifo.Empty when none came within `timeout`."""
        deadline = time.monotonic() + (timeout if block else 0.0)
        with self._cond:
            while not self._received:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise faster_fifo.Empty
                self._cond.wait(left)
            batches, self._received = self._received, deque()
        return [msg for batch in batches for msg in batch]

    def empty(self, timeout: float = 4 * POLL_S) -> bool:
        """Nothing received and nothing left in the queue, once its writers have stopped: true when the thread comes
        back empty-handed from a get it began after this call (every message it took before is handed over by then)
        within `timeout`. The first empty get seen may have begun earlier, hence two."""
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = self._empty_gets
            while not self._received and self._empty_gets < seen + 2:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return not self._received

    def sender(self, queue: faster_fifo.Queue) -> Sender:
        return Sender(self, queue)

    def post(self, queue: faster_fifo.Queue, wire: tuple) -> None:
        """Put `wire` (a message in `sf.runtime.messages.encode`'s form) on `queue` from the thread."""
        with self._cond:
            self._outgoing.append((queue, wire))
            self._posted += 1

    def mark(self) -> int:
        """How many messages were posted so far: `handled(mark)` tells when all of them have left."""
        with self._cond:
            return self._posted

    def handled(self, mark: int) -> bool:
        """Every message posted before `mark` was taken is in its queue (or dropped): none is on its way to a queue
        the runner routed to then (one a restart retired)."""
        return self._handled >= mark


class Sender:
    """A destination's queue as the runner's loop sees it: `put` hands the message to the mailbox's thread."""

    def __init__(self, mailbox: Mailbox, queue: faster_fifo.Queue):
        self.mailbox = mailbox
        self.queue = queue

    def put(self, wire: tuple, block: bool = True, timeout: float | None = None) -> None:
        self.mailbox.post(self.queue, wire)
