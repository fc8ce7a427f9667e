"""A bottleneck model of a run: which kind of work limits the frame rate, and what making it faster would buy.

Every second a process spends busy (work or loop overhead) is charged to one kind: `simulation` (a rollout
worker's env_step), `communication` (a rollout worker's per-step framework code, message sends and
(de)serialization, every loop's own overhead), `inference`, `learner` or `batcher` (the rest of those components'
work). Each process is a server whose busy fraction rises with the frame rate; the machine's cores are one more.
Throughput is limited by the busiest of them, so if kind X became k times faster:

    predicted FPS = FPS * B / B',   B = max(busy fraction of each process group, CPU demand / cores)

where B' is the same maximum with X's seconds divided by k. The verdict is the kind whose 2x speed-up buys the most.
Time a process spent runnable but waiting for a core is reported, not removed: on a machine shared with other work
every process gets a share of a core, and a process busy all the time is still the one the others wait for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sf.analysis.run_data import INIT_KEYS, ComponentActivity, Experiment, did_not_run
from sf.profiling.activity import LOOP_OVERHEAD, WAIT_PREFIX
from sf.utils.roles import Role

KINDS = ("simulation", "inference", "learner", "batcher", "communication")
COMMUNICATION_KEYS = {
    "send_messages",
    "deserialize",
    "serialize",
    "enqueue_policy_requests",
    "releasing_batches",
    LOOP_OVERHEAD,
    "dispatch",
}
ROLE_KIND = {Role.INFERENCE_WORKER: "inference", Role.LEARNER: "learner", Role.BATCHER: "batcher"}
SPEEDUP = 2.0
SERIAL = "the serial process"


@dataclass
class ProcessLoad:
    """One group of equivalent processes (e.g. all rollout workers): mean busy fraction per kind."""

    label: str
    count: int
    busy: dict[str, float]  # kind -> fraction of the process's time
    cpu: float | None  # cores used on average per process
    run_delay: float  # fraction of time runnable but not running

    @property
    def demand(self) -> float:
        return sum(self.busy.values())


@dataclass
class WhatIf:
    kind: str
    speedup: float
    fps_gain: float  # relative: 0.35 = +35 % FPS
    limit: str  # what limits the frame rate after the speed-up


@dataclass
class Verdict:
    kind: str
    limiting: str  # the process group or the cores that bound the rate now
    evidence: list[str]
    what_if: list[WhatIf]  # every kind, best first
    explanation: str = ""  # one sentence joining the kind and the limit: the report's "rate limited by" line
    kind_busy: float = 0.0  # the share of its time the limiting group spends on the verdict's kind


def cpu_by_kind(loads: list[ProcessLoad]) -> dict[str, float]:
    """Cores each kind of work uses, every process counted (a process's CPU split in proportion to its busy time)."""
    out: dict[str, float] = {}
    for load in loads:
        if load.cpu is None or load.demand <= 0:
            continue
        for kind, busy in load.busy.items():
            out[kind] = out.get(kind, 0.0) + load.count * load.cpu * busy / load.demand
    return out


def explain(kind: str, limiting: str, loads: list[ProcessLoad], cores: int | None) -> str:
    """Why `kind` is the verdict, in terms of what limits the rate: a busy process group, or the machine's cores,
    in which case the kind is the one using the most of them (so making it cheaper frees the most)."""
    if limiting.startswith("all ") and cores:
        used = sum(load.count * load.cpu for load in loads if load.cpu is not None)
        by_kind = cpu_by_kind(loads)
        share = by_kind.get(kind, 0.0)
        return (
            f"the machine's {cores} cores ({min(used, cores):.2f} in use, {min(1.0, used / cores):.0%}): every process "
            f"waits for a core, and {kind} work uses the most of them ({share:.2f} cores), so making it cheaper frees "
            "the most"
        )
    group = next((load for load in loads if load.label == limiting), None)
    if group is None:
        return limiting
    if limiting == SERIAL:
        return (
            f"{SERIAL} (busy {min(1.0, group.demand):.0%} of its time, {kind} {group.busy.get(kind, 0.0):.0%}): every "
            "component runs in it, on one core at most"
        )
    return (
        f"{limiting} (busy {min(1.0, group.demand):.0%} of its time, {kind} {group.busy.get(kind, 0.0):.0%}): the "
        "others wait for it"
    )


def kind_seconds(component: ComponentActivity, loop_overhead: bool = True) -> dict[str, float]:
    """The component's busy seconds by kind (waits excluded). The loop's overhead is the process's, repeated in the
    tree of every component the process hosts: `loop_overhead=False` leaves it out, for all but one of them."""
    out: dict[str, float] = {}
    role_kind = ROLE_KIND.get(component.role, "communication")

    def charge(kind: str, seconds: float) -> None:
        if seconds > 0:
            out[kind] = out.get(kind, 0.0) + seconds

    def walk(tree: dict, kind: str | None) -> None:
        for key, node in tree.items():
            if kind is None and (
                key.startswith(WAIT_PREFIX) or key in INIT_KEYS or (key == LOOP_OVERHEAD and not loop_overhead)
            ):
                continue  # waits, one-off set-up, a shared loop's overhead counted elsewhere
            node_kind = kind
            if key in COMMUNICATION_KEYS:
                node_kind = "communication"
            elif component.role == Role.ROLLOUT_WORKER and key == "env_step":
                node_kind = "simulation"
            children = node.get("children", {})
            if node_kind is not None:
                charge(node_kind, node["time"])
            else:
                charge(role_kind, node["time"] - sum(c["time"] for c in children.values()))
                walk(children, None)

    if component.role == Role.RUNNER:
        return {}
    walk(component.tree, None)
    return out


def process_loads(experiment: Experiment) -> list[ProcessLoad]:
    """Group the processes by the components they host and average their busy fractions per kind."""
    by_pid: dict[int, list[ComponentActivity]] = {}
    for c in experiment.components:
        by_pid.setdefault(c.pid, []).append(c)
    groups: dict[str, list[tuple[dict[str, float], float | None, float]]] = {}
    # a process whose components never ran took no part in the frames (consistency.check names it); unless none ran
    working = {pid for pid, members in by_pid.items() if any(c.role != Role.RUNNER for c in members)}
    idle = {pid for pid in working if all(did_not_run(c) for c in by_pid[pid] if c.role != Role.RUNNER)}
    for pid, members in by_pid.items():
        if pid in idle and idle != working:
            continue
        hosted = [c for c in members if c.role != Role.RUNNER] or members
        lifetime = max(c.activity.lifetime_s for c in hosted)
        if lifetime <= 0:
            continue
        busy: dict[str, float] = {}
        for i, c in enumerate(hosted):
            for kind, seconds in kind_seconds(c, loop_overhead=i == 0).items():
                busy[kind] = busy.get(kind, 0.0) + seconds / lifetime
        total = sum(busy.values())
        if total > 1.0:  # more busy time than the loop lived: inconsistent data (consistency.check names it)
            busy = {kind: share / total for kind, share in busy.items()}
        sampled = next((c for c in members if c.cpu_s is not None), None)
        cpu = delay = None
        if sampled is not None:
            wall = sampled.wall_s or lifetime
            # a process cannot use more cores than the machine has (consistency.check says when the data claims so)
            cpu = min(sampled.cpu_s / wall, float(sampled.cores or math.inf))
            delay = (sampled.run_delay_s or 0.0) / wall
        roles = {c.role for c in hosted}
        # every component in one process (serial mode): one group, named for what it is
        label = SERIAL if {Role.ROLLOUT_WORKER, Role.LEARNER} <= roles else " + ".join(sorted(str(r) for r in roles))
        groups.setdefault(label, []).append((busy, cpu, delay or 0.0))
    loads = []
    for label, members in groups.items():
        kinds = {k for busy, _, _ in members for k in busy}
        mean_busy = {k: sum(b.get(k, 0.0) for b, _, _ in members) / len(members) for k in kinds}
        cpus = [c for _, c, _ in members if c is not None]
        loads.append(
            ProcessLoad(
                label,
                len(members),
                mean_busy,
                sum(cpus) / len(cpus) if cpus else None,
                sum(d for _, _, d in members) / len(members),
            )
        )
    return loads


def _speedup(speedups: dict, label: str, kind: str) -> float:
    return speedups.get((label, kind), speedups.get(kind, 1.0))


def bound(loads: list[ProcessLoad], cores: float | None, speedups: dict) -> tuple[float, str]:
    """The model's B (or B' with each kind's seconds divided by its entry in `speedups`: keyed by kind, or by
    (process group, kind) where a change sped the same kind up differently in different processes) and what attains
    it."""
    best, limit = 0.0, "nothing"
    cpu_total, cpu_known = 0.0, True
    for load in loads:
        total = sum(load.busy.values())
        saved = sum(seconds * (1 - 1 / _speedup(speedups, load.label, kind)) for kind, seconds in load.busy.items())
        value = max(0.0, load.demand - saved)
        if value > best:
            best, limit = value, load.label
        if load.cpu is None:
            cpu_known = False
        else:
            # CPU follows busy time in proportion: a kind that sleeps (an env waiting on I/O) frees few cores
            cpu_saved = load.cpu * (saved / total) if total > 0 else 0.0
            cpu_total += load.count * max(0.0, load.cpu - cpu_saved)
    if cpu_known and cores:
        demand = cpu_total / cores
        if demand > best:
            best, limit = demand, f"all {cores:g} cores"
    return best, limit


def assess(experiment: Experiment, speedup: float = SPEEDUP) -> Verdict:
    loads = process_loads(experiment)
    cores = next((c.cores for c in experiment.components if c.cores), None)
    now, limiting = bound(loads, cores, {})
    what_if = []
    for kind in KINDS:
        after, limit = bound(loads, cores, {kind: speedup})
        gain = now / after - 1 if after > 0 else float("inf")
        what_if.append(WhatIf(kind, speedup, gain, limit))
    limiting_busy = next((load.busy for load in loads if load.label == limiting), {})
    what_if.sort(key=lambda w: (-round(w.fps_gain, 3), -limiting_busy.get(w.kind, 0.0)))
    kind = what_if[0].kind
    evidence = [
        f"{load.label} (x{load.count}): busy {sum(load.busy.values()):.0%} of its time, "
        + ", ".join(f"{k} {v:.0%}" for k, v in sorted(load.busy.items(), key=lambda kv: -kv[1]))
        + (f"; {load.cpu:.2f} cores each" if load.cpu is not None else "")
        + (
            f"; runnable but waiting for a core {load.run_delay:.0%} (an oversubscribed machine inflates every"
            " busy time)"
            if load.run_delay >= 0.2
            else ""
        )
        for load in sorted(loads, key=lambda load: -sum(load.busy.values()))
        if load.busy
    ]
    if cores and all(load.cpu is not None for load in loads):
        used = sum(load.count * load.cpu for load in loads)
        shown = min(used, float(cores))
        others = others_cores(experiment)
        evidence.append(
            f"CPU: {shown:.2f} of {cores} cores in use ({shown / cores:.0%})"
            + (f"; {used:.2f} measured, more than the machine has" if used > cores + 0.005 else "")
            + (f"; other programs kept {others:.2f} busy" if others >= 0.05 else "")
        )
    return Verdict(
        kind, limiting, evidence, what_if, explain(kind, limiting, loads, cores), limiting_busy.get(kind, 0.0)
    )


def others_cores(experiment: Experiment) -> float:
    """Cores other programs kept busy over the window: the machine's busy cores less this run's processes' CPU
    (each process once). 0 where the series has no machine-wide figure."""
    if experiment.machine_cores is None:
        return 0.0
    ours = {c.pid: c.cpu_s / c.wall_s for c in experiment.components if c.cpu_s is not None and c.wall_s}
    return max(0.0, experiment.machine_cores - sum(ours.values()))


def group_kind_per_frame(experiment: Experiment) -> dict[tuple[str, str], float]:
    """(process group, kind) -> busy seconds per frame of one process of the group: what a change is measured on."""
    if experiment.fps <= 0:
        return {}
    return {
        (load.label, kind): busy / experiment.fps
        for load in process_loads(experiment)
        for kind, busy in load.busy.items()
    }


def predict_fps(experiment: Experiment, speedups: dict) -> float:
    """The model's frame rate if each kind in `speedups` were that many times faster (keys: a kind, or a (process
    group, kind) pair). To check it against a real change, feed it the speed-ups measured per group and kind
    (`group_kind_per_frame` of both runs): one change often speeds a kind up more in one process than in another."""
    loads = process_loads(experiment)
    cores = next((c.cores for c in experiment.components if c.cores), None)
    now, _ = bound(loads, cores, {})
    after, _ = bound(loads, cores, speedups)
    return experiment.fps * now / after
