"""Advice, not only a verdict: the layout moves the bottleneck model can price, with the flag to change.

The verdict says which kind of work limits the frame rate; a user also wants to know what to do about it. Where cores
sit idle or a process group waits, a different layout often buys more than a faster kernel, and the model of
`sf.analysis.bottleneck` prices such moves the same way it prices a 2x speed-up: each move rewrites the process
groups' busy fractions and CPU demand, and the frame rate scales with B / B'.

- `--num_workers`: the rollout processes' busy time per frame spread over more of them, same CPU seconds per frame;
- `--num_envs_per_worker`: twice the envs per message, so per-message work (communication) halves in every group;
- `--policy_workers_per_policy`: the inference processes' busy time spread over more of them;
- `--inference_placement`: inference moved into the rollout processes (its messages gone), or out of them into one
  batching process (the messages it adds not counted: an upper bound). Not proposed into the rollout processes for a
  model with an image encoder: each worker would run the conv forward on its own few envs, a cost per sample the
  model cannot price, and on the Doom suite that move measured 5-11 % slower (docs/performance.md, section 9);
- `--batch_size`: the learner's per-step work (`clip`, `after_optimizer`) runs half as often;
- `--num_epochs`: the learner's `train` scope halves (this changes the algorithm, and the advice says so);
- `--serial_mode=False`: a serial run split into the parallel layout's processes.

The report, `sf.profile top` and the progress line all call `advise`, so the three never disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from sf.analysis.bottleneck import (
    SERIAL,
    ProcessLoad,
    Verdict,
    assess,
    bound,
    cpu_by_kind,
    kind_seconds,
    others_cores,
    process_loads,
)
from sf.analysis.run_data import Experiment
from sf.utils.roles import Role

MIN_GAIN = 0.10  # a move the model prices below +10 % is within the noise of the model itself
MAX_SCALE = 4  # proposals go at most 4x beyond the current count: the model is linear, real runs are not
OPTIMISTIC_MIN_GAIN = 0.25  # for moves whose cost the model cannot see (messages between processes)


@dataclass
class Move:
    flag: str
    now: str
    to: str
    fps_gain: float  # relative: 0.35 = +35 % FPS
    limit: str  # what would limit the rate after the move
    why: str
    algorithm_change: str = ""  # what the move changes in how the policy learns (a layout move changes nothing)

    def line(self) -> str:
        return (
            f"{self.flag}={self.to} (now {self.now}): about {self.fps_gain:+.0%} FPS, then limited by {self.limit}; "
            f"{self.why}"
        )

    def short(self) -> str:
        return f"{self.flag}={self.to} {self.fps_gain:+.0%}"

    def progress_text(self) -> str:
        """The move as the progress line offers it: `--num_workers=8 +300% FPS`, and for a move that changes the
        algorithm, what it changes (a reader of the line alone would take it for a free speed-up)."""
        change = f" (changes the algorithm: {self.algorithm_change})" if self.algorithm_change else ""
        return f"{self.short()} FPS{change}"


@dataclass
class Advice:
    verdict: Verdict
    bound: float  # B: the busiest group's busy fraction, or the CPU demand over the cores
    cores: int | None
    moves: list[Move] = field(default_factory=list)
    cpu_by_kind: dict[str, float] = field(default_factory=dict)

    @property
    def cores_bound(self) -> bool:
        return self.verdict.limiting.startswith("all ")

    def headline(self) -> str:
        """`learner-bound 93 %`: the verdict and how busy the part that sets the rate is (the cores, when they do).
        Where that part spends much of its time on other kinds of work (every kind, in a serial run), both shares:
        `learner-bound: one process busy 95 %, learner 55 %`, the learner being the largest part of what keeps the
        one process busy."""
        kind = self.verdict.kind
        share = _pct(self.bound)
        if self.cores_bound:
            return f"{kind}-bound, cores {share}"
        if self.verdict.kind_busy < SHARED_PART * min(self.bound, 1.0):
            where = _group_words(self.verdict.limiting)
            return f"{kind}-bound: {where} busy {share}, {kind} {_pct(self.verdict.kind_busy)}"
        return f"{kind}-bound {share}"

    def limit_line(self) -> str:
        """The limit in a few words, consistent with the headline."""
        if self.cores_bound:
            return (
                f"the {self.cores} cores ({min(self.bound, 1.0):.0%} in use); {self.verdict.kind} work uses the most "
                f"of them ({self.cpu_by_kind.get(self.verdict.kind, 0.0):.1f})"
            )
        if self.verdict.limiting == SERIAL:
            return f"{SERIAL} busy {min(self.bound, 1.0):.0%}, every component on one core"
        return f"{self.verdict.limiting} busy {min(self.bound, 1.0):.0%}; the others wait for it"


SHARED_PART = 0.75  # below this share of the limit's busy time, the headline names the kind's own share too


def _pct(value: float) -> str:
    return f"{min(value, 1.0):.0%}".replace("%", " %")


def _group_words(label: str) -> str:
    """A process group as the headline names it."""
    if label == SERIAL:
        return "one process"
    if "RolloutWorker" in label:
        return "rollout processes"
    if "Learner" in label:
        return "the learner's process"
    if "InferenceWorker" in label:
        return "inference processes"
    return label


def _cores(experiment: Experiment) -> int | None:
    return next((c.cores for c in experiment.components if c.cores), None)


def _scaled(load: ProcessLoad, count: int) -> ProcessLoad:
    """The same work per frame spread over `count` processes instead of `load.count`."""
    f = count / load.count
    return replace(
        load,
        count=count,
        busy={k: v / f for k, v in load.busy.items()},
        cpu=None if load.cpu is None else load.cpu / f,
    )


def _gain(now: float, loads: list[ProcessLoad], cores: float | None, speedups: dict | None = None) -> tuple[float, str]:
    after, limit = bound(loads, cores, speedups or {})
    return (now / after - 1 if after > 0 else math.inf), limit


def _more_processes(
    loads: list[ProcessLoad], cores: float | None, now: float, label: str, flag: str, current: int, why: str
) -> Move | None:
    """The smallest count, up to MAX_SCALE times the current one, that gets 90 % of what the model says more
    processes of group `label` could buy."""
    group = next((g for g in loads if g.label == label), None)
    if group is None or current < 1:
        return None
    options = []
    for count in range(current + 1, current * MAX_SCALE + 1):
        scaled = _scaled(group, group.count * count // current)
        gain, limit = _gain(now, [scaled if g is group else g for g in loads], cores)
        options.append((count, gain, limit))
    if not options:
        return None
    best = max(gain for _, gain, _ in options)
    if best < MIN_GAIN:
        return None
    count, gain, limit = next(o for o in options if o[1] >= 0.9 * best)
    return Move(flag, str(current), str(count), gain, limit, why)


def _idle_cores(cores: int | None, capacity: float | None, wanted: float | None, others: float) -> str:
    """Cores neither used by the run, nor wanted by its processes while they waited for one, nor kept busy by other
    programs."""
    if not cores or capacity is None or wanted is None:
        return "cores idle"
    busy_elsewhere = f" (other programs kept {others:.1f} busy)" if others >= 0.05 else ""
    return f"{max(0.0, capacity - wanted):.1f} of {cores} cores idle{busy_elsewhere}"


def advise(experiment: Experiment, verdict: Verdict | None = None) -> Advice:
    """The verdict, how busy its limit is, and the layout moves worth making, best first."""
    verdict = verdict or assess(experiment)
    loads = process_loads(experiment)
    cores = _cores(experiment)
    now, _ = bound(loads, cores, {})
    advice = Advice(verdict, now, cores, cpu_by_kind=cpu_by_kind(loads))
    cfg = experiment.config
    if not loads or now <= 0 or not cfg:
        return advice
    # moves are priced on the CPU each process wanted: what it used plus the time it was runnable but waited for a
    # core. On a machine busy with other work, or with more processes than cores, that time is no idle capacity.
    loads = [replace(g, cpu=None if g.cpu is None else g.cpu + g.run_delay) for g in loads]
    wanted = sum(g.count * g.cpu for g in loads) if all(g.cpu is not None for g in loads) else None
    # and on the cores other programs left: on a shared machine a core this run did not use was often not idle
    others = others_cores(experiment)
    machine_cores = cores
    if cores and others:  # never more than the machine has: processes that wait for a core want more than there is
        cores = round(min(machine_cores, max(cores - others, wanted or 0.0)), 1)
    now, _ = bound(loads, cores, {})
    moves: list[Move] = []
    busiest = max(loads, key=lambda g: g.demand)
    idle = _idle_cores(machine_cores, cores, wanted, others)
    if cfg.get("serial_mode"):
        if cores and cores > 1 and wanted is not None and wanted < 0.75 * cores:
            moves.append(_parallel(experiment, now, cores, idle))
    else:
        rollout = next((g for g in loads if "RolloutWorker" in g.label), None)
        if rollout is not None and cfg.get("num_workers"):
            moves.append(
                _more_processes(
                    loads,
                    cores,
                    now,
                    rollout.label,
                    "--num_workers",
                    int(cfg["num_workers"]),
                    f"rollout workers busy {rollout.demand:.0%}, {idle}",
                )
            )
        inference = next((g for g in loads if g.label == "InferenceWorker"), None)
        if inference is not None:
            moves.append(
                _more_processes(
                    loads,
                    cores,
                    now,
                    inference.label,
                    "--policy_workers_per_policy",
                    int(cfg.get("policy_workers_per_policy") or 1),
                    f"inference processes busy {inference.demand:.0%}, {idle}",
                )
            )
        moves.append(_placement(loads, cores, now, cfg))
        comm = busiest.busy.get("communication", 0.0)
        envs = cfg.get("num_envs_per_worker")
        if envs and comm > 0.1 * busiest.demand:
            gain, limit = _gain(now, loads, cores, {"communication": 2.0})
            if gain >= MIN_GAIN:
                splits = cfg.get("worker_num_splits") or 1
                moves.append(
                    Move(
                        "--num_envs_per_worker",
                        str(envs),
                        str(2 * envs),
                        gain,
                        limit,
                        f"per-message work is {comm:.0%} of {busiest.label}'s time and halves with twice the envs "
                        f"per message" + (f" (as with --worker_num_splits={splits // 2})" if splits >= 2 else ""),
                    )
                )
    if verdict.kind == "learner":
        moves += _learner_moves(experiment, loads, cores, now, cfg)
    advice.moves = sorted((m for m in moves if m is not None), key=lambda m: -m.fps_gain)
    return advice


def _placement(loads: list[ProcessLoad], cores: float | None, now: float, cfg: dict) -> Move | None:
    """Inference into the rollout processes (no messages per step), or out of them (one batched process)."""
    rollout = next((g for g in loads if g.label == "RolloutWorker"), None)
    apart = next((g for g in loads if g.label == "InferenceWorker"), None)
    image_encoder = (cfg.get("precision_in_use") or {}).get("image_encoder", False)
    if rollout is not None and apart is not None and not image_encoder:
        moved = apart.busy.get("inference", 0.0) * apart.count / rollout.count
        cpu = None
        if rollout.cpu is not None and apart.cpu is not None and apart.demand > 0:
            cpu = rollout.cpu + apart.cpu * apart.count / rollout.count * moved / (apart.demand or 1.0)
        busy = dict(rollout.busy)
        busy["inference"] = busy.get("inference", 0.0) + moved
        merged = replace(rollout, label="InferenceWorker + RolloutWorker", busy=busy, cpu=cpu)
        rest = [merged] + [g for g in loads if g is not rollout and g is not apart]
        gain, limit = _gain(now, rest, cores)
        if gain >= MIN_GAIN:
            return Move(
                "--inference_placement",
                cfg.get("inference_placement", "own_process"),
                "rollout_worker",
                gain,
                limit,
                f"inference processes spend {apart.busy.get('communication', 0.0):.0%} of their time on messages, "
                "which inference inside each rollout worker does not send",
            )
    together = next((g for g in loads if g.label == "InferenceWorker + RolloutWorker"), None)
    if together is not None and together.busy.get("inference", 0.0) > 0.3 * together.demand:
        share = together.busy["inference"] / together.demand if together.demand else 0.0
        busy = {k: v for k, v in together.busy.items() if k != "inference"}
        cpu_left = None if together.cpu is None else together.cpu * (1 - share)
        stays = replace(together, label="RolloutWorker", busy=busy, cpu=cpu_left)
        inference = ProcessLoad(
            "InferenceWorker",
            1,
            {"inference": together.busy["inference"] * together.count},
            None if together.cpu is None else together.cpu * share * together.count,
            0.0,
        )
        rest = [stays, inference] + [g for g in loads if g is not together]
        gain, limit = _gain(now, rest, cores)
        if gain >= OPTIMISTIC_MIN_GAIN:
            return Move(
                "--inference_placement",
                cfg.get("inference_placement", "rollout_worker"),
                "own_process",
                gain,
                limit,
                f"inference takes {share:.0%} of the rollout processes' busy time; one inference process batches "
                "every worker's requests (an upper bound: the messages it adds are not counted)",
            )
    return None


def _learner_moves(
    experiment: Experiment, loads: list[ProcessLoad], cores: float | None, now: float, cfg: dict
) -> list[Move]:
    group = next((g for g in loads if "Learner" in g.label), None)
    learners = [c for c in experiment.components if c.role == Role.LEARNER]
    if group is None or not learners or group.busy.get("learner", 0.0) <= 0:
        return []
    total = sum(c.activity.work_s for c in learners)
    train = sum(c.tree.get("train", {}).get("time", 0.0) for c in learners)
    per_step = sum(
        c.tree.get("train", {}).get("children", {}).get("update", {}).get("children", {}).get("clip", {}).get("time", 0)
        + c.tree.get("after_optimizer", {}).get("time", 0.0)
        for c in learners
    )
    moves = []
    for flag, saved, value, why, change in (
        (
            "--batch_size",
            per_step / 2,
            (cfg.get("batch_size"), lambda b: 2 * b),
            f"the learner's per-step work (clip, after_optimizer) is {per_step / max(total, 1e-12):.0%} of its time "
            "and runs half as often; larger batches also change how it learns",
            "larger batches",
        ),
        (
            "--num_epochs",
            train / 2,
            (cfg.get("num_epochs"), lambda e: e // 2),
            f"training passes are {train / max(total, 1e-12):.0%} of the learner's time; fewer passes over each batch "
            "change the algorithm",
            "fewer passes over each batch",
        ),
    ):
        current, propose = value
        if not current or propose(current) < 1 or propose(current) == current or total <= 0 or saved <= 0:
            continue
        speedup = total / max(total - saved, 1e-12)
        gain, limit = _gain(now, loads, cores, {(group.label, "learner"): speedup})
        if gain >= MIN_GAIN / 2:
            moves.append(Move(flag, str(current), str(propose(current)), gain, limit, why, change))
    return moves


def _parallel(experiment: Experiment, now: float, cores: float, idle: str) -> Move | None:
    """A serial run (one process, one core at most) split into the parallel layout's groups: rollout workers with
    their inference in `--num_workers` processes, learner and batcher in one."""
    workers = int(experiment.config.get("num_workers") or 1)

    rollout: dict[str, float] = {}
    learner: dict[str, float] = {}
    lifetime = max((c.activity.lifetime_s for c in experiment.components if c.role != Role.RUNNER), default=0.0)
    if lifetime <= 0:
        return None
    for i, c in enumerate(c for c in experiment.components if c.role != Role.RUNNER):
        target = rollout if c.role in (Role.ROLLOUT_WORKER, Role.INFERENCE_WORKER) else learner
        for kind, seconds in kind_seconds(c, loop_overhead=i == 0).items():
            target[kind] = target.get(kind, 0.0) + seconds / lifetime
    total = sum(rollout.values()) + sum(learner.values())
    cpu = next(
        (
            (c.cpu_s + (c.run_delay_s or 0.0)) / (c.wall_s or lifetime)
            for c in experiment.components
            if c.cpu_s is not None
        ),
        None,
    )
    share = sum(rollout.values()) / total if total else 0.0
    groups = [
        ProcessLoad(
            "InferenceWorker + RolloutWorker",
            workers,
            {k: v / workers for k, v in rollout.items()},
            None if cpu is None else cpu * share / workers,
            0.0,
        ),
        ProcessLoad("Batcher + Learner", 1, learner, None if cpu is None else cpu * (1 - share), 0.0),
    ]
    gain, limit = _gain(now, groups, cores)
    if gain < OPTIMISTIC_MIN_GAIN:
        return None
    return Move(
        "--serial_mode",
        "True",
        "False",
        gain,
        limit,
        f"one process uses one core at most, {idle}; rollout workers and learner in processes of their own (an upper "
        "bound: the messages between them and the processes' start are not counted)",
    )
