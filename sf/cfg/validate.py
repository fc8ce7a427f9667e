"""Checks on a resolved config: combinations the runtime cannot honour fail here, before any process starts."""

from __future__ import annotations

import re
from argparse import Namespace
from collections.abc import Callable
from pathlib import PurePath

from sf.utils.errors import ConfigError

HF_REPOSITORY = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")  # <user or organization>/<repository>

# (flag, test, allowed values as shown to the user)
_RANGES: list[tuple[str, Callable[[float], bool], str]] = [
    ("num_workers", lambda v: v >= 1, ">= 1"),
    ("num_envs_per_worker", lambda v: v >= 1, ">= 1"),
    ("env_threads", lambda v: v >= 1, ">= 1, or 0 for automatic"),
    ("worker_num_splits", lambda v: v >= 1, ">= 1"),
    ("num_policies", lambda v: v >= 1, ">= 1"),
    ("policy_workers_per_policy", lambda v: v >= 1, ">= 1"),
    ("max_policy_lag", lambda v: v >= 0, ">= 0"),
    ("num_batches_to_accumulate", lambda v: v >= 1, ">= 1"),
    ("rollout", lambda v: v >= 1, ">= 1"),
    ("recurrence", lambda v: v >= 1, ">= 1, or -1 for automatic"),
    ("batch_size", lambda v: v >= 1, ">= 1"),
    ("num_batches_per_epoch", lambda v: v >= 1, ">= 1"),
    ("num_epochs", lambda v: v >= 1, ">= 1"),
    ("learning_rate", lambda v: v > 0, "> 0"),
    ("gamma", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("gae_lambda", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("ppo_clip_ratio", lambda v: v > 0, "> 0"),
    ("ppo_clip_value", lambda v: v > 0, "> 0"),
    ("max_grad_norm", lambda v: v >= 0, ">= 0 (0 disables clipping)"),
    ("reward_clip", lambda v: v > 0, "> 0"),
    ("adam_eps", lambda v: v > 0, "> 0"),
    ("adam_beta1", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("adam_beta2", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("lr_adaptive_min", lambda v: v > 0, "> 0"),
    ("exploration_loss_coeff", lambda v: v >= 0, ">= 0"),
    ("value_loss_coeff", lambda v: v >= 0, ">= 0"),
    ("kl_loss_coeff", lambda v: v >= 0, ">= 0"),
    ("vtrace_rho", lambda v: v > 0, "> 0"),
    ("vtrace_c", lambda v: v > 0, "> 0"),
    ("rnn_size", lambda v: v >= 1, ">= 1"),
    ("rnn_num_layers", lambda v: v >= 1, ">= 1"),
    ("obs_scale", lambda v: v != 0, "!= 0"),
    ("initial_stddev", lambda v: v > 0, "> 0"),
    ("env_frameskip", lambda v: v >= 1, ">= 1"),
    ("env_framestack", lambda v: v >= 1, ">= 1"),
    ("keep_checkpoints", lambda v: v >= 1, ">= 1"),
    ("stats_avg", lambda v: v >= 1, ">= 1"),
    ("experiment_summaries_interval", lambda v: v > 0, "> 0"),
    ("flush_summaries_interval", lambda v: v >= 1, ">= 1"),
    ("train_for_env_steps", lambda v: v >= 1, ">= 1"),
    ("train_for_seconds", lambda v: v >= 1, ">= 1"),
    ("save_every_sec", lambda v: v >= 1, ">= 1"),
    ("stop_timeout_sec", lambda v: v >= 1, ">= 1"),
    ("heartbeat_timeout_sec", lambda v: v >= 1, ">= 1"),
    ("max_component_restarts", lambda v: v >= 0, ">= 0"),
    ("decorrelate_experience_max_seconds", lambda v: v >= 0, ">= 0"),
    ("ray_workers_per_node", lambda v: v >= 0, ">= 0 (0: spread evenly)"),
    ("ray_max_restarts", lambda v: v >= -1, ">= 0, or -1 (3 with --restart_failed_components and --async_rl)"),
    ("ray_transfers_in_flight", lambda v: v >= 1, ">= 1"),
    ("ray_weights_interval_s", lambda v: v >= 0, ">= 0"),
    ("ray_chunk_wait_s", lambda v: v >= 0, ">= 0"),
    ("pbt_period_env_steps", lambda v: v >= 1, ">= 1"),
    ("pbt_start_mutation", lambda v: v >= 0, ">= 0"),
    ("pbt_replace_fraction", lambda v: 0 < v <= 0.5, "in (0, 0.5] (the best and the worst share must not overlap)"),
    ("pbt_mutation_rate", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("pbt_replace_reward_gap", lambda v: v >= 0, ">= 0"),
    ("pbt_replace_reward_gap_absolute", lambda v: v >= 0, ">= 0"),
    ("pbt_perturb_min", lambda v: v >= 1, ">= 1 (a factor that multiplies or divides)"),
]

_LAYER_SIZES = ("encoder_mlp_layers", "encoder_conv_mlp_layers", "decoder_mlp_layers")


def validate_cfg(cfg: Namespace) -> None:
    """Raise ConfigError naming the first flag whose value, alone or with another flag, is not allowed."""
    _check_paths(cfg)
    for flag, allowed, description in _RANGES:
        value = getattr(cfg, flag)
        if not allowed(value):
            raise ConfigError(f"--{flag}: must be {description}, got {value}", flag=f"--{flag}")
    for flag in _LAYER_SIZES:
        if any(size < 1 for size in getattr(cfg, flag)):
            raise ConfigError(f"--{flag}: every layer size must be >= 1, got {getattr(cfg, flag)}", flag=f"--{flag}")
    if cfg.seed is not None and cfg.seed < 0:
        raise ConfigError(f"--seed: must be >= 0, got {cfg.seed}", flag="--seed")
    if cfg.recurrence > cfg.rollout:
        raise ConfigError(
            f"--recurrence: must be <= --rollout ({cfg.rollout}), got {cfg.recurrence}", flag="--recurrence"
        )
    if cfg.use_rnn and cfg.rollout % cfg.recurrence != 0:
        raise ConfigError(
            f"--recurrence: must divide --rollout ({cfg.rollout}) when --use_rnn=True, got {cfg.recurrence}",
            flag="--recurrence",
        )
    if cfg.batch_size % cfg.rollout != 0:
        raise ConfigError(
            f"--batch_size: must be a multiple of --rollout ({cfg.rollout}), got {cfg.batch_size}", flag="--batch_size"
        )
    if cfg.num_envs_per_worker % cfg.worker_num_splits != 0:
        raise ConfigError(
            f"--num_envs_per_worker: must be a multiple of --worker_num_splits ({cfg.worker_num_splits}), "
            f"got {cfg.num_envs_per_worker}",
            flag="--num_envs_per_worker",
        )
    if cfg.lr_adaptive_min > cfg.lr_adaptive_max:
        raise ConfigError(
            f"--lr_adaptive_max: must be >= --lr_adaptive_min ({cfg.lr_adaptive_min}), got {cfg.lr_adaptive_max}",
            flag="--lr_adaptive_max",
        )
    if cfg.serial_mode and cfg.async_rl:
        raise ConfigError("--async_rl: must be False with --serial_mode=True", flag="--async_rl")
    _check_batched(cfg)
    envs = cfg.num_workers * cfg.num_envs_per_worker
    if not cfg.async_rl and envs % cfg.num_policies:
        raise ConfigError(
            f"--num_policies={cfg.num_policies}: a synchronous run (--async_rl=False, --serial_mode=True) gives each "
            f"policy its own envs, so --num_workers * --num_envs_per_worker ({envs}) must be a multiple of it",
            flag="--num_policies",
        )
    if cfg.env_agents != -1 and (cfg.env_agents < 1 or not (cfg.envpool or cfg.batched_sampling)):
        raise ConfigError(
            f"--env_agents={cfg.env_agents}: the flag sets the copies of each EnvPool or batched env object and "
            "needs --envpool=True or --batched_sampling=True and a value >= 1",
            flag="--env_agents",
        )
    if cfg.pbt_perturb_max < cfg.pbt_perturb_min:
        raise ConfigError(
            f"--pbt_perturb_max: must be >= --pbt_perturb_min ({cfg.pbt_perturb_min}), got {cfg.pbt_perturb_max}",
            flag="--pbt_perturb_max",
        )
    _check_cluster(cfg)
    _check_hub(cfg)


def _check_hub(cfg: Namespace) -> None:
    """The evaluation flags of a push: a repository id the Hub accepts."""
    if not getattr(cfg, "push_to_hub", False):
        return
    repo = cfg.hf_repository
    if repo is None or not HF_REPOSITORY.fullmatch(repo):
        raise ConfigError(
            f"--hf_repository: --push_to_hub=True needs the repository as <user>/<repo>, got {repo!r}",
            flag="--hf_repository",
        )


def _check_cluster(cfg: Namespace) -> None:
    if cfg.backend == "ray" and cfg.serial_mode:
        raise ConfigError("--backend=ray: runs the parallel placement; drop --serial_mode=True", flag="--backend")
    if cfg.ray_max_restarts > 0 and not cfg.async_rl:
        raise ConfigError(
            "--ray_max_restarts: needs --async_rl=True (a synchronous round cannot lose a node's share of the batch)",
            flag="--ray_max_restarts",
        )
    groups = parse_worker_groups(cfg.ray_worker_groups)
    if sum(count for _, count in groups) > cfg.num_workers:
        raise ConfigError(
            f"--ray_worker_groups: asks for {sum(count for _, count in groups)} rollout workers, "
            f"more than --num_workers={cfg.num_workers}",
            flag="--ray_worker_groups",
        )


def parse_worker_groups(specs: list[str]) -> list[tuple[str, int]]:
    """`RESOURCE:COUNT` items as (resource, count); a malformed item fails naming the flag."""
    groups = []
    for spec in specs:
        resource, _, count = spec.rpartition(":")
        if not resource or not count.isdigit() or int(count) < 1:
            raise ConfigError(
                f"--ray_worker_groups: each item must be RESOURCE:COUNT with COUNT >= 1, got {spec!r}",
                flag="--ray_worker_groups",
            )
        groups.append((resource, int(count)))
    return groups


def _check_paths(cfg: Namespace) -> None:
    """The experiment folder must lie strictly inside --train_dir: a name like `../x` or `/x` would write
    elsewhere, and an empty one (or `.`) would train into the root, where --restart_behavior=overwrite deletes."""
    if not cfg.train_dir:
        raise ConfigError("--train_dir: must name a folder, got an empty value", flag="--train_dir")
    experiment = PurePath(cfg.experiment or "")
    if not experiment.parts or experiment.is_absolute() or any(part in ("..", ".") for part in experiment.parts):
        raise ConfigError(
            f"--experiment: must be a folder name inside --train_dir (no '..', '.' or absolute path), "
            f"got {cfg.experiment!r}",
            flag="--experiment",
        )


def _check_batched(cfg: Namespace) -> None:
    """What `--batched_sampling=True` cannot run with (Sample Factory's limits of its batched sampler)."""
    if not cfg.batched_sampling:
        return
    if cfg.envpool:
        raise ConfigError(
            "--envpool=True steps sf's own EnvPool families one env at a time per split; with --batched_sampling=True "
            "the env factory returns the pool itself (an EnvPool object is taken as is): leave one of them out",
            flag="--envpool",
        )
    if not cfg.async_rl and cfg.num_policies > 1:
        raise ConfigError(
            "--batched_sampling=True gives each rollout worker one policy; a synchronous run (--async_rl=False) with "
            f"--num_policies={cfg.num_policies} deals envs to policies one by one: use --async_rl=True or one policy",
            flag="--num_policies",
        )
