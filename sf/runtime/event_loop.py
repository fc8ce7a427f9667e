"""Components and the loop that carries messages between them.

A component only ever talks to others through `send(dest, kind, *payload)`. The loop decides whether
`dest` lives in this process (a local deque, no copy) or in another one (a faster-fifo queue), so the
same component classes run serially in one process or spread over many.
"""
from __future__ import annotations

import os
import time
import traceback
from collections import deque
from typing import Any, Callable

from faster_fifo import Empty, Queue

from sf.utils.timing import Timing

Message = tuple  # (dest, kind, *payload)


class Component:
    """Base class: a name, a Timing tree, message handlers by kind, start/stop hooks."""

    def __init__(self, name: str):
        self.name = name
        self.timing = Timing(name)
        self.loop: EventLoop | None = None
        self.handlers: dict[str, Callable[..., None]] = {}

    def send(self, dest: str, kind: str, *payload: Any) -> None:
        self.loop.send(dest, kind, *payload)

    def on_start(self) -> None:
        """Called once when the loop starts, in the process the component lives in."""

    def flush(self) -> None:
        """Called when the loop has no more messages at hand: a chance to act on everything received at once."""

    def on_stop(self) -> None:
        """Called once when the loop stops: final saves, closing envs."""


class StopLoop(Exception):
    """Raised by a handler to end the loop it runs on."""


class EventLoop:
    """Dispatches messages to the components of one process.

    `routes` maps every destination name that lives in another process to that process's inbox queue;
    destinations registered with `add()` are delivered through a local deque.
    """

    def __init__(self, inbox: Queue | None = None, routes: dict[str, Queue] | None = None, stop_event=None):
        self.inbox = inbox
        self.routes = routes or {}
        self.components: dict[str, Component] = {}
        self.aliases: dict[str, str] = {}
        self.local: deque[Message] = deque()
        self.timers: list[list] = []  # [next_time, period, fn]
        self.stop_event = stop_event
        self.stopped = False
        self.started: list[Component] = []
        self.parent_pid = os.getppid()

    def add(self, component: Component, aliases: tuple[str, ...] = ()) -> None:
        component.loop = self
        self.components[component.name] = component
        for alias in aliases:
            self.aliases[alias] = component.name

    def every(self, period_s: float, fn: Callable[[], None]) -> None:
        self.timers.append([time.monotonic() + period_s, period_s, fn])

    def send(self, dest: str, kind: str, *payload: Any) -> None:
        dest = self.aliases.get(dest, dest)
        if dest in self.components:
            self.local.append((dest, kind, *payload))
        else:
            self.routes[dest].put((dest, kind, *payload), block=True, timeout=30.0)

    def _dispatch(self, msg: Message) -> None:
        component = self.components[self.aliases.get(msg[0], msg[0])]
        component.handlers[msg[1]](*msg[2:])

    def _drain_local(self) -> bool:
        """Deliver the local messages at hand (not those they cause: timers must get their turn)."""
        local = self.local
        if not local:
            return False
        for _ in range(len(local)):
            self._dispatch(local.popleft())
            if not local:
                for component in self.components.values():
                    component.flush()
        return True

    def _run_timers(self) -> None:
        now = time.monotonic()
        for timer in self.timers:
            if now >= timer[0]:
                timer[0] = now + timer[1]
                timer[2]()

    def _should_stop(self) -> bool:
        if self.stopped:
            return True
        if self.stop_event is not None and self.stop_event.is_set():
            return True
        return False

    def run(self) -> None:
        for component in self.components.values():
            component.on_start()
            self.started.append(component)
        for component in self.components.values():
            component.flush()
        try:
            while not self._should_stop():
                busy = self._drain_local()
                if self.inbox is not None:
                    try:
                        msgs = self.inbox.get_many(block=not busy, timeout=0.05 if not busy else 0.0)
                    except Empty:
                        msgs = ()
                    for msg in msgs:
                        self._dispatch(msg)
                    if msgs:
                        for component in self.components.values():
                            component.flush()
                    elif os.getppid() != self.parent_pid:
                        raise RuntimeError("parent process is gone")
                elif not busy:
                    raise RuntimeError("serial loop has nothing to do: every component is waiting on another")
                self._run_timers()
        except StopLoop:
            pass
        finally:
            self.stopped = True

    def deliver_local(self, dest: str) -> None:
        """After stopping: hand `dest` what the others sent it on their way out (final stats)."""
        for msg in [m for m in self.local if self.aliases.get(m[0], m[0]) == dest]:
            try:
                self._dispatch(msg)
            except StopLoop:
                pass
        self.local.clear()

    def stop_components(self) -> list[tuple[str, str]]:
        """Run on_stop of every component that started; return (name, traceback) for those that failed."""
        failures = []
        for component in self.started:
            try:
                component.on_stop()
            except Exception:
                failures.append((component.name, traceback.format_exc()))
        return failures
