"""pyinstrument: a low-overhead sampling profiler; `<stem>.html` opens in a browser, `<stem>.speedscope.json` in
https://www.speedscope.app."""

from __future__ import annotations

from pathlib import Path

from sf.profiling.config import ProfilingConfig

INTERVAL_S = 0.001


class PyinstrumentBackend:
    warmup_steps = 0
    ranges = False

    def __init__(self, pcfg: ProfilingConfig, stem: Path, warmup: int = 0, active: int = 0):
        from pyinstrument import Profiler

        self.profiler = Profiler(interval=INTERVAL_S, async_mode="disabled")
        self.html = stem.with_name(stem.name + ".html")
        self.speedscope = stem.with_name(stem.name + ".speedscope.json")

    def start(self) -> None:
        self.profiler.start()

    def step(self) -> None:
        pass

    def stop(self) -> None:
        from pyinstrument.renderers import SpeedscopeRenderer

        self.profiler.stop()
        self.html.write_text(self.profiler.output_html())
        self.speedscope.write_text(self.profiler.output(SpeedscopeRenderer()))

    def outputs(self) -> list[Path]:
        return [self.html, self.speedscope]
