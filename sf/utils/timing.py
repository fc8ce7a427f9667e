"""Timing: a tree of named time measurements that every component keeps and prints at exit.

`with timing.add_time("key")` accumulates, `timeit` keeps the last measurement, `time_avg` a moving
average. A block opened inside another becomes its child. The context objects are created once per
tree node and reused, so a `with` block costs two clock reads and a few attribute updates.
"""
from __future__ import annotations

import time
from collections import deque

_clock = time.perf_counter

ACCUMULATE, LAST, AVERAGE = 0, 1, 2


class _Node:
    __slots__ = ("time", "children", "mode", "history", "block")

    def __init__(self, mode: int = ACCUMULATE, average: int = 10):
        self.time = 0.0
        self.children: dict[str, _Node] = {}
        self.mode = mode
        self.history: deque | None = deque(maxlen=average) if mode == AVERAGE else None
        self.block: _Block | None = None


class _Block:
    """The context manager of one node; reused for every `with` on that node."""

    __slots__ = ("timing", "node", "start")

    def __init__(self, timing: "Timing", node: _Node):
        self.timing = timing
        self.node = node
        self.start = 0.0

    def __enter__(self):
        self.timing._stack.append(self.node)
        self.start = _clock()
        return self

    def __exit__(self, *exc):
        elapsed = _clock() - self.start
        node = self.node
        if node.mode == ACCUMULATE:
            node.time += elapsed
        elif node.mode == LAST:
            node.time = elapsed
        else:
            node.history.append(elapsed)
            node.time = sum(node.history) / len(node.history)
        self.timing._stack.pop()
        return False


class Timing:
    def __init__(self, name: str = "Timing"):
        self.name = name
        self.root = _Node()
        self._stack: list[_Node] = [self.root]

    def _block(self, key: str, mode: int, average: int = 10) -> _Block:
        parent = self._stack[-1]
        node = parent.children.get(key)
        if node is None:
            node = parent.children[key] = _Node(mode, average)
        if node.block is None:
            node.block = _Block(self, node)
        return node.block

    def add_time(self, key: str) -> _Block:
        """Accumulate the time spent in the block across all its executions."""
        return self._block(key, ACCUMULATE)

    def timeit(self, key: str) -> _Block:
        """Keep only the duration of the last execution."""
        return self._block(key, LAST)

    def time_avg(self, key: str, average: int = 10) -> _Block:
        """Keep the mean duration of the last `average` executions."""
        return self._block(key, AVERAGE, average)

    # reading -----------------------------------------------------------------------------------------
    def get(self, path: str) -> float:
        node = self.root
        for key in path.split("/"):
            node = node.children[key]
        return node.time

    def to_dict(self) -> dict:
        return _node_dict(self.root)

    @classmethod
    def from_dict(cls, name: str, tree: dict) -> "Timing":
        timing = cls(name)
        _fill(timing.root, tree)
        return timing

    def flat_items(self) -> list[tuple[str, float]]:
        """Every node as ("parent/child", seconds), depth first."""
        items: list[tuple[str, float]] = []

        def walk(node: _Node, prefix: str) -> None:
            for key, child in node.children.items():
                path = f"{prefix}{key}"
                items.append((path, child.time))
                walk(child, path + "/")

        walk(self.root, "")
        return items

    def tree_str(self) -> str:
        """`<name> tree view:`, then per level: the leaves on one line, then each inner node and its subtree."""
        lines = [f"{self.name} tree view:"]
        _render(self.root, 0, lines)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.tree_str()


def _node_dict(node: _Node) -> dict:
    return {key: {"time": child.time, "children": _node_dict(child)} for key, child in node.children.items()}


def _fill(node: _Node, tree: dict) -> None:
    for key, entry in tree.items():
        child = node.children[key] = _Node()
        child.time = float(entry["time"])
        _fill(child, entry.get("children", {}))


def _render(node: _Node, depth: int, lines: list[str]) -> None:
    indent = "  " * depth
    leaves = [f"{key}: {child.time:.4f}" for key, child in node.children.items() if not child.children]
    if leaves:
        lines.append(indent + ", ".join(leaves))
    for key, child in node.children.items():
        if child.children:
            lines.append(f"{indent}{key}: {child.time:.4f}")
            _render(child, depth + 1, lines)
