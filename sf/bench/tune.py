"""`--auto_tune=True`: short training runs of candidate layouts within a time budget, steered by their verdicts.

The given layout (the defaults) is always measured first. From the best layout so far, `sf.bench.layouts`
proposes the moves its verdict calls for; each is measured with a short benchmark-mode training run and
the profile report. A move that beats the best by more than the run-to-run noise becomes the new best and
its own verdict proposes the next moves. The search ends when the budget would be overrun, when no move is
left, or when the verdict says the layout cannot help (learner- or batcher-bound). The recommendation is
never slower than the defaults as measured: below the noise margin the defaults stay.
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sf.bench.layouts import UNFIXABLE, Layout, Limits, candidates, replace_flags
from sf.bench.runs import profile_verdict, resolved_inference_placement, run_training
from sf.envs.families import EnvFamily

NOISE = 0.05  # a layout must beat the best by this share to count as faster
MIN_TRIAL_S = 2.0
STOP_MARGIN_S = 5.0  # kept at the end of the budget: a trial is told to stop then, and killed halfway through it
REPORT_ALLOWANCE_S = 10.0  # the profile report after each trial (at most)
NEVER = 10**12  # stop flags of a trial: it is stopped by time after its first frames


@dataclass
class Trial:
    layout: Layout
    reason: str
    fps: float  # steady FPS of the short run, 0 when it failed
    verdict: str | None
    status: str
    wall_s: float
    experiment_dir: str


@dataclass
class TuneResult:
    budget_s: float
    trial_s: float
    trials: list[Trial] = field(default_factory=list)
    best: Trial | None = None
    note: str = ""
    command: str = ""
    elapsed_s: float = 0.0

    def to_json(self) -> dict:
        data = asdict(self)
        for trial in data["trials"] + ([data["best"]] if data["best"] else []):
            trial["flags"] = Layout(**trial["layout"]).flags()
        return data


def default_trial_s(budget_s: float) -> float:
    """About eight trials per budget, each long enough for a steady rate after start-up."""
    return max(8.0, min(60.0, budget_s / 8))


def pick_best(defaults: Trial, trials: list[Trial]) -> Trial | None:
    """The fastest trial, unless it is within the noise of the defaults: then the defaults. None if none ran."""
    measured = [t for t in trials if t.fps > 0]
    if not measured:
        return None
    fastest = max(measured, key=lambda t: t.fps)
    return fastest if fastest.fps > defaults.fps * (1 + NOISE) else defaults


def resolved_placement(layout: Layout, experiment_dir: str) -> Layout:
    """`layout` with the inference placement its run chose for "auto", so the next moves start from what ran."""
    placement = resolved_inference_placement(experiment_dir) if layout.inference_placement == "auto" else None
    return layout if placement is None else replace(layout, inference_placement=placement)


class Tuner:
    def __init__(
        self,
        family: EnvFamily,
        flags: list[str],
        cfg,
        bench_dir: Path,
        budget_s: float,
        trial_s: float | None = None,
        log=print,
        started: float | None = None,
    ):
        """`started` (time.monotonic()) is when the budget began, if before this object: checks of the flags count."""
        self.family = family
        self.flags = flags
        self.bench_dir = bench_dir
        self.budget_s = budget_s
        self.trial_s = trial_s or default_trial_s(budget_s)
        self.limits = Limits(cpus=os.cpu_count() or 1, serial=cfg.serial_mode)
        self.defaults = Layout.from_cfg(cfg)
        self.log = log
        self.start = time.monotonic() if started is None else started
        self.deadline = self.start + budget_s
        self.stop_margin_s = min(STOP_MARGIN_S, 0.1 * budget_s)
        self.report_allowance_s = min(REPORT_ALLOWANCE_S, 0.15 * budget_s)
        self.startup_s = 0.0  # measured on the first trial: wall time beyond its training seconds

    def run(self) -> TuneResult:
        result = TuneResult(budget_s=self.budget_s, trial_s=self.trial_s)
        first = self._trial(self.defaults, "the given layout", len(result.trials))
        if first is None:
            result.note = f"the budget of {self.budget_s:.0f} s is too short for one trial"
            return self._finish(result)
        result.trials.append(first)
        best = first
        queue = candidates(best.layout, best.verdict, self.limits)
        tried = {first.layout}
        while queue:
            layout, reason = queue.pop(0)
            if layout in tried:
                continue
            trial = self._trial(layout, reason, len(result.trials))
            if trial is None:
                result.note = "budget spent"
                break
            tried.add(layout)
            result.trials.append(trial)
            if trial.fps > best.fps * (1 + NOISE):
                best = trial
                queue = candidates(best.layout, best.verdict, self.limits)
        if not result.note:
            result.note = UNFIXABLE.get(best.verdict or "", "no move left to try")
        result.best = pick_best(first, result.trials)
        if result.best is None:
            result.note = f"no trial completed ({result.note})"
        return self._finish(result)

    def _finish(self, result: TuneResult) -> TuneResult:
        if result.best is not None:
            layout_argv = replace_flags(self.flags, result.best.layout, drop=("experiment",))  # not the tune folder
            result.command = f"python -m {self.family.train_module} {shlex.join(layout_argv)}"
        result.elapsed_s = time.monotonic() - self.start
        return result

    def _trial(self, layout: Layout, reason: str, index: int) -> Trial | None:
        """Measure `layout`, or None when what is left of the budget cannot hold a trial."""
        left = self.deadline - time.monotonic() - self.stop_margin_s - self.report_allowance_s
        seconds = min(self.trial_s, left - self.startup_s)
        if seconds < MIN_TRIAL_S:
            return None
        self.log(f"trial {index}: {layout.describe()} ({reason}), {seconds:.0f} s")
        flags = [*self.flags, *layout.flags(), f"--train_for_seconds={NEVER}", f"--train_for_env_steps={NEVER}"]
        run = run_training(
            self.family.train_module,
            flags,
            self.bench_dir,
            f"trial_{index}",
            measure_s=seconds,
            deadline=self.deadline - self.stop_margin_s,
            grace_s=self.stop_margin_s / 2,
        )
        if index == 0:
            self.startup_s = max(0.0, run.wall_s - seconds)
        verdict = None
        if run.ok and self.deadline - time.monotonic() > self.stop_margin_s:
            verdict = profile_verdict(run.experiment_dir, timeout=max(1.0, self.deadline - time.monotonic() - 1.0))
        fps = run.best_fps if run.ok else 0.0
        layout = resolved_placement(layout, run.experiment_dir)
        self.log(f"  {fps:,.0f} FPS, {f'{verdict}-bound' if verdict else 'no verdict'} ({run.status})")
        return Trial(layout, reason, fps, verdict, run.status, run.wall_s, run.experiment_dir)


def format_trials(result: TuneResult) -> str:
    lines = [f"{'#':>2}  {'FPS':>9}  {'verdict':<22}  layout (why tried)"]
    for i, trial in enumerate(result.trials):
        verdict = f"{trial.verdict}-bound" if trial.verdict else ("n/a" if trial.fps > 0 else trial.status)
        lines.append(f"{i:>2}  {trial.fps:>9,.0f}  {verdict:<22}  {trial.layout.describe()} ({trial.reason})")
    return "\n".join(lines)
