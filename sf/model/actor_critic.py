"""The actor-critic network: encoder -> core -> decoder -> action and value heads.

With `--actor_critic_share_weights=False` the critic gets its own encoder, core and decoder; the two branches
still travel as one tensor between the stages (features and RNN states concatenated, actor first), so callers
see the same interface either way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from sf.algo.running_mean_std import RunningMeanStd
from sf.envs.spaces import ActionSpec, ObsSpec
from sf.model.action_distributions import ActionDistribution
from sf.model.cores import create_core
from sf.model.encoders import Mlp, ObsEncoder
from sf.model.obs_normalizer import ObsNormalizer

# learned (adaptive) log std is kept in a range where exp() and 1/std stay well conditioned
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
INITIALIZATIONS = ("orthogonal", "xavier_uniform", "torch_default")


@dataclass
class PolicyOutput:
    actions: torch.Tensor  # [B, flat_dim] float32
    log_prob: torch.Tensor  # [B]
    values: torch.Tensor  # [B], in return space (denormalized)
    action_logits: torch.Tensor  # [B, num_action_params]: distribution parameters, see ActorCritic
    new_rnn_states: torch.Tensor  # [B, rnn_state_size]


class ActorCritic(nn.Module):
    """`action_logits` are the distribution parameters: `action_spec.num_logits` columns (categorical logits,
    then Gaussian means), plus `continuous_dim` learned log stds when `--adaptive_stddev` (num_action_params)."""

    def __init__(self, obs_spec: ObsSpec, action_spec: ActionSpec, cfg):
        super().__init__()
        self.action_spec = action_spec
        self.obs_normalizer = ObsNormalizer(obs_spec, cfg)
        self.returns_normalizer = RunningMeanStd(()) if cfg.normalize_returns else None

        num_branches = 1 if cfg.actor_critic_share_weights else 2
        self.encoders = nn.ModuleList(ObsEncoder(obs_spec, cfg) for _ in range(num_branches))
        self.cores = nn.ModuleList(create_core(cfg, enc.out_size) for enc in self.encoders)
        self.decoders = nn.ModuleList(
            Mlp(core.out_size, list(cfg.decoder_mlp_layers), cfg.nonlinearity) for core in self.cores
        )
        self._head_sizes = [enc.out_size for enc in self.encoders]
        self._core_sizes = [core.out_size for core in self.cores]
        self._state_sizes = [core.state_size for core in self.cores]
        self.rnn_state_size = sum(self._state_sizes)

        continuous_dim = action_spec.continuous_dim
        self.adaptive_stddev = bool(cfg.adaptive_stddev) and continuous_dim > 0
        self.num_action_params = action_spec.num_logits + (continuous_dim if self.adaptive_stddev else 0)
        self.action_head = nn.Linear(self.decoders[0].out_size, self.num_action_params)
        self.value_head = nn.Linear(self.decoders[-1].out_size, 1)
        initial_log_std = math.log(cfg.initial_stddev)
        if continuous_dim and not self.adaptive_stddev:
            self.log_std = nn.Parameter(torch.full((continuous_dim,), initial_log_std))
        else:
            self.register_parameter("log_std", None)
        self.tanh_scale = float(cfg.continuous_tanh_scale)
        self._initialize(cfg.policy_initialization, cfg.policy_init_gain, initial_log_std)
        self.to(memory_format=torch.channels_last)  # conv weights only; matches ConvEncoder's input layout

    def _initialize(self, scheme: str, gain: float, initial_log_std: float) -> None:
        if scheme not in INITIALIZATIONS:
            raise ValueError(f"--policy_initialization={scheme!r} is not one of {', '.join(INITIALIZATIONS)}")
        if scheme != "torch_default":
            init = nn.init.orthogonal_ if scheme == "orthogonal" else nn.init.xavier_uniform_
            for name, param in self.named_parameters():
                if name == "log_std":
                    continue
                if param.dim() >= 2:
                    init(param.data, gain=gain)
                else:
                    nn.init.zeros_(param.data)
            init(self.action_head.weight.data, gain=0.01)  # near-uniform initial policy
            init(self.value_head.weight.data, gain=1.0)
        if self.adaptive_stddev:
            with torch.no_grad():
                self.action_head.bias[self.action_spec.num_logits :].fill_(initial_log_std)

    # stages --------------------------------------------------------------------------------------------
    def normalize_obs(self, obs: dict[str, torch.Tensor], update: bool = False) -> dict[str, torch.Tensor]:
        return self.obs_normalizer(obs, update=update)

    def forward_head(self, obs_norm: dict[str, torch.Tensor]) -> torch.Tensor:
        if len(self.encoders) == 1:
            return self.encoders[0](obs_norm)
        return torch.cat([enc(obs_norm) for enc in self.encoders], dim=1)

    def forward_core(self, x: torch.Tensor, rnn_states: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: x [B, F], rnn_states [B, rnn_state_size] (or None) -> (core out, new states)."""
        if len(self.cores) == 1:
            return self.cores[0](x, rnn_states)
        xs = x.split(self._head_sizes, dim=1)
        hs = rnn_states.split(self._state_sizes, dim=1) if rnn_states is not None else (None, None)
        outs, states = zip(*(core(xi, hi) for core, xi, hi in zip(self.cores, xs, hs)))
        return torch.cat(outs, dim=1), torch.cat(states, dim=1)

    def forward_core_seq(self, x: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """x [N, T, F] from h0 [N, rnn_state_size]; dones [N, T] resets the state after a step. Returns [N, T, F2]."""
        if len(self.cores) == 1:
            return self.cores[0].forward_seq(x, h0, dones)
        xs = x.split(self._head_sizes, dim=2)
        hs = h0.split(self._state_sizes, dim=1)
        return torch.cat([core.forward_seq(xi, hi, dones) for core, xi, hi in zip(self.cores, xs, hs)], dim=2)

    def forward_tail(self, core_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """core out [B, F2] -> (action_logits [B, num_action_params], values [B] in normalized-return space)."""
        branches = core_out.split(self._core_sizes, dim=1) if len(self.cores) > 1 else (core_out,)
        features = [dec(b) for dec, b in zip(self.decoders, branches)]
        action_logits = self.action_head(features[0])
        values = self.value_head(features[-1]).squeeze(1)
        if self.tanh_scale > 0.0 and self.action_spec.continuous_dim:
            start = self.action_spec.num_logits - self.action_spec.continuous_dim
            end = self.action_spec.num_logits
            means = self.tanh_scale * torch.tanh(action_logits[:, start:end] / self.tanh_scale)
            action_logits = torch.cat([action_logits[:, :start], means, action_logits[:, end:]], dim=1)
        return action_logits, values

    def action_distribution(self, action_logits: torch.Tensor) -> ActionDistribution:
        if self.adaptive_stddev:
            num_logits = self.action_spec.num_logits
            log_std = action_logits[:, num_logits:].clamp(LOG_STD_MIN, LOG_STD_MAX)
            return ActionDistribution(self.action_spec, action_logits[:, :num_logits], log_std)
        return ActionDistribution(self.action_spec, action_logits, self.log_std)

    def forward(self, obs_norm: dict[str, torch.Tensor], rnn_states: torch.Tensor | None,
                deterministic: bool = False) -> PolicyOutput:
        core_out, new_rnn_states = self.forward_core(self.forward_head(obs_norm), rnn_states)
        action_logits, values = self.forward_tail(core_out)
        dist = self.action_distribution(action_logits)
        actions = dist.deterministic() if deterministic else dist.sample()
        if self.returns_normalizer is not None:
            values = self.returns_normalizer.denormalize(values)
        return PolicyOutput(actions, dist.log_prob(actions), values, action_logits, new_rnn_states)


def create_actor_critic(obs_spec: ObsSpec, action_spec: ActionSpec, cfg) -> ActorCritic:
    return ActorCritic(obs_spec, action_spec, cfg)
