"""Checks on a resolved config: combinations the runtime cannot honour fail here, before any process starts."""
from __future__ import annotations

from argparse import Namespace
from typing import Callable

from sf.cfg.errors import ConfigError

# (flag, test, allowed values as shown to the user)
_RANGES: list[tuple[str, Callable[[float], bool], str]] = [
    ("num_workers", lambda v: v >= 1, ">= 1"),
    ("num_envs_per_worker", lambda v: v >= 1, ">= 1"),
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
]


def validate_cfg(cfg: Namespace) -> None:
    """Raise ConfigError naming the first flag whose value, alone or with another flag, is not allowed."""
    for flag, allowed, description in _RANGES:
        value = getattr(cfg, flag)
        if not allowed(value):
            raise ConfigError(f"--{flag}: must be {description}, got {value}", flag=f"--{flag}")
    if cfg.recurrence > cfg.rollout:
        raise ConfigError(f"--recurrence: must be <= --rollout ({cfg.rollout}), got {cfg.recurrence}", flag="--recurrence")
    if cfg.use_rnn and cfg.rollout % cfg.recurrence != 0:
        raise ConfigError(f"--recurrence: must divide --rollout ({cfg.rollout}) when --use_rnn=True, got {cfg.recurrence}",
                          flag="--recurrence")
    if cfg.batch_size % cfg.rollout != 0:
        raise ConfigError(f"--batch_size: must be a multiple of --rollout ({cfg.rollout}), got {cfg.batch_size}",
                          flag="--batch_size")
    if cfg.num_envs_per_worker % cfg.worker_num_splits != 0:
        raise ConfigError(f"--num_envs_per_worker: must be a multiple of --worker_num_splits ({cfg.worker_num_splits}), "
                          f"got {cfg.num_envs_per_worker}", flag="--num_envs_per_worker")
    if cfg.lr_adaptive_min > cfg.lr_adaptive_max:
        raise ConfigError(f"--lr_adaptive_max: must be >= --lr_adaptive_min ({cfg.lr_adaptive_min}), "
                          f"got {cfg.lr_adaptive_max}", flag="--lr_adaptive_max")
    if cfg.serial_mode and cfg.async_rl:
        raise ConfigError("--async_rl: must be False with --serial_mode=True", flag="--async_rl")
