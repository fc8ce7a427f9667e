"""Ranges on every Timing key: while a capture window is open, each Timing scope also opens an NVTX range (on CUDA)
and a torch.profiler.record_function named `<group>/<key path>`, e.g. `learner/train/update`, so Nsight Systems and
torch traces show sf's own structure. Outside a window the hook is not installed and scopes cost what they always do.
"""

from __future__ import annotations

from sf.utils.roles import role_of
from sf.utils.timing import ScopeHook, add_scope_hook, remove_scope_hook


def range_name(component: str, path: str) -> str:
    """`Learner 0`, `train/update` -> `learner/train/update` (the role in snake case); a component of no role keeps
    its own name."""
    role = role_of(component)
    group = component if role is None else "".join(f"_{c.lower()}" if c.isupper() else c for c in role.value)[1:]
    return f"{group}/{path}"


class ScopeRanges:
    """Installed for the length of one window; balances its ranges even if the window closes inside a scope."""

    def __init__(self):
        import torch

        self.torch = torch
        self.nvtx = torch.cuda.is_available()
        self.names: dict[object, str] = {}
        self.open: list[tuple[object, object]] = []  # (node, record_function) innermost last
        self.hook = ScopeHook(self._enter, self._exit)

    def install(self) -> None:
        add_scope_hook(self.hook)

    def remove(self) -> None:
        remove_scope_hook(self.hook)
        while self.open:
            self._pop()

    def _enter(self, node) -> None:
        name = self.names.get(node)
        if name is None:
            name = self.names[node] = range_name(node.timing.name, node.path)
        if self.nvtx:
            self.torch.cuda.nvtx.range_push(name)
        record = self.torch.profiler.record_function(name)
        record.__enter__()
        self.open.append((node, record))

    def _exit(self, node) -> None:
        if self.open and self.open[-1][0] is node:  # a scope entered before the window opened has no range
            self._pop()

    def _pop(self) -> None:
        _, record = self.open.pop()
        record.__exit__(None, None, None)
        if self.nvtx:
            self.torch.cuda.nvtx.range_pop()
