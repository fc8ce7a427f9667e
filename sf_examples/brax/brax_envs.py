"""Brax envs as batched env objects (`sf.envs.batched`), under Sample Factory's Brax example's names and flags.

One env object is a Brax env of `--env_agents` copies, jit-compiled by JAX; observations, rewards and dones cross
to torch by DLPack (no copy), actions back the same way (or from numpy). JAX runs where it finds a device: the GPU
with a CUDA build of jaxlib, the CPU otherwise (where Brax is slow: a smoke test, not a way to learn). Brax resets
a copy whose episode ended inside the same step (its AutoResetWrapper), as a batched env must.

Brax is an optional extra (`pip install 'sf[brax]'`); without it an env of this family fails in one line saying so.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium
import numpy as np
import torch

from sf.envs.registry import EnvConfig, EnvNotFoundError, register_env

log = logging.getLogger("sf")

INSTALL_HINT = "pip install 'sf[brax]'"
SF_BRAX_ENVS = ("ant", "humanoid", "halfcheetah", "walker2d")  # Sample Factory's Brax example's envs
MORE_BRAX_ENVS = ("hopper", "inverted_pendulum", "inverted_double_pendulum", "reacher", "swimmer", "pusher")
BRAX_ENVS = SF_BRAX_ENVS + MORE_BRAX_ENVS
DEFAULT_AGENTS = 2048  # Sample Factory's --env_agents default for Brax
EVALUATION_AGENTS = 64  # copies an evaluation plays (Sample Factory's choice)


def require_brax() -> tuple[Any, Any]:
    """The `brax.envs` and `jax` modules, or one line saying how to install them."""
    try:
        import jax
        from brax import envs
    except ImportError as exc:
        raise EnvNotFoundError(f"Brax envs need the brax package ({exc}): {INSTALL_HINT}") from None
    return envs, jax


def brax_name(full_env_name: str) -> str:
    """`ant` and `brax_ant` both name Brax's `ant`."""
    return full_env_name.removeprefix("brax_")


class BraxEnv:
    """A Brax env of `num_agents` copies with Sample Factory's batched env API (`sf.envs.batched`)."""

    is_multiagent = False

    def __init__(
        self,
        name: str,
        num_agents: int,
        backend: str | None = None,
        seed: int = 0,
        clamp_actions: bool = False,
        clamp_rew_obs: bool = False,
        render_res: int = 200,
        episode_length: int = 1000,
    ):
        envs, jax = require_brax()
        if torch.cuda.is_available():
            torch.ones(1, device="cuda")  # torch's CUDA context before JAX's, as Sample Factory does
        self.jax = jax
        kwargs = {"backend": backend} if backend else {}
        self.env = envs.create(name, episode_length=episode_length, batch_size=num_agents, **kwargs)
        self.num_agents = num_agents
        self.clamp_actions = clamp_actions
        self.clamp_rew_obs = clamp_rew_obs
        self.render_res = render_res
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (self.env.observation_size,), np.float32)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (self.env.action_size,), np.float32)
        self._reset = jax.jit(self.env.reset)
        self._step = jax.jit(self.env.step)
        self._key = jax.random.PRNGKey(seed)
        self.state = None
        self.device = torch.from_dlpack(jax.numpy.zeros(1)).device

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        if seed is not None:
            self._key = self.jax.random.PRNGKey(seed)
        self.state = self._reset(self._key)
        return self._obs(), {}

    def step(self, actions: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        if isinstance(actions, torch.Tensor):
            if self.clamp_actions:
                actions = actions.clamp(-1.0, 1.0)
            actions = self.jax.dlpack.from_dlpack(actions.contiguous())
        else:
            actions = np.clip(actions, -1.0, 1.0) if self.clamp_actions else actions
        self.state = self._step(self.state, actions)
        rewards = torch.from_dlpack(self.state.reward)
        done = torch.from_dlpack(self.state.done) > 0
        truncated = (torch.from_dlpack(self.state.info["truncation"]) > 0) & done
        if self.clamp_rew_obs:
            rewards = rewards.clamp(-100.0, 100.0)
        return self._obs(), rewards, done & ~truncated, truncated, {}

    def _obs(self) -> torch.Tensor:
        obs = torch.from_dlpack(self.state.obs)
        return obs.clamp(-100.0, 100.0) if self.clamp_rew_obs else obs

    def render(self) -> np.ndarray:
        """The first copy, drawn by Brax's MuJoCo renderer at `--brax_render_res`."""
        from brax.io import image

        first = self.jax.tree_util.tree_map(lambda x: x[0], self.state.pipeline_state)
        return np.asarray(image.render_array(self.env.sys, first, self.render_res, self.render_res))

    def close(self) -> None:
        self.state = None


def make_brax_env(full_env_name: str, cfg: Any = None, env_config: EnvConfig | None = None, render_mode=None):
    evaluation = hasattr(cfg, "max_num_episodes")  # an enjoy script's config: a few copies play
    agents = getattr(cfg, "env_agents", -1)
    agents = EVALUATION_AGENTS if evaluation else (agents if agents >= 1 else DEFAULT_AGENTS)
    env_id = env_config.env_id if env_config is not None else 0
    seed = (getattr(cfg, "seed", None) or 0) * 100_003 + max(env_id, 0)
    backend = getattr(cfg, "brax_backend", "auto")
    return BraxEnv(
        brax_name(full_env_name),
        agents,
        backend=None if backend == "auto" else backend,
        seed=seed,
        clamp_actions=bool(getattr(cfg, "clamp_actions", False)),
        clamp_rew_obs=bool(getattr(cfg, "clamp_rew_obs", False)),
        render_res=int(getattr(cfg, "brax_render_res", 200)),
    )


def register_brax_envs() -> None:
    for name in BRAX_ENVS:
        register_env(name, make_brax_env)
        register_env(f"brax_{name}", make_brax_env)


def add_brax_args(parser) -> None:
    """Sample Factory's Brax flags (`--env_agents` is sf's own flag; its Brax default is set below)."""
    from sf.cfg.arguments import str2bool

    parser.add_argument("--clamp_actions", default=False, type=str2bool, help="clamp actions to [-1, 1]")
    parser.add_argument(
        "--clamp_rew_obs", default=False, type=str2bool, help="clamp rewards and observations to [-100, 100]"
    )
    parser.add_argument(
        "--brax_render_res",
        default=200,
        type=int,
        help="side in pixels of the frames an evaluation records (--save_video)",
    )
    parser.add_argument(
        "--brax_backend",
        default="auto",
        choices=("auto", "mjx", "generalized", "positional", "spring"),
        help="Brax's physics pipeline (auto: the env's default; positional and spring are the fast ones on a CPU)",
    )


def brax_defaults(env_name: str) -> dict[str, Any]:
    """Sample Factory's Brax example's defaults (those of IsaacGymEnvs' configs)."""
    defaults = {
        "batched_sampling": True,
        "num_workers": 1,
        "num_envs_per_worker": 1,
        "worker_num_splits": 1,
        "env_agents": DEFAULT_AGENTS,
        "train_for_env_steps": 100_000_000,
        "use_rnn": False,
        "adaptive_stddev": False,
        "policy_initialization": "torch_default",
        "env_gpu_actions": True,
        "reward_scale": 0.01,
        "max_grad_norm": 1.0,
        "rollout": 32,
        "batch_size": 32768,
        "num_batches_per_epoch": 2,
        "num_epochs": 5,
        "ppo_clip_ratio": 0.2,
        "ppo_clip_value": 1.0,
        "value_loss_coeff": 2.0,
        "exploration_loss_coeff": 0.0,
        "nonlinearity": "elu",
        "encoder_mlp_layers": [256, 128, 64],
        "actor_critic_share_weights": True,
        "learning_rate": 3e-4,
        "lr_schedule": "kl_adaptive_epoch",
        "lr_schedule_kl_threshold": 0.008,
        "lr_adaptive_max": 2e-3,
        "shuffle_minibatches": False,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "with_vtrace": False,
        "value_bootstrap": True,
        "normalize_input": True,
        "normalize_returns": True,
        "save_best_after": 5_000_000,
        "serial_mode": True,
        "async_rl": False,
        "experiment_summaries_interval": 3,
    }
    per_env = {"ant": {"save_every_sec": 15}, "humanoid": {"encoder_mlp_layers": [512, 256, 128]}}
    return {**defaults, **per_env.get(brax_name(env_name), {})}
