"""torch.profiler: operator-level CPU activity (and CUDA kernels when there is a GPU) with sf's Timing scopes as
record_function ranges. Writes `<stem>.pt.trace.json` (Chrome trace: chrome://tracing, Perfetto) and the same trace
under `tensorboard/` for TensorBoard's profiler plugin.

With --profiling_steps the schedule is derived from the window: the profiler starts one learner iteration early
to warm up (when there is an iteration before the window), then records the window's iterations.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

from sf.profiling.config import ProfilingConfig


class TorchBackend:
    warmup_steps = 1
    ranges = True

    def __init__(self, pcfg: ProfilingConfig, stem: Path, warmup: int = 0, active: int = 0):
        self.trace = stem.with_name(stem.name + ".pt.trace.json")
        self.tb_dir = stem.parent / "tensorboard"
        self.warmup = warmup
        self.active_steps = active
        self.saved = False

    @staticmethod
    def prepare() -> None:
        """Pay the profiler's one-time start-up (seconds on a loaded machine) before the loop runs, not inside a
        window, where it would push the process's window iterations away from the learner's."""
        from torch.profiler import profile

        with profile(activities=_activities()):
            pass

    def start(self) -> None:
        from torch.profiler import profile, schedule

        plan = None
        if self.active_steps:
            with warnings.catch_warnings():  # a window at the first iteration has nothing before it to warm up on
                warnings.filterwarnings("ignore", message=".*warmup.*")
                plan = schedule(wait=0, warmup=self.warmup, active=self.active_steps, repeat=1)
        self.profiler = profile(activities=_activities(), schedule=plan, on_trace_ready=self._save)
        self.profiler.start()

    def step(self) -> None:
        self.profiler.step()

    def stop(self) -> None:
        self.profiler.stop()
        if not self.saved:  # no schedule: stop() ends the one recording without calling on_trace_ready
            self._save(self.profiler)

    def _save(self, prof) -> None:
        prof.export_chrome_trace(str(self.trace))
        self.tb_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.trace, self.tb_dir / self.trace.name)
        self.saved = True

    def outputs(self) -> list[Path]:
        return [self.trace, self.tb_dir / self.trace.name]


def _activities() -> list:
    import torch
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
