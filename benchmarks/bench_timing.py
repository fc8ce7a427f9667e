"""Cost of one `with timing.<mode>(key):` block, net of the loop that drives it (goal: <= 2 us), and of one message
between components (sent and delivered on one event loop, or through a queue between two).

python benchmarks/bench_timing.py [--blocks 1000000]
pytest benchmarks/bench_timing.py --benchmark-enable
"""

from __future__ import annotations

import argparse
import time

import pytest

from sf.utils.timing import Timing

BLOCKS_PER_ROUND = 10_000


def empty_loop(timing: Timing, blocks: int) -> None:
    for _ in range(blocks):
        pass


def add_time_blocks(timing: Timing, blocks: int) -> None:
    for _ in range(blocks):
        with timing.add_time("hotspot"):
            pass


def timeit_blocks(timing: Timing, blocks: int) -> None:
    for _ in range(blocks):
        with timing.timeit("hotspot"):
            pass


def time_avg_blocks(timing: Timing, blocks: int) -> None:
    for _ in range(blocks):
        with timing.time_avg("hotspot"):
            pass


def nested_blocks(timing: Timing, blocks: int) -> None:
    """Three levels deep, as in an inference step; counts as three blocks per iteration."""
    for _ in range(blocks // 3):
        with timing.add_time("one_step"), timing.add_time("handle_policy_step"), timing.add_time("forward"):
            pass


MODES = {"add_time": add_time_blocks, "timeit": timeit_blocks, "time_avg": time_avg_blocks, "nested x3": nested_blocks}


def seconds_for(loop, blocks: int) -> float:
    timing = Timing("bench")
    start = time.perf_counter()
    loop(timing, blocks)
    return time.perf_counter() - start


def overhead_us(loop, blocks: int) -> float:
    """Per-block microseconds above an empty loop of the same length, both measured in this run."""
    baseline = seconds_for(empty_loop, blocks)
    return (seconds_for(loop, blocks) - baseline) / blocks * 1e6


@pytest.mark.parametrize("mode", list(MODES))
def test_block_overhead(benchmark, mode: str) -> None:
    timing = Timing("bench")
    benchmark.extra_info["blocks_per_round"] = BLOCKS_PER_ROUND
    benchmark(MODES[mode], timing, BLOCKS_PER_ROUND)
    assert timing.flat_items(), "the timed blocks must have been recorded"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=1_000_000)
    args = parser.parse_args()
    for mode, loop in MODES.items():
        print(f"{mode} overhead per block: {overhead_us(loop, args.blocks):.2f} us")
    print(
        f"add_time after a profiling capture window opened and closed: {after_capture_window_us(args.blocks):+.3f} us "
        "per block against before it"
    )
    print(
        f"timeline recording: add_time {timeline_scope_us(args.blocks):+.3f} us per block, "
        f"message send + dispatch {timeline_message_us(args.blocks // 4):+.3f} us per message, against unrecorded"
    )
    local, queued = message_us(args.blocks // 4)
    print(f"message send + dispatch: {local:.3f} us on one loop, {queued:.3f} us through a queue between two loops")


def after_capture_window_us(blocks: int) -> float:
    """A window installs the ranges hook on every scope and removes it when it closes: nothing may stay behind."""
    from sf.profiling.ranges import ScopeRanges

    before = min(overhead_us(add_time_blocks, blocks) for _ in range(3))
    ranges = ScopeRanges()
    ranges.install()
    ranges.remove()
    after = min(overhead_us(add_time_blocks, blocks) for _ in range(3))
    return after - before


def timeline_scope_us(blocks: int) -> float:
    """What `--profiling_timeline` adds to a scope: the recorder's row appended at every exit."""
    from sf.profiling.timeline import Recorder

    plain = min(overhead_us(add_time_blocks, blocks) for _ in range(3))
    recorder = Recorder()
    try:
        recorded = min(overhead_us(add_time_blocks, blocks) for _ in range(3))
    finally:
        recorder.stop()
    return recorded - plain


def timeline_message_us(messages: int) -> float:
    """What the traced event loop adds per message: a flow id and a row at the send, a slice at the delivery."""
    from sf.profiling.timeline import Recorder
    from sf.runtime.event_loop import Component, EventLoop
    from sf.runtime.messages import Actions, PolicyRequest

    def seconds_per_message(traced: bool) -> float:
        loop = EventLoop()
        sender, receiver = Component("RolloutWorker_w0"), Component("InferenceWorker_p0-w0")
        receiver.handlers[PolicyRequest] = lambda msg: None
        sender.handlers[Actions] = lambda msg: sender.send("InferenceWorker_p0-w0", PolicyRequest(0, 1, [2], [3]))
        loop.add(sender)
        loop.add(receiver)
        recorder = Recorder() if traced else None
        if traced:
            loop.enable_timeline(recorder)
        tick = Actions([0], 0)
        try:
            start = time.perf_counter()
            for _ in range(messages):
                loop._dispatch(sender, tick)
                dest, msg = loop.local.popleft()
                loop._dispatch(loop.components[dest], msg)
            return (time.perf_counter() - start) / messages
        finally:
            if recorder is not None:
                recorder.stop()

    plain = min(seconds_per_message(False) for _ in range(3))
    traced = min(seconds_per_message(True) for _ in range(3))
    return (traced - plain) * 1e6


def message_us(messages: int) -> tuple[float, float]:
    """Microseconds per policy request (eight envs' slots and steps) from one component to another, handler excluded:
    on one event loop (built, queued on the deque, dispatched), and from one loop to another through a faster-fifo
    queue (also encoded, pickled, put, taken, unpickled and decoded), both loops in this process."""
    from faster_fifo import Queue

    from sf.runtime.event_loop import Component, EventLoop
    from sf.runtime.messages import PolicyRequest

    slots, steps = list(range(8)), list(range(8, 16))

    def local_seconds() -> float:
        loop = EventLoop()
        sender, receiver = Component("RolloutWorker_w0"), Component("InferenceWorker_p0-w0")
        receiver.handlers[PolicyRequest] = lambda msg: None
        loop.add(sender)
        loop.add(receiver, aliases=("policy_p0",))
        local, components = loop.local, loop.components
        start = time.perf_counter()
        for _ in range(messages):
            sender.send("policy_p0", PolicyRequest(0, 1, slots, steps))
            dest, msg = local.popleft()
            loop._dispatch(components[dest], msg)
        return (time.perf_counter() - start) / messages

    def queued_seconds() -> float:
        queue = Queue(1_000_000)
        sending, receiving = EventLoop(routes={"policy_p0": queue}), EventLoop(inbox=queue)
        sender, receiver = Component("RolloutWorker_w0"), Component("InferenceWorker_p0-w0")
        receiver.handlers[PolicyRequest] = lambda msg: None
        sending.add(sender)
        receiving.add(receiver, aliases=("policy_p0",))
        components, aliases = receiving.components, receiving.aliases
        start = time.perf_counter()
        for _ in range(messages):
            sender.send("policy_p0", PolicyRequest(0, 1, slots, steps))
            sending.send_outbox()
            for dest, msg in queue.get_many(block=False):
                receiving._dispatch(components[aliases.get(dest, dest)], msg)
        return (time.perf_counter() - start) / messages

    return min(local_seconds() for _ in range(3)) * 1e6, min(queued_seconds() for _ in range(3)) * 1e6


if __name__ == "__main__":
    main()
