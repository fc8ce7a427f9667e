"""Numbers a user can trust: what a run's data claims that a machine cannot have, and components that did not run.

The report, `sf.profile top` and the progress line show these warnings next to the verdict instead of silently
showing a share above 100 % or more cores than the machine has. The model (`bottleneck.process_loads`) clips such
values; this module says that it did, and why the data was off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sf.analysis.run_data import ComponentActivity, Experiment, did_not_run
from sf.utils.roles import Role

SLACK = 1.05  # clocks read at slightly different moments: 5 % over is rounding, not an error
MIN_LOOP_SHARE = 0.5  # a loop that lived less than half of the window's wall time started late or stalled


@dataclass
class Finding:
    component: str
    message: str

    def line(self) -> str:
        return f"{self.component}: {self.message}"


def _work_keys(tree: dict) -> dict[str, float]:
    return {k: v["time"] for k, v in tree.items() if not k.startswith("wait_") and k != "loop_overhead"}


def _idle(c: ComponentActivity, lifetime: float) -> list[Finding]:
    """A component with no work in its tree: one that never entered its loop did not run; one that waited in its loop
    all of a window is idle there (a population's learner between two of its batches), which the shares show."""
    if c.activity.wait_s <= 0:
        held = ", ".join(sorted(_work_keys(c.tree))) or "nothing"
        return [
            Finding(
                c.name,
                f"did no work (its tree holds only {held}; its loop lived {lifetime:.3g} s): it did not run, "
                "and the verdict counts without it",
            )
        ]
    if c.steady:
        return []
    return [Finding(c.name, f"did no work: its loop waited {c.activity.wait_s:.3g} s for work that never came")]


def check(experiment: Experiment) -> list[Finding]:
    findings = []
    frames = experiment.frames or sum(int(v) for v in (experiment.summary.get("env_frames") or {}).values())
    # over a whole life, a loop is late against the run's clock (the runner's, which starts once the kernels are
    # compiled), not its process's: a serial process imports torch and compiles before any loop can start
    run_clock = experiment.summary.get("wall_time_s")
    for c in experiment.components:
        if c.role == Role.RUNNER:
            continue
        lifetime = c.activity.lifetime_s
        span = c.wall_s if c.steady else run_clock or c.wall_s
        if did_not_run(c) and frames > 0:
            findings += _idle(c, lifetime)
        elif span and lifetime < MIN_LOOP_SHARE * span:
            findings.append(
                Finding(
                    c.name,
                    f"its loop lived {lifetime:.3g} s of {span:.3g} s: it started late or stalled, its shares "
                    "cover only that time",
                )
            )
        total = c.activity.work_s + c.activity.wait_s + c.activity.overhead_s
        if lifetime > 0 and total > SLACK * lifetime:
            findings.append(
                Finding(
                    c.name,
                    f"inconsistent data: {total:.3g} s of work, waits and loop overhead in {lifetime:.3g} s of "
                    "life; its shares are scaled down to 100 %",
                )
            )
        if c.cpu_s is not None and c.cores and (c.wall_s or lifetime) > 0:
            used = c.cpu_s / (c.wall_s or lifetime)
            if used > SLACK * c.cores:
                findings.append(
                    Finding(
                        c.name,
                        f"inconsistent data: {used:.3g} cores over the window on a {c.cores}-core machine; shown as "
                        f"{c.cores}",
                    )
                )
    findings += _machine_total(experiment)
    return _one_per_process(findings, experiment)


def _machine_total(experiment: Experiment) -> list[Finding]:
    """The processes together cannot use more cores than the machine has; snapshots of different processes taken at
    slightly different moments (on a loaded machine, late) can make them seem to."""
    per_process = {}
    for c in experiment.components:
        if c.cpu_s is not None and (c.wall_s or c.activity.lifetime_s) > 0:
            per_process[c.pid] = (
                min(c.cpu_s / (c.wall_s or c.activity.lifetime_s), float(c.cores or math.inf)),
                c.cores,
            )
    cores = next((n for _, n in per_process.values() if n), None)
    used = sum(cpu for cpu, _ in per_process.values())
    if not cores or used <= SLACK * cores:
        return []
    return [
        Finding(
            "all processes",
            f"inconsistent data: {used:.2f} cores in use on a {cores}-core machine (each process's CPU is read when "
            f"its snapshot arrives, and a busy machine delays some); counted as {cores}",
        )
    ]


def _one_per_process(findings: list[Finding], experiment: Experiment) -> list[Finding]:
    """Components of one process share its CPU figure: say an inconsistent one once."""
    pid_of = {c.name: c.pid for c in experiment.components}
    seen, out = set(), []
    for f in findings:
        key = (pid_of.get(f.component), f.message) if "cores over the window" in f.message else (f.component, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def clip_share(value: float) -> float:
    """A share of one component's time as shown: never below 0 or above 100 %."""
    return min(1.0, max(0.0, value))
