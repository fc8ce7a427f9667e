"""Timing: a tree of named time measurements that every component keeps and prints at exit.

`with timing.add_time("key")` accumulates, `timeit` keeps the last measurement, `time_avg` a moving
average. A block opened inside another block becomes its child, so the same key under two parents is
two nodes. Each tree node is its own context manager, created on first use and reused afterwards:
a `with` block then costs one dict lookup, two clock reads and a few attribute writes.

Profilers observe scopes through `add_scope_hook`: while no hook is installed the node classes keep their plain
methods, so an unobserved block costs exactly what it did before; installing one swaps in methods that also call
every hook with the node (whose `path` is "parent/child" and whose `timing.name` is the component). A trace
recorder installed alone gets exits with its appends written into them, one Python call per scope as without it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

_clock = time.perf_counter


class _Node:
    """One key in the tree; entering it makes it the parent of blocks opened inside it."""

    __slots__ = ("timing", "component", "parent", "children", "time", "start", "path")

    def __init__(self, timing: Timing | None, parent: _Node | None, key: str = ""):
        self.timing = timing
        self.component = timing.name if timing is not None else ""  # for recorders: one attribute, not a chain
        self.parent = parent
        self.children: dict[str, _Node] = {}
        self.time = 0.0
        self.start = 0.0
        self.path = f"{parent.path}/{key}" if parent is not None and parent.path else key

    def __enter__(self) -> _Node:
        self.timing._current = self
        self.start = _clock()
        return self

    def __exit__(self, *exc) -> None:
        self.time += _clock() - self.start
        self.timing._current = self.parent


class _LastNode(_Node):
    __slots__ = ()

    def __exit__(self, *exc) -> None:
        self.time = _clock() - self.start
        self.timing._current = self.parent


class _AverageNode(_Node):
    __slots__ = ("history",)

    def __init__(self, timing: Timing, parent: _Node, key: str, average: int):
        super().__init__(timing, parent, key)
        self.history: deque[float] = deque(maxlen=average)

    def __exit__(self, *exc) -> None:
        history = self.history
        history.append(_clock() - self.start)
        self.time = sum(history) / len(history)
        self.timing._current = self.parent


class ScopeHook(NamedTuple):
    """Called with the node when a scope opens (before its clock starts) and closes (after its clock stops).
    Either may be None: a hook that only needs the closing (a trace recorder) then adds nothing to the opening.

    `record` is the trace recorder's form: two appends, one that receives the node and one that receives its start and
    end (a list's and an array of doubles', say). While it is the only hook, the installed `__exit__` makes those three
    calls itself, so a recorded scope costs no Python call beyond the plain one and allocates nothing that outlives
    it."""

    enter: Callable[[_Node], None] | None
    exit: Callable[[_Node], None] | None
    record: tuple[Callable[[_Node], None], Callable[[float], None]] | None = None


_hooks: list[ScopeHook] = []
_PLAIN = {
    cls: (cls.__dict__.get("__enter__"), cls.__dict__.get("__exit__")) for cls in (_Node, _LastNode, _AverageNode)
}


def _observed(enter, exit_, enters: list, exits: list):
    def hooked_enter(self):
        for hook_enter in enters:
            hook_enter(self)
        return enter(self)

    if len(exits) == 1:  # the common case, one observer: no loop
        only_exit = exits[0]

        def hooked_exit(self, exc_type, exc, tb):
            exit_(self, exc_type, exc, tb)
            only_exit(self)
    else:

        def hooked_exit(self, exc_type, exc, tb):
            exit_(self, exc_type, exc, tb)
            for hook_exit in exits:
                hook_exit(self)

    return hooked_enter if enters else enter, hooked_exit if exits else exit_


def _recording_exits(add_node: Callable[[_Node], None], add_time: Callable[[float], None]) -> dict:
    """The plain exits with the recorder's appends inlined: one clock read serves the node's time and the record."""

    def add_exit(self, exc_type, exc, tb):
        end = _clock()
        start = self.start
        self.time += end - start
        self.timing._current = self.parent
        add_node(self)
        add_time(start)
        add_time(end)

    def last_exit(self, exc_type, exc, tb):
        end = _clock()
        start = self.start
        self.time = end - start
        self.timing._current = self.parent
        add_node(self)
        add_time(start)
        add_time(end)

    return {_Node: add_exit, _LastNode: last_exit}


def _record_exit(add_node: Callable[[_Node], None], add_time: Callable[[float], None]) -> Callable[[_Node], None]:
    def exit_(node: _Node) -> None:
        add_node(node)
        add_time(node.start)
        add_time(_clock())

    return exit_


def _install_methods() -> None:
    only = _hooks[0] if len(_hooks) == 1 else None
    if only is not None and only.enter is None and only.exit is None and only.record is not None:
        fused = _recording_exits(*only.record)
        for cls, (enter, exit_) in _PLAIN.items():
            if enter is not None:
                cls.__enter__ = enter
            cls.__exit__ = fused.get(cls) or _observed(enter, exit_, [], [_record_exit(*only.record)])[1]
        return
    enters = [hook.enter for hook in _hooks if hook.enter is not None]
    exits = [
        hook.exit or _record_exit(*hook.record)
        for hook in reversed(_hooks)
        if hook.exit is not None or hook.record is not None
    ]
    for cls, (enter, exit_) in _PLAIN.items():
        hooked_enter, hooked_exit = _observed(enter or _Node.__dict__["__enter__"], exit_, enters, exits)
        if enter is not None:
            cls.__enter__ = hooked_enter
        cls.__exit__ = hooked_exit


def add_scope_hook(hook: ScopeHook) -> None:
    """Observe every Timing scope of this process (all trees) until `remove_scope_hook`."""
    _hooks.append(hook)
    _install_methods()


def remove_scope_hook(hook: ScopeHook) -> None:
    if hook in _hooks:
        _hooks.remove(hook)
        _install_methods()


class Timing:
    """Per-component timing tree. Not thread-safe: give every thread or process its own.

    A key keeps the mode (add_time / timeit / time_avg) it was first opened with.
    """

    def __init__(self, name: str = "Timing"):
        self.name = name
        self._root = _Node(self, None)
        self._current = self._root

    def open_scope(self) -> tuple[str, float] | None:
        """The innermost scope open now, as (path, perf_counter time it was entered), or None: what a watchdog
        names when the thread running this tree is stuck (one attribute read from another thread, no lock)."""
        node = self._current
        return None if node is self._root else (node.path, node.start)

    def add_time(self, key: str) -> _Node:
        """Accumulate the time spent in the block over all its executions."""
        node = self._current.children.get(key)
        if node is None:
            node = self._current.children[key] = _Node(self, self._current, key)
        return node

    def timeit(self, key: str) -> _Node:
        """Keep only the duration of the last execution."""
        node = self._current.children.get(key)
        if node is None:
            node = self._current.children[key] = _LastNode(self, self._current, key)
        return node

    def time_avg(self, key: str, average: int = 10) -> _Node:
        """Keep the mean duration of the last `average` executions."""
        node = self._current.children.get(key)
        if node is None:
            node = self._current.children[key] = _AverageNode(self, self._current, key, average)
        return node

    def get(self, path: str) -> float:
        """Seconds recorded at a slash-separated path such as "train/update"; KeyError if never timed."""
        node = self._root
        for key in path.split("/"):
            node = node.children[key]
        return node.time

    def set(self, path: str, seconds: float) -> None:
        """Record a total measured elsewhere at a slash-separated path, creating the nodes on the way.

        For times a component cannot scope itself, such as the waits its event loop measures for it.
        """
        node = self._root
        for key in path.split("/"):
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = _Node(self, node, key)
            node = child
        node.time = seconds

    def flat_items(self) -> list[tuple[str, float]]:
        """Every node as ("parent/child", seconds), depth first in insertion order (for TensorBoard scalars)."""
        return _depth_first(self._root, "")

    def to_dict(self) -> dict:
        """`{key: {"time": seconds, "children": {...}}}`, JSON-ready, to ship a tree to another process."""
        return _to_dict(self._root)

    @classmethod
    def from_dict(cls, name: str, tree: dict) -> Timing:
        """Rebuild a tree received as `to_dict()` output, e.g. to print another process's profile."""
        timing = cls(name)
        _fill(timing, timing._root, tree)
        return timing

    def tree_str(self) -> str:
        """`<name> tree view:`, then per level the leaves on one line and each inner node above its subtree."""
        lines = [f"{self.name} tree view:"]
        _render(self._root, "", lines)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.tree_str()


def _depth_first(node: _Node, prefix: str) -> list[tuple[str, float]]:
    items: list[tuple[str, float]] = []
    for key, child in node.children.items():
        items.append((prefix + key, child.time))
        items.extend(_depth_first(child, f"{prefix}{key}/"))
    return items


def _to_dict(node: _Node) -> dict:
    return {key: {"time": child.time, "children": _to_dict(child)} for key, child in node.children.items()}


def _fill(timing: Timing, node: _Node, tree: dict) -> None:
    for key, entry in tree.items():
        child = node.children[key] = _Node(timing, node, key)
        child.time = float(entry["time"])
        _fill(timing, child, entry.get("children", {}))


def _render(node: _Node, indent: str, lines: list[str]) -> None:
    leaves = [f"{key}: {child.time:.4f}" for key, child in node.children.items() if not child.children]
    if leaves:
        lines.append(indent + ", ".join(leaves))
    for key, child in node.children.items():
        if child.children:
            lines.append(f"{indent}{key}: {child.time:.4f}")
            _render(child, indent + "  ", lines)
