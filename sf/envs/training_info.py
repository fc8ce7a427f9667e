"""Sample Factory's env-side interfaces for what training tells an env, with its names and meanings.

An env (or any wrapper of it) that subclasses `TrainingInfoInterface` gets `set_training_info(info)` from its rollout
worker at the end of each of its episodes (each agent's, in a multi-agent env): `info` is
`{"policy_id": p, "approx_total_training_steps": frames, "reward_shaping": None}`, the frames being those the
policy's learner had trained on at the runner's last progress line (every 5 s), for curricula and the like.

`RewardShapingInterface` is the class population-based training (`--with_pbt`) changes an env's reward shaping
through, as Sample Factory's does: the probe reads the env's default scheme (`default_reward_shaping`), and at the end
of each of its episodes (each agent's) an env gets the scheme of the policy that acted, once population-based training
has set one (`set_reward_shaping(scheme, agent_idx)`).
"""

from __future__ import annotations

from typing import Any


class TrainingInfoInterface:
    def __init__(self):
        self.training_info: dict[str, Any] = {}

    def set_training_info(self, training_info: dict[str, Any]) -> None:
        """Keep what training says: `approx_total_training_steps` lags the learner by up to a progress line."""
        self.training_info = training_info


class RewardShapingInterface:
    def get_default_reward_shaping(self) -> dict[str, Any] | None:
        """The env's reward shaping scheme, string -> float."""
        raise NotImplementedError

    def set_reward_shaping(self, reward_shaping: dict[str, Any], agent_idx: int | slice) -> None:
        """Set the scheme of one agent (or a slice of agents)."""
        raise NotImplementedError


def find_interface(env: Any, interface: type) -> Any:
    """The env itself or the first wrapper on the way down to the unwrapped env that implements `interface`."""
    seen = set()
    while env is not None and id(env) not in seen:
        if isinstance(env, interface):
            return env
        seen.add(id(env))
        env = getattr(env, "env", None)
    return None


def find_training_info_interface(env: Any) -> TrainingInfoInterface | None:
    return find_interface(env, TrainingInfoInterface)


def find_reward_shaping_interface(env: Any) -> RewardShapingInterface | None:
    return find_interface(env, RewardShapingInterface)


def default_reward_shaping(env: Any) -> dict[str, Any] | None:
    """The env's reward shaping scheme when it has Sample Factory's interface, else None."""
    shaping = find_reward_shaping_interface(env)
    return shaping.get_default_reward_shaping() if shaping is not None else None


def training_info(policy_id: int, env_steps: int, reward_shaping: dict | None = None) -> dict[str, Any]:
    return {"policy_id": policy_id, "approx_total_training_steps": env_steps, "reward_shaping": reward_shaping}
