"""cProfile: deterministic, every Python call; `<stem>.prof` opens with pstats, snakeviz or gprof2dot."""

from __future__ import annotations

import cProfile
from pathlib import Path

from sf.profiling.config import ProfilingConfig


class CProfileBackend:
    warmup_steps = 0
    ranges = False

    def __init__(self, pcfg: ProfilingConfig, stem: Path, warmup: int = 0, active: int = 0):
        self.path = stem.with_name(stem.name + ".prof")
        self.profile = cProfile.Profile()

    def start(self) -> None:
        self.profile.enable()

    def step(self) -> None:
        pass

    def stop(self) -> None:
        self.profile.disable()
        self.profile.dump_stats(str(self.path))

    def outputs(self) -> list[Path]:
        return [self.path]
