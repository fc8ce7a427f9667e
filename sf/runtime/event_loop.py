"""Components and the loop that carries messages between them.

A component only ever talks to others through `send(dest, message)`, a message being one of the typed kinds of
`sf.runtime.messages`; the loop hands it to the handler `WIRING` names for its kind. The loop decides whether `dest`
lives in this process (a local deque, no copy) or in another one (a faster-fifo queue, in the wire form of
`messages.encode`), so the same component classes run serially in one process or spread over many.

The loop also keeps the clocks of work versus waiting (`sf.profiling.activity.LoopMeter`): every handler call is
charged to its component, the time blocked on the inbox and in other components' handlers becomes a wait, and
the loop's own dispatch and message (de)serialization become `loop_overhead`. Messages for other processes are
collected while a handler runs and serialized after it returns, so their cost lands in the loop's overhead
rather than inside the sender's work scopes.
"""

from __future__ import annotations

import pickle
import time
import traceback
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import Any

from faster_fifo import Empty, Queue

from sf.profiling.activity import LoopMeter, activity_of
from sf.profiling.timeline import TRIM_PERIOD_S
from sf.runtime.messages import Flow, Message, decode, encode, handlers_for
from sf.utils.roles import Role
from sf.utils.timing import Timing

Delivery = tuple[str, Message]  # (dest, message): what the local deque and a decoded inbox hold
RunHook = Callable[[], AbstractContextManager]
"""Entered when an event loop starts running and exited when it stops, in the loop's thread: what a tool that
measures whole loops (the cross-stack breakdown's clocks and capture) installs with `add_run_hook`."""

_clock = time.perf_counter
_deserialize_s = [0.0]  # seconds this process spent unpickling messages (one loop reads the inbox per process)


_run_hooks: list[RunHook] = []


def add_run_hook(hook: RunHook) -> None:
    _run_hooks.append(hook)


def remove_run_hook(hook: RunHook) -> None:
    _run_hooks.remove(hook)


def _timed_loads(data: bytes) -> Delivery:
    """The inbox's unpickler and decoder: counts its own time, which a blocking get would otherwise hide in the
    wait."""
    start = _clock()
    delivery = decode(pickle.loads(data))
    _deserialize_s[0] += _clock() - start
    return delivery


class Component:
    """Base class: a name, a Timing tree, message handlers by kind, start/stop hooks.

    `role` picks the rows of `sf.runtime.messages.WIRING` whose handlers this component gets. `wait_key` names what
    the component waits for while the loop is elsewhere (a `wait_<what>` key of its tree); a component whose wait
    changes with its state updates it in its handlers.
    """

    role: Role | None = None
    wait_key = "wait_messages"
    timing_base = ""  # the tree level its work keys live at ("main_loop" for the runner)

    def __init__(self, name: str):
        self.name = name
        self.timing = Timing(name)
        self.loop: EventLoop | None = None
        self.handlers: dict[type, Callable[[Any], None]] = handlers_for(self)
        self.busy_s = 0.0
        self.wait_open = self.wait_key

    def send(self, dest: str, msg: Message) -> None:
        self.loop.send(dest, msg)

    def on_start(self) -> None:
        """Called once when the loop starts, in the process the component lives in."""

    def flush(self) -> None:
        """Called when the loop has no more messages at hand: a chance to act on everything received at once."""

    def on_stop(self) -> None:
        """Called once when the loop stops: final saves, closing envs."""

    # restarts of other components (`sf.supervision.incarnations`) ---------------------------------------------------
    def forget_worker(self, worker: int) -> None:
        """Rollout worker `worker` was restarted: drop what is held of its dead incarnation."""

    def forget_requests(self, policy_id: int) -> None:
        """Policy `policy_id`'s inbox was replaced: drop the requests taken from the old one (they are sent again)."""

    def resend_requests(self, policy_id: int) -> None:
        """Policy `policy_id`'s inference workers read a new inbox now: send the unanswered requests again."""


class StopLoop(Exception):
    """Raised by a handler to end the loop it runs on."""


class EventLoop:
    """Dispatches messages to the components of one process.

    `routes` maps every destination name that lives in another process to that process's inbox queue;
    destinations registered with `add()` are delivered through a local deque.
    """

    def __init__(self, inbox: Queue | None = None, routes: dict[str, Queue] | None = None, stop_event=None):
        self.inbox = inbox
        if inbox is not None:
            inbox.loads = _timed_loads
        self.routes = routes or {}
        self.components: dict[str, Component] = {}
        self.aliases: dict[str, str] = {}
        self.local: deque[Delivery] = deque()  # destinations resolved (no aliases)
        self.outbox: list[tuple[Queue, str, Message]] = []
        self.timers: list[list] = []  # [next_time, period, fn, owner]
        self.stop_event = stop_event
        self.stopped = False
        self.started: list[Component] = []
        self.meter = LoopMeter(_clock())
        self.lifetime_s = 0.0
        self.failed: str | None = None  # the component whose handler or hook raised, for the error that ends the run
        self.fence = None  # `sf.supervision.incarnations.Fence` where components restart in place
        # called in a failed handler's except clause: True when it handled the failure (a serial run's rollout worker
        # restarted in place) and the loop goes on
        self.on_failure: Callable[[Component], bool] | None = None

    def add(self, component: Component, aliases: tuple[str, ...] = ()) -> None:
        component.loop = self
        self.components[component.name] = component
        for alias in aliases:
            self.aliases[alias] = component.name

    def replace(self, old: Component, new: Component) -> None:
        """Put `new` where `old` was (a component restarted in place, under the same name), keeping its Timing tree
        and busy time so that the profile covers both; the caller starts `new`."""
        new.loop = self
        new.timing, new.busy_s = old.timing, old.busy_s
        self.components[new.name] = new
        self.started = [c for c in self.started if c is not old]
        self.flushing = [new if c is old else c for c in getattr(self, "flushing", [])]

    def start_component(self, component: Component) -> None:
        """Run its `on_start`; it counts as started unless it was replaced meanwhile (restarted as it started)."""
        self._call(component, component.on_start)
        if self.components.get(component.name) is component:
            self.started.append(component)

    def switch_inbox(self, inbox: Queue) -> None:
        """Read another queue from now on (this process's inbox was replaced in a restart)."""
        inbox.loads = _timed_loads
        self.inbox = inbox

    def every(self, period_s: float, fn: Callable[[], None], owner: Component | None = None) -> None:
        """Call `fn` every `period_s`; its time is `owner`'s work, or the loop's overhead when it has none."""
        self.timers.append([time.monotonic() + period_s, period_s, fn, owner])

    def send(self, dest: str, msg: Message) -> None:
        dest = self.aliases.get(dest, dest)
        if dest in self.components:
            self.local.append((dest, msg))
        else:
            self.outbox.append((self.routes[dest], dest, msg))

    def send_outbox(self) -> None:
        """Encode, serialize and enqueue the messages for other processes (loop overhead)."""
        start = _clock()
        outbox, self.outbox = self.outbox, []
        for queue, dest, msg in outbox:
            queue.put(encode(dest, msg), block=True, timeout=30.0)
        self.meter.serialize_s += _clock() - start

    def _dispatch(self, component: Component, msg: Message) -> None:
        start = _clock()
        try:
            component.handlers[type(msg)](msg)
        except StopLoop:
            raise
        except Exception:
            if self.on_failure is not None and self.on_failure(component):
                return
            self.failed = component.name
            raise
        finally:
            component.busy_s += _clock() - start
        if component.wait_key != component.wait_open:
            self.meter.switch_wait(component, self.components.values())

    def _call(self, component: Component, fn: Callable[[], None]) -> None:
        """Run a start/flush/stop hook of `component`, charged to it."""
        start = _clock()
        try:
            fn()
        except StopLoop:
            raise
        except Exception:
            if self.on_failure is not None and self.on_failure(component):
                return
            self.failed = component.name
            raise
        finally:
            component.busy_s += _clock() - start
        if component.wait_key != component.wait_open:
            self.meter.switch_wait(component, self.components.values())

    def _flush_all(self) -> None:
        for component in self.flushing:
            self._call(component, component.flush)

    def _drain_local(self) -> bool:
        """Deliver the local messages at hand (not those they cause: timers must get their turn)."""
        local, components = self.local, self.components
        if not local:
            return False
        for _ in range(len(local)):
            dest, msg = local.popleft()
            self._dispatch(components[dest], msg)
            if not local:
                self._flush_all()
        return True

    def _run_timers(self) -> None:
        now = time.monotonic()
        for timer in self.timers:
            if now >= timer[0]:
                timer[0] = now + timer[1]
                if timer[3] is not None:
                    self._call(timer[3], timer[2])
                else:
                    start = _clock()
                    timer[2]()
                    self.meter.timers_s += _clock() - start

    # timeline (--profiling_timeline): a traced variant of dispatch and send --------------------------------
    def enable_timeline(self, recorder) -> None:
        """Record a slice per delivered message and call, and carry a flow id in every message sent from inside
        one (`sf.profiling.timeline`). Instance attributes shadow the plain methods, which stay untouched, so a
        loop without a timeline pays nothing for it."""
        self.recorder = recorder
        self._trace = recorder.add
        self._next_flow_id = recorder.next_flow_id
        self.current: Component | None = None
        self._dispatch = self._traced_dispatch
        self._call = self._traced_call
        self.send = self._traced_send
        self.every(TRIM_PERIOD_S, recorder.trim)

    def _traced_dispatch(self, component: Component, msg: Message) -> None:
        """`_dispatch` with the slice and flow end recorded, in one call: it runs once per message."""
        flow_id = None
        if type(msg) is Flow:
            flow_id, msg = msg.flow_id, msg.message
        kind = type(msg).__name__
        previous, self.current = self.current, component
        start = _clock()
        try:
            component.handlers[type(msg)](msg)
        except StopLoop:
            raise
        except Exception:
            if self.on_failure is not None and self.on_failure(component):
                return
            self.failed = component.name
            raise
        finally:
            end = _clock()
            component.busy_s += end - start
            self.current = previous
            self._trace("H", component.name, kind, start, end)
            if flow_id is not None:
                self._trace("f", component.name, kind, start, flow_id)
        if component.wait_key != component.wait_open:
            self.meter.switch_wait(component, self.components.values())

    def _traced_call(self, component: Component, fn: Callable[[], None]) -> None:
        previous, self.current = self.current, component
        start = _clock()
        try:
            EventLoop._call(self, component, fn)
        finally:
            self.current = previous
            self._trace("C", component.name, fn.__name__, start, _clock())

    def _traced_send(self, dest: str, msg: Message) -> None:
        """`send` with the message wrapped in a `Flow` and the flow's start recorded."""
        current = self.current
        if current is None:  # sent by the loop itself (a timer of no component): no track to start from
            EventLoop.send(self, dest, msg)
            return
        flow_id = self._next_flow_id()
        self._trace("s", current.name, type(msg).__name__, _clock(), flow_id)
        EventLoop.send(self, dest, Flow(flow_id, msg))

    def measure(self) -> float:
        """Write waits and loop overhead into every component's tree; the loop's lifetime so far (seconds)."""
        self.lifetime_s = self.meter.write(list(self.components.values()), _clock())
        return self.lifetime_s

    def profiles(self) -> list[tuple[str, dict, dict]]:
        """(name, Timing tree, activity) of every component, measured now."""
        lifetime = self.measure()
        result = []
        for name, component in self.components.items():
            tree = component.timing.to_dict()
            result.append((name, tree, activity_of(tree, lifetime, component.timing_base).to_dict()))
        return result

    def _should_stop(self) -> bool:
        if self.stopped:
            return True
        if self.stop_event is not None and self.stop_event.is_set():
            return True
        return False

    def run(self) -> None:
        """Deliver messages until a handler raises StopLoop or the stop event is set, inside every run hook."""
        if not _run_hooks:
            self._run()
            return
        with ExitStack() as hooks:
            for hook in list(_run_hooks):
                hooks.enter_context(hook())
            self._run()

    def _run(self) -> None:
        self.meter = LoopMeter(_clock())
        self.flushing = [c for c in self.components.values() if type(c).flush is not Component.flush]
        meter, inbox = self.meter, self.inbox
        for component in list(self.components.values()):
            self.start_component(component)
        self._flush_all()
        try:
            while not self._should_stop():
                busy = self._drain_local()
                if self.outbox:
                    self.send_outbox()
                if inbox is not None:
                    decoded = _deserialize_s[0]
                    start = _clock()
                    try:
                        msgs = inbox.get_many(block=not busy, timeout=0.05 if not busy else 0.0)
                    except Empty:
                        msgs = ()
                    took, decoded = _clock() - start, _deserialize_s[0] - decoded
                    meter.deserialize_s += decoded if not busy else took
                    if not busy:
                        meter.blocked_s += took - decoded
                    components, aliases = self.components, self.aliases
                    for dest, msg in msgs:
                        self._dispatch(components[aliases.get(dest, dest)], msg)
                    if msgs:
                        self._flush_all()
                elif not busy:
                    raise RuntimeError("serial loop has nothing to do: every component is waiting on another")
                self._run_timers()
                if self.outbox:
                    self.send_outbox()
                if self.fence is not None and self.fence.moved():
                    self.fence.catch_up()
                    inbox = self.inbox
        except StopLoop:
            pass
        finally:
            self.stopped = True

    def drop_local_messages_to(self, dest: str) -> None:
        """Forget what is queued here for `dest` (a component being replaced: its successor starts afresh)."""
        kept = [(to, msg) for to, msg in self.local if to != dest]
        self.local.clear()
        self.local.extend(kept)

    def deliver_local(self, dest: str) -> None:
        """After stopping: hand `dest` what the others sent it on their way out (final stats)."""
        component = self.components[dest]
        for msg in [msg for to, msg in self.local if to == dest]:
            try:
                self._dispatch(component, msg)
            except StopLoop:
                pass
        self.local.clear()

    def stop_components(self) -> list[tuple[str, str]]:
        """Run on_stop of every component that started; return (name, traceback) for those that failed."""
        failures = []
        for component in self.started:
            try:
                self._call(component, component.on_stop)
            except Exception:
                failures.append((component.name, traceback.format_exc()))
        if self.outbox:
            self.send_outbox()
        return failures
