"""Run by test_queue_faults as its own process: a writer puts 1 MB messages into a queue that the runner's mailbox
reads, and is killed with SIGKILL at a random moment of its first puts (the queue has room for several, so it is
copying a message then, under the queue's lock, most of the time), `trials` times (a new writer and queue each
time). The main thread checks every message it gets (length and CRC written by the writer) and waits only with
deadlines; the supervisor names each death. Prints one JSON line with what happened.

Run on its own (its mailbox threads stay stuck on the queues whose writer died inside a put, as intended), so the
test process keeps none of them."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import struct
import sys
import time
import zlib

import faster_fifo
from queue_layout import queue_locked

from sf.runner.mailbox import Mailbox
from sf.supervision.supervisor import Supervisor

PAYLOAD_BYTES = 1024 * 1024
QUEUE_BYTES = 6 * PAYLOAD_BYTES
KILL_WITHIN_S = 0.0005  # after the writer's first put: it is in the middle of its next ones
HEADER = struct.Struct("<QQI")  # sequence number, payload length, CRC-32 of the payload
VARIANTS = 7
GET_TIMEOUT_S = 0.05
DEATH_DEADLINE_S = 2.0
DRAIN_S = 0.1
HELD_CHECKS = 5  # a dead writer's lock stays held; a live reader's is released within microseconds


def message(seq: int) -> bytes:
    payload = bytes([seq % 251]) * (PAYLOAD_BYTES - seq % 7)
    return HEADER.pack(seq, len(payload), zlib.crc32(payload)) + payload


CRCS = {seq: HEADER.unpack_from(message(seq))[2] for seq in range(VARIANTS)}


def whole(data: bytes) -> bool:
    """The header names one of the writer's messages and everything after it is that message's payload."""
    if len(data) < HEADER.size:
        return False
    seq, length, crc = HEADER.unpack_from(data)
    if seq >= VARIANTS or crc != CRCS[seq] or len(data) - HEADER.size != length:
        return False
    return data[HEADER.size :] == bytes([seq % 251]) * length


def write_forever(queue: faster_fifo.Queue, puts, first_read) -> None:
    """Put one message and wait until the reader has it (so that every trial reads a whole message, however the
    threads are scheduled: a writer back inside its next put holds the lock the reader needs), then put forever."""
    ready = [message(seq) for seq in range(VARIANTS)]  # built once: the writer spends its time inside put
    queue.put(ready[0], timeout=30.0)
    puts.value = 1
    first_read.wait(30.0)
    seq = 1
    while True:
        queue.put(ready[seq % VARIANTS], timeout=30.0)
        seq += 1
        puts.value = seq


def _held_by_the_dead(queue: faster_fifo.Queue) -> bool:
    for _ in range(HELD_CHECKS):
        if not queue_locked(queue):
            return False
        time.sleep(0.02)
    return True


def trial(index: int, supervisor: Supervisor, rng: random.Random, stats: dict) -> None:
    queue = faster_fifo.Queue(QUEUE_BYTES, loads=bytes, dumps=bytes)
    mailbox = Mailbox(queue).start()
    label = f"writer_{index}"
    ctx = mp.get_context("fork")
    puts = ctx.RawValue("q", 0)
    first_read = ctx.Event()
    writer = supervisor.start(label, ctx.Process(target=write_forever, args=(queue, puts, first_read)))

    def take(deadline: float) -> bool:
        """Read for up to GET_TIMEOUT_S; True once a message came."""
        started = time.monotonic()
        try:
            msgs = mailbox.get_many(block=True, timeout=min(GET_TIMEOUT_S, max(0.0, deadline - started)))
        except faster_fifo.Empty:
            msgs = []
        stats["longest_wait_s"] = max(stats["longest_wait_s"], time.monotonic() - started)
        stats["read"] += len(msgs)
        stats["not_whole"] += sum(not whole(m) for m in msgs)
        return bool(msgs)

    deadline = time.monotonic() + 30.0
    while not take(deadline):
        assert time.monotonic() < deadline, "the writer's first message never came"
    first_read.set()
    while puts.value < 2:  # back to putting: the kill lands inside one of its next puts
        assert time.monotonic() < deadline, "the writer stopped writing"
    time.sleep(rng.uniform(0.0, KILL_WITHIN_S))
    os.kill(writer.pid, signal.SIGKILL)
    killed = time.monotonic()
    named = False
    while not named:
        take(killed + DEATH_DEADLINE_S)
        named = any(f.label == label for f in supervisor.poll())
        if time.monotonic() - killed > DEATH_DEADLINE_S:
            break
    stats["slowest_death_s"] = max(stats["slowest_death_s"], time.monotonic() - killed if named else float("inf"))
    drain_until = time.monotonic() + DRAIN_S
    while time.monotonic() < drain_until:
        take(drain_until)
    stats["killed_inside_put"] += _held_by_the_dead(queue)
    mailbox.close()


def main(trials: int, seed: int) -> None:
    supervisor = Supervisor()
    supervisor.begin()
    rng = random.Random(seed)
    stats = dict(trials=trials, killed_inside_put=0, read=0, not_whole=0, longest_wait_s=0.0, slowest_death_s=0.0)
    for index in range(trials):
        trial(index, supervisor, rng, stats)
    supervisor.stop(set(supervisor.children), grace=0.0, crashed=True, exit_wait_s=1.0)
    print(json.dumps(stats), flush=True)
    os._exit(0)  # the mailbox threads stuck on dead writers' locks: nothing to wait for


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
