"""The last layer of the actor: decoder features -> the action distribution's parameters and the distribution, by
Sample Factory's names (`ActorCritic.get_action_parameterization` picks one). Parameters are in sf's layout, what
the inference worker stores with each step: the categorical logits, the Gaussian means, then one log stddev per
continuous dimension (`ActionDistribution.from_params`)."""

from __future__ import annotations

import math

import torch
from torch import nn

from sf.envs.spaces import ActionSpec, action_spec_from_space
from sf.model.action_distributions import ActionDistribution


def learned_stddev_params(spec: ActionSpec, raw: torch.Tensor, log_std: torch.Tensor, tanh_scale: float):
    """Parameters from a layer that gives the categorical logits and the means only [B, num_logits] and one learned
    log stddev per continuous dimension; `tanh_scale` > 0 squashes the means into [-tanh_scale, tanh_scale]."""
    discrete = spec.num_logits - spec.continuous_dim
    means = raw[:, discrete:]
    if tanh_scale > 0.0:
        means = tanh_scale * torch.tanh(means / tanh_scale)
    return torch.cat([raw[:, :discrete], means, log_std.expand(raw.shape[0], -1)], dim=1)


class ActionParameterizationDefault(nn.Module):
    """One linear layer gives every parameter (state-dependent stddevs for continuous actions)."""

    def __init__(self, cfg, core_out_size: int, action_space):
        super().__init__()
        self.cfg, self.action_space = cfg, action_space
        self.spec = action_spec_from_space(action_space)
        self.distribution_linear = nn.Linear(core_out_size, self.spec.num_logits + self.spec.continuous_dim)

    def forward(self, actor_core_output: torch.Tensor) -> tuple[torch.Tensor, ActionDistribution]:
        params = self.distribution_linear(actor_core_output)
        return params, ActionDistribution.from_params(self.spec, params)


class ActionParameterizationContinuousNonAdaptiveStddev(nn.Module):
    """The linear layer gives the means; the stddevs are one learned parameter, started at `--initial_stddev`."""

    def __init__(self, cfg, core_out_size: int, action_space):
        super().__init__()
        self.cfg, self.action_space = cfg, action_space
        self.spec = action_spec_from_space(action_space)
        if not self.spec.continuous_dim:
            raise ValueError("a learned, state-independent stddev needs a continuous action space")
        self.distribution_linear = nn.Linear(core_out_size, self.spec.num_logits)
        self.tanh_scale = float(cfg.continuous_tanh_scale)
        self.learned_stddev = nn.Parameter(torch.full((self.spec.continuous_dim,), math.log(cfg.initial_stddev)))

    def forward(self, actor_core_output: torch.Tensor) -> tuple[torch.Tensor, ActionDistribution]:
        raw = self.distribution_linear(actor_core_output)
        params = learned_stddev_params(self.spec, raw, self.learned_stddev, self.tanh_scale)
        return params, ActionDistribution.from_params(self.spec, params)
