"""Worker layouts and the next ones worth trying, chosen by what the profile report says limits the current one.

Pure functions, no runs: the tuner (`sf.bench.tune`) measures what these propose. The moves follow what each
bottleneck means:

- simulation-bound: envs are the limit, so step more of them at once: more rollout workers up to the cores,
  fewer workers than there are cores' worth of processes when oversubscribed, double buffering, batched stepping
  (only where allowed: `--batched_sampling=True` changes what the env factory must return, a batched env object,
  so the tuner keeps the run's own value unless told otherwise);
- inference-bound: each forward pass is too small or too slow: larger requests (more envs per worker, fewer
  splits), inference in processes of its own that batch every worker's requests, and more inference workers;
- communication-bound: the per-message cost dominates: no messages per step at all (inference in the rollout
  workers), more envs per message (more envs per worker, fewer splits) and batched stepping;
- learner- or batcher-bound: collection already outruns training; no layout of workers changes that, except
  where processes outnumber the cores: then the same envs on fewer workers give the learner's core back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

LAYOUT_FLAGS = (
    "num_workers",
    "num_envs_per_worker",
    "worker_num_splits",
    "policy_workers_per_policy",
    "inference_placement",
    "batched_sampling",
)
UNFIXABLE = {
    "learner": "learner-bound: collection already outruns training, so no worker layout can raise FPS; "
    "fewer --num_epochs, a larger --batch_size, a smaller model or a GPU for the learner can",
    "batcher": "batcher-bound: assembling batches is the limit, which no worker layout changes; "
    "a larger --rollout or --batch_size (fewer, larger copies) can",
}


@dataclass(frozen=True)
class Layout:
    num_workers: int
    num_envs_per_worker: int
    worker_num_splits: int
    policy_workers_per_policy: int
    inference_placement: str  # "auto" until a run has said what it resolved to
    batched_sampling: bool

    @classmethod
    def from_cfg(cls, cfg) -> Layout:
        return cls(**{key: getattr(cfg, key) for key in LAYOUT_FLAGS})

    def flags(self) -> list[str]:
        return [f"--{key}={value}" for key, value in asdict(self).items()]

    def describe(self) -> str:
        inference = (
            "inference in the rollout workers"
            if self.inference_placement == "rollout_worker"
            else f"{self.policy_workers_per_policy} inference"
            + (" (auto)" if self.inference_placement == "auto" else "")
        )
        return (
            f"{self.num_workers} x {self.num_envs_per_worker} envs, {self.worker_num_splits} splits, "
            f"{inference}, batched_sampling={self.batched_sampling}"
        )


@dataclass(frozen=True)
class Limits:
    """What a candidate may not exceed: processes beyond the cores only contend, and envs cost memory."""

    cpus: int
    max_envs_per_worker: int = 256
    max_total_envs: int = 512
    serial: bool = False  # serial mode: one process, so no process counts to tune
    batched_sampling: bool = False  # whether to propose True: only an env whose factory returns a batched object can

    def allows(self, layout: Layout) -> bool:
        return (
            layout.num_envs_per_worker % layout.worker_num_splits == 0
            and 1 <= layout.num_envs_per_worker <= self.max_envs_per_worker
            and layout.num_workers * layout.num_envs_per_worker <= self.max_total_envs
            and 1 <= layout.num_workers
            and 1 <= layout.policy_workers_per_policy <= max(1, self.cpus)
        )


def _more_workers(layout: Layout, limits: Limits) -> list[tuple[Layout, str]]:
    moves = []
    if layout.num_workers < limits.cpus:
        moves.append(
            (
                replace(layout, num_workers=min(limits.cpus, layout.num_workers * 2)),
                "more rollout workers, up to the cores",
            )
        )
        if layout.num_workers + 1 < min(limits.cpus, layout.num_workers * 2):
            moves.append((replace(layout, num_workers=layout.num_workers + 1), "one more rollout worker"))
    elif layout.num_workers > limits.cpus:
        total = layout.num_workers * layout.num_envs_per_worker
        per = -(-total // limits.cpus)
        per += -per % layout.worker_num_splits
        moves.append(
            (
                replace(layout, num_workers=limits.cpus, num_envs_per_worker=per),
                "one rollout worker per core with the same envs: less contention",
            )
        )
    return moves


def _more_envs(layout: Layout, why: str) -> tuple[Layout, str]:
    return replace(layout, num_envs_per_worker=layout.num_envs_per_worker * 2), why


def _fewer_splits(layout: Layout, why: str) -> list[tuple[Layout, str]]:
    if layout.worker_num_splits == 1:
        return []
    return [(replace(layout, worker_num_splits=max(1, layout.worker_num_splits // 2)), why)]


def _batched(layout: Layout, limits: Limits) -> list[tuple[Layout, str]]:
    if layout.batched_sampling or not limits.batched_sampling:
        return []
    return [(replace(layout, batched_sampling=True), "batched env stepping")]


def _more_inference(layout: Layout, limits: Limits) -> list[tuple[Layout, str]]:
    if limits.serial or layout.policy_workers_per_policy >= limits.cpus:
        return []
    return [
        (
            replace(
                layout,
                policy_workers_per_policy=layout.policy_workers_per_policy + 1,
                inference_placement="own_process",
            ),
            "one more inference worker",
        )
    ]


def _placement(layout: Layout, limits: Limits, placement: str, why: str) -> list[tuple[Layout, str]]:
    if limits.serial or layout.inference_placement == placement:
        return []
    return [(replace(layout, inference_placement=placement), why)]


def _free_cores(layout: Layout, limits: Limits) -> list[tuple[Layout, str]]:
    """Learner- or batcher-bound with more processes than cores: the learner shares its core with rollout workers,
    so the same envs on fewer workers may leave it more CPU. The only layout move that can help it."""
    inference = 0 if layout.inference_placement == "rollout_worker" else layout.policy_workers_per_policy
    processes = layout.num_workers + inference + 1
    if limits.serial or layout.num_workers < 2 or processes <= limits.cpus:
        return []
    fewer = layout.num_workers // 2
    per = -(-layout.num_workers * layout.num_envs_per_worker // fewer)
    per += -per % layout.worker_num_splits
    candidate = replace(layout, num_workers=fewer, num_envs_per_worker=per)
    return (
        [(candidate, "same envs on half the rollout workers: cores back for the learner")]
        if limits.allows(candidate)
        else []
    )


def candidates(layout: Layout, verdict: str | None, limits: Limits) -> list[tuple[Layout, str]]:
    """Layouts to try next from `layout`, most promising first, each with the reason; [] when none can help.

    `verdict` is the profile report's bottleneck kind, or None when there is no report: then the neighbours
    along every axis are proposed.
    """
    if verdict in UNFIXABLE:
        return _free_cores(layout, limits)
    if verdict == "simulation":
        moves = [*([] if limits.serial else _more_workers(layout, limits))]
        if layout.worker_num_splits == 1 and layout.num_envs_per_worker >= 2:
            moves.append(
                (
                    replace(layout, worker_num_splits=2),
                    "double buffering: half the envs step while the other half wait for actions",
                )
            )
        moves += _batched(layout, limits)
        moves.append(_more_envs(layout, "more envs per worker, so workers never wait idle"))
    elif verdict == "inference":
        moves = [_more_envs(layout, "more envs per worker: larger inference batches")]
        moves += _fewer_splits(layout, "fewer splits: larger inference batches")
        moves += _placement(layout, limits, "own_process", "inference processes batching every worker's requests")
        moves += _more_inference(layout, limits)
    elif verdict == "communication":
        moves = _placement(layout, limits, "rollout_worker", "inference in the rollout workers: no messages per step")
        moves.append(_more_envs(layout, "more envs per worker: more frames per message"))
        moves += _fewer_splits(layout, "fewer splits: fewer messages per step")
        moves += _batched(layout, limits)
    else:
        moves = [_more_envs(layout, "more envs per worker")]
        moves += [] if limits.serial else _more_workers(layout, limits)
        moves += _fewer_splits(layout, "fewer splits")
        moves += _placement(layout, limits, "rollout_worker", "inference in the rollout workers")
        moves += _placement(layout, limits, "own_process", "inference in processes of its own")
        moves += _more_inference(layout, limits)
    seen: set[Layout] = {layout}
    unique = []
    for candidate, why in moves:
        if candidate not in seen and limits.allows(candidate):
            seen.add(candidate)
            unique.append((candidate, why))
    return unique


def replace_flags(argv: list[str], layout: Layout, drop: tuple[str, ...] = ()) -> list[str]:
    """`argv` without any layout flag (or flag named in `drop`) it had, followed by `layout`'s flags: a command
    line that trains with the layout."""
    kept, skip_value = [], False
    for token in argv:
        if skip_value:
            skip_value = False
            if not token.startswith("--"):
                continue
        name = token[2:].split("=", 1)[0] if token.startswith("--") else None
        if name in LAYOUT_FLAGS or name in drop:
            skip_value = "=" not in token
            continue
        kept.append(token)
    return [*kept, *layout.flags()]
