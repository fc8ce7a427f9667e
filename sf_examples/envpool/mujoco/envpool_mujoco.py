"""MuJoCo tasks through EnvPool under Sample Factory's names, and Sample Factory's EnvPool defaults for them.

EnvPool's `<Task>-v5` are gymnasium's MuJoCo v5 tasks reimplemented in C++ (the same models, rewards and 1000-step
limit); with `--envpool=True` the MuJoCo family's own defaults train on them unchanged.
"""

from __future__ import annotations

from typing import Any

from sf.envs.registry import register_vector_env
from sf.envs.vector import VectorConfig
from sf_examples.envpool.envpool_env import EnvPoolEnv, make_pool
from sf_examples.mujoco.mujoco_envs import MUJOCO_ENVS, _gym_id


def make_envpool_mujoco(full_env_name: str, cfg: Any, config: VectorConfig) -> EnvPoolEnv:
    return EnvPoolEnv(make_pool(_gym_id(full_env_name), full_env_name, cfg, config))


def register_envpool_mujoco_envs() -> None:
    for name in MUJOCO_ENVS:
        register_vector_env(name, make_envpool_mujoco)


# Sample Factory's per-task settings of its EnvPool MuJoCo example (wall-time oriented: large batches, adaptive lr)
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "mujoco_ant": {
        "encoder_mlp_layers": [128, 64, 32],
        "learning_rate": 3e-4,
        "rollout": 64,
        "num_epochs": 4,
        "num_batches_per_epoch": 2,
    },
    "mujoco_halfcheetah": {
        "encoder_mlp_layers": [128, 64, 32],
        "learning_rate": 5e-4,
        "rollout": 256,
        "num_epochs": 5,
        "num_batches_per_epoch": 8,
    },
    "mujoco_humanoid": {
        "encoder_mlp_layers": [512, 256, 128],
        "learning_rate": 3e-4,
        "rollout": 128,
        "num_epochs": 5,
        "num_batches_per_epoch": 4,
    },
    "mujoco_hopper": {
        "encoder_mlp_layers": [256, 128, 64],
        "learning_rate": 5e-4,
        "rollout": 64,
        "num_epochs": 5,
        "num_batches_per_epoch": 2,
    },
    "mujoco_walker": {
        "encoder_mlp_layers": [256, 128, 64],
        "learning_rate": 3e-4,
        "rollout": 128,
        "num_epochs": 5,
        "num_batches_per_epoch": 4,
    },
}


def envpool_mujoco_defaults(env_name: str) -> dict[str, Any]:
    """Sample Factory's EnvPool MuJoCo defaults: one serial worker whose pool holds 64 envs."""
    _gym_id(env_name)
    return {
        "envpool": True,
        "serial_mode": True,  # one worker in synchronous mode: everything in one process
        "async_rl": False,
        "num_workers": 1,
        "num_envs_per_worker": 1,
        "env_agents": 64,
        "worker_num_splits": 1,
        "train_for_env_steps": 10_000_000,
        "encoder_mlp_layers": [256, 128, 64],
        "nonlinearity": "elu",
        "kl_loss_coeff": 0.1,
        "use_rnn": False,
        "recurrence": 1,
        "adaptive_stddev": False,
        "policy_initialization": "torch_default",
        "reward_scale": 0.1,
        "rollout": 64,
        "max_grad_norm": 1.0,
        "num_epochs": 4,
        "num_batches_per_epoch": 2,
        "batch_size": 2048,
        "ppo_clip_ratio": 0.2,
        "value_loss_coeff": 2.0,
        "exploration_loss_coeff": 0.0,
        "learning_rate": 3e-4,
        "lr_schedule": "kl_adaptive_epoch",
        "lr_schedule_kl_threshold": 0.008,
        "shuffle_minibatches": False,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "with_vtrace": False,
        "normalize_input": True,
        "normalize_returns": True,
        "value_bootstrap": True,
        "experiment_summaries_interval": 15,
        "save_every_sec": 15,
        "save_best_every_sec": 15,
        **TASK_DEFAULTS.get(env_name, {}),
    }
