"""The protocol every profiler backend follows, and the registry that picks one by name.

A backend object covers one capture window of one process: `start()` when the window opens, `step()` at every
learner iteration inside it, `stop()` when it closes (its outputs are complete once `stop()` returns),
`outputs()` the files it wrote. Whole-life profiling is one window from the loop's start to the process's end.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from sf.profiling.backends.catalog import CATALOG, load


class Backend(Protocol):
    warmup_steps: int
    """Learner iterations the window opens early (torch.profiler's warm-up); 0 for most."""
    ranges: bool
    """Whether Timing scopes also open NVTX / record_function ranges while the window is open."""

    def start(self) -> None: ...

    def step(self) -> None: ...

    def stop(self) -> None: ...

    def outputs(self) -> list[Path]: ...


BackendFactory = Callable[..., Backend]
"""(section, output stem such as profiling/Learner_0 or profiling/Learner_0.steps3-5, warmup=iterations opened early,
active=iterations in the window or 0 for the whole life) -> backend. The class's `warmup_steps` is the most it wants."""

_REGISTRY: dict[str, str | BackendFactory] = {name: info.factory for name, info in CATALOG.items()}


def register_backend(name: str, factory: BackendFactory) -> None:
    _REGISTRY[name] = factory


def get_backend(name: str) -> BackendFactory:
    """The factory for `name`; imported on first use, so an unused profiler's package is never loaded."""
    entry = _REGISTRY[name]
    if isinstance(entry, str):
        entry = _REGISTRY[name] = load(entry)
    return entry
