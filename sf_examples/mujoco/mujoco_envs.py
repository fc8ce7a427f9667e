"""The gymnasium MuJoCo v5 tasks under short sf names, and the PPO defaults that suit them."""

from __future__ import annotations

import os
from typing import Any

import gymnasium

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

WORKER_NUM_SPLITS = 2

TASK_DEFAULTS: dict[str, dict[str, Any]] = {  # per task, above the common defaults; total_envs sets the placement
    # falls at once unless it explores widely (0.2: ~370 at 1M, 1.0: ~1,500)
    "mujoco_hopper": {"initial_stddev": 1.0},
    # solved in ~100k frames: smaller iterations give many more policy updates in that budget, and fewer envs
    # finish their 1000-step episodes early enough to fill the last-100-episodes average with solved ones
    # (the double pendulum oscillates between 8,000 and 500 with these; the common defaults suit it)
    "mujoco_pendulum": {"total_envs": 16, "batch_size": 256, "num_batches_per_epoch": 4},
}

# tasks whose model has a camera that follows the body; the default free camera would watch it run out of frame
TRACKING_CAMERA = frozenset(
    {"mujoco_ant", "mujoco_halfcheetah", "mujoco_hopper", "mujoco_walker", "mujoco_humanoid", "mujoco_swimmer"}
)


def _gym_id(env_name: str) -> str:
    try:
        return MUJOCO_ENVS[env_name]
    except KeyError:
        raise EnvNotFoundError(f"{env_name!r} is not a MuJoCo task; known: {', '.join(MUJOCO_ENVS)}") from None


def make_mujoco_env(
    full_env_name: str, cfg: Any, env_config: EnvConfig | None, render_mode: str | None = None
) -> gymnasium.Env:
    gym_id = _gym_id(full_env_name)
    camera = {"camera_name": "track"} if render_mode is not None and full_env_name in TRACKING_CAMERA else {}
    return gymnasium.make(gym_id, render_mode=render_mode, **camera)


def register_mujoco_envs() -> None:
    """Every task (its EnvPool version, for `--envpool=True`, is the family's `register_vector`)."""
    for name in MUJOCO_ENVS:
        register_env(name, make_mujoco_env)


def env_placement(total_envs: int, cpus: int | None = None) -> dict[str, int]:
    """Workers and envs per worker for a fixed total number of envs: one worker per core where the total allows.

    The total stays the same on every machine, so samples per iteration and the learning curve do not depend
    on the core count; only how the envs are spread over processes does.
    """
    cpus = max(1, cpus if cpus is not None else (os.cpu_count() or 1))
    workers = max(1, min(cpus, total_envs // WORKER_NUM_SPLITS))
    while total_envs % (workers * WORKER_NUM_SPLITS):
        workers -= 1
    return {"num_workers": workers, "num_envs_per_worker": total_envs // workers}


def mujoco_defaults(env_name: str) -> dict[str, Any]:
    """Flag defaults for continuous control; the parser puts YAML and the command line above them."""
    _gym_id(env_name)
    defaults = {
        "use_rnn": False,  # MuJoCo states are fully observed: memory only costs speed
        "encoder_mlp_layers": [64, 64],  # the standard small PPO network for proprioceptive inputs
        "nonlinearity": "tanh",  # bounded activations train more stably than ReLU on these tasks
        "policy_initialization": "torch_default",  # PyTorch's small uniform weights, as Sample Factory uses here
        "adaptive_stddev": False,  # state-independent log-stddev, as in standard continuous PPO
        "initial_stddev": 0.2,  # narrow start: with 1.0, HalfCheetah learns a flipping gait and Ant barely moves
        "normalize_input": True,  # joint positions and velocities differ in scale by orders of magnitude
        "normalize_returns": True,  # reward scales differ widely between tasks; one learning rate fits all
        "value_bootstrap": True,  # episodes end by time limit: the state after it still has value
        "rollout": 64,  # short trajectories keep policy lag low; GAE bootstraps across them
        "recurrence": 1,  # no RNN, so each step is its own sequence
        "batch_size": 1024,  # SGD minibatch size
        "num_batches_per_epoch": 4,  # 4 x 1024 = 4096 samples per training iteration
        "num_epochs": 2,  # with the large step size below, as sample-efficient as 10 epochs at 3e-4, 5x cheaper
        "learning_rate": 3e-3,  # large, and decayed to 0 over the run
        "lr_schedule": "linear_decay",  # ends the run with small steps, so the final policy is stable
        "gamma": 0.99,  # horizon of about 100 steps, matching the tasks' reward delays
        "gae_lambda": 0.95,  # usual bias/variance balance for the advantage estimate
        "ppo_clip_ratio": 0.2,  # the standard PPO trust region
        # policy and value share the encoder. The value loss has no 0.5 factor (Sample Factory's formula): 0.65 here
        # weighs it as 1.3 did with the factor. HalfCheetah, 1M frames, seed 1: 1,857 at 1.3, 3,668 at 0.65
        "value_loss_coeff": 0.65,
        "exploration_loss_coeff": 0.0,  # the Gaussian's learned stddev explores; an entropy bonus hurts here
        "max_grad_norm": 3.5,  # clips only outlier gradients; tighter clipping would shrink the large steps
        "env_frameskip": 1,  # the v5 tasks already apply their own frame_skip inside the simulator
        "worker_num_splits": WORKER_NUM_SPLITS,  # double buffering: half the envs step while the other half wait
        "env_threads": 0,  # the simulator releases the GIL: a serial run steps its envs on every core
        # phases of the 1,000-step episodes spread by truncating first episodes, not by ~31k simulated random steps
        "decorrelate_by_truncation": True,
        "train_for_env_steps": 1_000_000,  # the usual MuJoCo benchmark budget
    }
    overrides = dict(TASK_DEFAULTS.get(env_name, {}))
    # 64 envs x 64 steps: one round of rollouts fills one 4096-sample iteration
    defaults.update(env_placement(overrides.pop("total_envs", 64)))
    defaults.update(overrides)
    return defaults
