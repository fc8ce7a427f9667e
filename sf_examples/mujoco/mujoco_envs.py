"""The gymnasium MuJoCo v5 tasks under short sf names, and the PPO defaults that suit them."""
from __future__ import annotations

from typing import Any

import gymnasium

from sf.envs.gym_family import make_gym_env
from sf.envs.registry import EnvConfig, EnvNotFoundError, register_env

MUJOCO_ENVS: dict[str, str] = {
    "mujoco_ant": "Ant-v5",
    "mujoco_halfcheetah": "HalfCheetah-v5",
    "mujoco_hopper": "Hopper-v5",
    "mujoco_walker": "Walker2d-v5",
    "mujoco_humanoid": "Humanoid-v5",
    "mujoco_swimmer": "Swimmer-v5",
    "mujoco_reacher": "Reacher-v5",
    "mujoco_pendulum": "InvertedPendulum-v5",
    "mujoco_doublependulum": "InvertedDoublePendulum-v5",
}


def _gym_id(env_name: str) -> str:
    try:
        return MUJOCO_ENVS[env_name]
    except KeyError:
        raise EnvNotFoundError(f"{env_name!r} is not a MuJoCo task; known: {', '.join(MUJOCO_ENVS)}") from None


def make_mujoco_env(full_env_name: str, cfg: Any, env_config: EnvConfig | None, render_mode: str | None = None) -> gymnasium.Env:
    return make_gym_env(_gym_id(full_env_name), cfg, env_config, render_mode)


def register_mujoco_envs() -> None:
    for name in MUJOCO_ENVS:
        register_env(name, make_mujoco_env)


def mujoco_defaults(env_name: str) -> dict[str, Any]:
    """Flag defaults for continuous control; the parser puts YAML and the command line above them."""
    _gym_id(env_name)
    return {
        "use_rnn": False,  # MuJoCo states are fully observed: memory only costs speed
        "encoder_mlp_layers": [64, 64],  # the standard small PPO network for proprioceptive inputs
        "nonlinearity": "tanh",  # bounded activations train more stably than ReLU on these tasks
        "normalize_input": True,  # joint positions and velocities differ in scale by orders of magnitude
        "normalize_returns": True,  # reward scales differ widely between tasks; one learning rate fits all
        "rollout": 64,  # short trajectories keep policy lag low; GAE bootstraps across them
        "recurrence": 1,  # no RNN, so each step is its own sequence
        "batch_size": 512,  # SGD minibatch size
        "num_batches_per_epoch": 8,  # 8 x 512 = 4096 samples per training iteration
        "num_epochs": 10,  # the usual PPO number of passes over each iteration's samples
        "learning_rate": 3e-4,  # Adam step size used by most PPO MuJoCo baselines
        "gamma": 0.99,  # horizon of about 100 steps, matching the tasks' reward delays
        "gae_lambda": 0.95,  # usual bias/variance balance for the advantage estimate
        "ppo_clip_ratio": 0.2,  # the standard PPO trust region
        "exploration_loss_coeff": 0.0,  # the Gaussian's learned stddev explores; an entropy bonus hurts here
        "max_grad_norm": 0.5,  # gradient clipping as in the common PPO baselines
        "adaptive_stddev": False,  # state-independent log-stddev, as in standard continuous PPO
        "env_frameskip": 1,  # the v5 tasks already apply their own frame_skip inside the simulator
        "num_workers": 8,  # 8 x 8 = 64 envs, one 64-step rollout each fills exactly one 4096-sample iteration
        "num_envs_per_worker": 8,  # MuJoCo steps are cheap, so each worker steps several envs per policy call
        "worker_num_splits": 2,  # double buffering: half the envs step while the other half waits for actions
        "train_for_env_steps": 1_000_000,  # the usual MuJoCo benchmark budget
    }
