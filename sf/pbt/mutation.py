"""How population-based training mutates a policy's hyperparameters and reward shaping: Sample Factory's rules.

Each value mutates with probability `--pbt_mutation_rate`. A value that differs from its default goes back to the
default with probability `RESET_TO_DEFAULT` instead; otherwise it is multiplied or divided (a coin toss) by a factor
drawn uniformly from [`--pbt_perturb_min`, `--pbt_perturb_max`]. The discount factor and Adam's betas, which live
just below 1, mutate through their distance to 1 by a factor in [1.01, 1.2] (`1 - (1 - x) * f` or
`1 - (1 - x) / f`, at least `EPS`); a boolean flips. Reward shaping schemes mutate the same way, each number of
the (nested) dict, each element of a list or tuple.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from sf.runtime.learner import PER_POLICY_HYPERPARAMETERS

EPS = 1e-8
RESET_TO_DEFAULT = 0.01
NEAR_ONE = ("gamma", "adam_beta1", "adam_beta2")  # mutated through 1 - x, gently
NEAR_ONE_FACTOR = (1.01, 1.2)


def tuned(cfg) -> tuple[str, ...]:
    """The hyperparameters population-based training tunes: every per-policy one, the discount factor only with
    `--pbt_optimize_gamma`."""
    return tuple(name for name in PER_POLICY_HYPERPARAMETERS if name != "gamma" or cfg.pbt_optimize_gamma)


@dataclass(frozen=True)
class Change:
    """One mutated value: its name (`key` or `key_<index>` inside a list, `outer/inner` in a nested dict)."""

    name: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Perturbation:
    rate: float  # --pbt_mutation_rate
    factor_min: float  # --pbt_perturb_min
    factor_max: float  # --pbt_perturb_max

    @classmethod
    def from_cfg(cls, cfg) -> Perturbation:
        return cls(cfg.pbt_mutation_rate, cfg.pbt_perturb_min, cfg.pbt_perturb_max)

    def value(self, name: str, value: Any, default: Any, rng: random.Random) -> Any:
        """`value` after one chance to mutate (the same value when it does not)."""
        if rng.random() > self.rate:
            return value
        if value != default and rng.random() < RESET_TO_DEFAULT:
            return default
        if isinstance(value, bool):
            return not value
        if name in NEAR_ONE:
            factor = rng.uniform(*NEAR_ONE_FACTOR)
            return max(EPS, 1.0 - scaled(1.0 - float(value), factor, rng))
        return scaled(float(value), rng.uniform(self.factor_min, self.factor_max), rng)

    def values(self, values: dict, defaults: dict, rng: random.Random, prefix: str = "") -> tuple[dict, list[Change]]:
        """A mutated copy of a (nested) dict of numbers, and what changed. `defaults` has the same structure."""
        mutated, changes = {}, []
        for key, value in values.items():
            name = f"{prefix}{key}"
            default = defaults.get(key, value) if isinstance(defaults, dict) else value
            if isinstance(value, dict):
                mutated[key], inner = self.values(value, default, rng, f"{name}/")
                changes += inner
            elif isinstance(value, (list, tuple)):
                items = [
                    self.value(f"{name}_{i}", item, default[i] if i < len(default) else item, rng)
                    for i, item in enumerate(value)
                ]
                changes += [
                    Change(f"{name}_{i}", old, new) for i, (old, new) in enumerate(zip(value, items)) if old != new
                ]
                mutated[key] = type(value)(items)
            elif isinstance(value, (int, float)):
                mutated[key] = self.value(key, value, default, rng)
                if mutated[key] != value:
                    changes.append(Change(name, value, mutated[key]))
            else:
                mutated[key] = value
        return mutated, changes


def scaled(value: float, factor: float, rng: random.Random) -> float:
    """`value` divided or multiplied by `factor`, a coin toss (Sample Factory's `perturb_float`)."""
    return value / factor if rng.random() < 0.5 else value * factor
