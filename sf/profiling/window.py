"""Capture windows over learner iterations: which backend object is open, when it starts, steps and stops.

A process learns the learner's iteration from the policy version it already sees (the learner's own counter, or
the version the policy store publishes): while version v is the newest, iteration v + 1 is the one being trained.
Each run of consecutive `--profiling_steps` is one window; without steps the window is the whole loop.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sf.profiling.backends import BackendFactory
from sf.profiling.config import ProfilingConfig
from sf.profiling.ranges import ScopeRanges

log = logging.getLogger("sf")


class StepGate:
    def __init__(self, pcfg: ProfilingConfig, name: str, factory: BackendFactory):
        self.pcfg = pcfg
        self.name = name
        self.factory = factory
        self.early = getattr(factory, "warmup_steps", 0)
        self.step: int | None = None
        self.window: tuple[int, int] | None = None
        self.backend = None
        self.ranges: ScopeRanges | None = None
        self.outputs: list[Path] = []

    def begin(self, step: int) -> None:
        """The component loop starts: open the whole-life window, or the window `step` falls in."""
        prepare = getattr(self.factory, "prepare", None)
        if prepare is not None:
            prepare()
        if self.pcfg.steps:
            self.at_step(step)
        else:
            self.step = step
            self._open(None, step)

    def at_step(self, step: int) -> None:
        """Called with the iteration now in progress (or next); cheap when it has not changed."""
        if step == self.step or not self.pcfg.steps:
            return
        previous, self.step = self.step, step
        window = self._window_at(step)
        if self.backend is not None and window != self.window:
            self._close()
        if window is None:
            return
        if self.backend is None:
            self._open(window, step)
        else:
            for _ in range(step - previous):
                self.backend.step()

    def end(self) -> None:
        if self.backend is not None:
            self._close()

    def _window_at(self, step: int) -> tuple[int, int] | None:
        for first, last in self.pcfg.windows:
            if max(1, first - self.early) <= step <= last:
                return first, last
        return None

    def _open(self, window: tuple[int, int] | None, step: int) -> None:
        out = self.pcfg.output_dir
        out.mkdir(parents=True, exist_ok=True)
        if window is None:
            stem, warmup, active = out / self.name, 0, 0
        else:
            first, last = window
            label = f"step{first}" if first == last else f"steps{first}-{last}"
            stem = out / f"{self.name}.{label}"
            warmup, active = max(0, first - step), last - max(first, step) + 1
        self.window = window
        self.backend = self.factory(self.pcfg, stem, warmup=warmup, active=active)
        if self.backend.ranges:
            self.ranges = ScopeRanges()
            self.ranges.install()
        self.backend.start()
        log.info(
            "%s: %s profiling %s",
            self.name,
            self.pcfg.backend,
            "the whole run" if window is None else f"learner iterations {window[0]}-{window[1]}",
        )

    def _close(self) -> None:
        backend, self.backend = self.backend, None
        try:
            backend.stop()
        finally:
            if self.ranges is not None:
                self.ranges.remove()
                self.ranges = None
        self.outputs += backend.outputs()
        for path in backend.outputs():
            log.info("%s: profiler output %s", self.name, path)
