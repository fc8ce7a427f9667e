"""Batched classic-control envs written in torch, the shape of an IsaacGym / Isaac Lab / ManiSkill task: one object
steps `num_agents` copies as tensors on the CPU or a GPU, resets a copy whose episode ended inside the same step, and
reports per-copy episode statistics in a vectorized info dict (Sample Factory's batched env API, `sf.envs.batched`).

- `tensor_cartpole`: gymnasium's CartPole-v1 dynamics (Discrete(2), 500-step limit; solved at a return of 475);
- `tensor_pendulum`: gymnasium's Pendulum-v1 dynamics (Box(-2, 2, (1,)), 200-step limit; returns from about -1,400
  for a random policy up to about -150 for a good one).

Observations, rewards and dones stay on the env's device; actions arrive as a numpy array or, with
`--env_gpu_actions=True`, a tensor (both taken by `torch.as_tensor`).
"""

from __future__ import annotations

from typing import Any

import torch

from sf.envs.registry import EnvConfig, register_env
from sf_examples.tensor_envs.torch_classic import TensorCartPole, TensorEnv, TensorPendulum

DEFAULT_COPIES = 256


TENSOR_ENVS: dict[str, type[TensorEnv]] = {"tensor_cartpole": TensorCartPole, "tensor_pendulum": TensorPendulum}


def env_device(cfg: Any) -> str:
    """`--tensor_env_device`: auto puts the copies on the GPU when training runs there."""
    wanted = getattr(cfg, "tensor_env_device", "auto")
    if wanted == "auto":
        return "cuda" if getattr(cfg, "device", "cpu") != "cpu" and torch.cuda.is_available() else "cpu"
    return wanted


def make_tensor_env(full_env_name: str, cfg: Any = None, env_config: EnvConfig | None = None, render_mode=None):
    copies = getattr(cfg, "env_agents", -1)
    copies = DEFAULT_COPIES if copies is None or copies < 1 else copies
    seed = getattr(cfg, "seed", None)
    env_id = env_config.env_id if env_config is not None else 0
    env_seed = None if seed is None else seed * 100_003 + env_id
    return TENSOR_ENVS[full_env_name](copies, env_device(cfg), env_seed)


def register_tensor_envs() -> None:
    for name in TENSOR_ENVS:
        register_env(name, make_tensor_env)


def add_tensor_env_args(parser) -> None:
    parser.add_argument(
        "--tensor_env_device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="where the copies live (auto: the GPU when --device runs training there and CUDA exists)",
    )


def tensor_env_defaults(env_name: str) -> dict[str, Any]:
    """A batched run of small MLP policies: one env object per worker and split, many copies in it."""
    common = {
        "batched_sampling": True,
        "num_workers": 1,
        "num_envs_per_worker": 1,
        "worker_num_splits": 1,
        "use_rnn": False,
        "nonlinearity": "tanh",
        "rollout": 32,
        "num_epochs": 4,
        "shuffle_minibatches": True,
        "value_bootstrap": True,  # the time limit truncates; it is no failure
        "max_grad_norm": 0.5,
        "decorrelate_experience_max_seconds": 0,
    }
    if env_name == "tensor_pendulum":
        return {
            **common,
            "env_agents": 1024,
            "encoder_mlp_layers": [64, 64],
            "batch_size": 8192,
            "num_batches_per_epoch": 4,
            "learning_rate": 1e-3,
            "gamma": 0.95,
            "exploration_loss_coeff": 0.0,
            "normalize_input": True,
            "normalize_returns": True,
            "ppo_clip_ratio": 0.2,
        }
    return {
        **common,
        "env_agents": 64,
        "encoder_mlp_layers": [64, 64],
        "batch_size": 1024,
        "num_batches_per_epoch": 2,
        "learning_rate": 1e-3,
        "lr_schedule": "linear_decay",
        "ppo_clip_ratio": 0.1,
        "exploration_loss_coeff": 0.003,
    }
