"""yappi: deterministic like cProfile but per thread and with a choice of clock.

Writes `<stem>.pstat` (pstats format) and `callgrind.out.<name>` (KCachegrind, QCachegrind, PyCharm). The clock is
wall time unless `--profiling_options clock=cpu`; the callgrind header states it, with the window's wall seconds
and the process's CPU seconds over the same window, so the two clocks can be compared.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sf.profiling.config import ProfilingConfig


class YappiBackend:
    warmup_steps = 0
    ranges = False

    def __init__(self, pcfg: ProfilingConfig, stem: Path, warmup: int = 0, active: int = 0):
        import yappi

        self.yappi = yappi
        self.clock = pcfg.options.get("clock", "wall")
        self.pstat = stem.with_name(stem.name + ".pstat")
        self.callgrind = stem.with_name(f"callgrind.out.{stem.name}")

    def start(self) -> None:
        self.yappi.clear_stats()
        self.yappi.set_clock_type(self.clock)
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        self.yappi.start(builtins=False)

    def step(self) -> None:
        pass

    def stop(self) -> None:
        self.yappi.stop()
        wall, cpu = time.perf_counter() - self.wall0, time.process_time() - self.cpu0
        stats = self.yappi.get_func_stats()
        stats.save(str(self.pstat), type="pstat")
        tmp = self.callgrind.with_name(self.callgrind.name + ".tmp")
        stats.save(str(tmp), type="callgrind")
        header = (
            f"desc: Clock: {self.clock} (yappi ticks are {'wall' if self.clock == 'wall' else 'CPU'} time)\n"
            f"desc: Window: {wall:.3f} s wall, {cpu:.3f} s process CPU (pid {os.getpid()})\n"
        )
        text = tmp.read_text()
        tmp.write_text(text.replace("events: Ticks", header + "events: Ticks", 1))
        os.replace(tmp, self.callgrind)
        self.yappi.clear_stats()

    def outputs(self) -> list[Path]:
        return [self.pstat, self.callgrind]
