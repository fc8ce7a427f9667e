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
from sf.model.encoders import ConvEncoder, Mlp, ObsEncoder
from sf.model.obs_normalizer import ObsNormalizer

# Sample Factory keeps the Gaussian's stddev inside [1e-4, 1e4]
LOG_STD_MIN, LOG_STD_MAX = math.log(1e-4), math.log(1e4)
INITIALIZATIONS = ("orthogonal", "xavier_uniform", "torch_default")


@dataclass
class PolicyOutput:
    actions: torch.Tensor  # [B, flat_dim] float32
    log_prob: torch.Tensor  # [B]
    values: torch.Tensor  # [B], in return space (denormalized)
    action_logits: torch.Tensor  # [B, num_action_params]: distribution parameters, see ActorCritic
    new_rnn_states: torch.Tensor  # [B, rnn_state_size]


class ActorCritic(nn.Module):
    """`action_logits` are the full distribution parameters, `num_action_params` columns: the categorical logits,
    the Gaussian means, then one log stddev per continuous dimension. Stored with each step, they let the learner
    rebuild the behaviour policy exactly (for its KL to the current policy).

    The log stddevs are a network output (state-dependent) with `--adaptive_stddev` and for any action space that
    mixes categorical and continuous parts (as in Sample Factory, where a Tuple always uses the default
    parameterization); otherwise they are one learned parameter started at `--initial_stddev`, and
    `--continuous_tanh_scale` squashes the means.
    """

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
        mixed = continuous_dim > 0 and len(action_spec.discrete_sizes) > 0
        self.adaptive_stddev = continuous_dim > 0 and (bool(cfg.adaptive_stddev) or mixed)
        self.num_action_params = action_spec.num_logits + continuous_dim
        head_size = self.num_action_params if self.adaptive_stddev else action_spec.num_logits
        self.action_head = nn.Linear(self.decoders[0].out_size, head_size)
        self.value_head = nn.Linear(self.decoders[-1].out_size, 1)
        if continuous_dim and not self.adaptive_stddev:
            self.log_std = nn.Parameter(torch.full((continuous_dim,), math.log(cfg.initial_stddev)))
        else:
            self.register_parameter("log_std", None)
        self.tanh_scale = float(cfg.continuous_tanh_scale) if not self.adaptive_stddev else 0.0
        self._initialize(cfg.policy_initialization, cfg.policy_init_gain, bool(cfg.init_all_layers))
        self.to(memory_format=torch.channels_last)  # conv weights only; matches ConvEncoder's input layout

    def _initialize(self, scheme: str, gain: float, all_layers: bool) -> None:
        """What Sample Factory 2.1.1's initializer does in effect: `scheme` with `gain` on the weights of the action
        and value heads and of the ResNet trunk, zero biases on every Linear and Conv2d layer; the MLP encoders,
        plain conv trunks and MLP decoders keep PyTorch's default weights (Sample Factory compiles those with
        TorchScript, which its initializer passes over), as do the RNN cores. `all_layers` applies `scheme` to
        every Linear and Conv2d weight instead."""
        if scheme not in INITIALIZATIONS:
            raise ValueError(f"--policy_initialization={scheme!r} is not one of {', '.join(INITIALIZATIONS)}")
        if scheme == "torch_default":
            return
        init = nn.init.orthogonal_ if scheme == "orthogonal" else nn.init.xavier_uniform_
        schemed = [self] if all_layers else [self.action_head, self.value_head, *self._resnet_trunks()]
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)) and module.bias is not None:
                nn.init.zeros_(module.bias.data)
        for root in schemed:
            for module in root.modules():
                if isinstance(module, (nn.Linear, nn.Conv2d)):
                    init(module.weight.data, gain=gain)

    def _resnet_trunks(self) -> list[nn.Module]:
        return [m.trunk for m in self.modules() if isinstance(m, ConvEncoder) and m.is_resnet]

    def summaries(self) -> dict[str, float]:
        """The normalizers' statistics under Sample Factory's TensorBoard names (`obs_running_mean`,
        `returns_running_std`, ...), for the learner's statistics."""
        stats = self.obs_normalizer.summaries()
        if self.returns_normalizer is not None:
            stats.update(self.returns_normalizer.summary("returns"))
        return stats

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
        if self.log_std is not None:
            means = action_logits[:, self.action_spec.num_logits - self.action_spec.continuous_dim :]
            if self.tanh_scale > 0.0:
                means = self.tanh_scale * torch.tanh(means / self.tanh_scale)
            discrete_logits = action_logits[:, : self.action_spec.num_logits - self.action_spec.continuous_dim]
            log_std = self.log_std.expand(action_logits.shape[0], -1)
            action_logits = torch.cat([discrete_logits, means, log_std], dim=1)
        return action_logits, values

    def action_distribution(self, action_logits: torch.Tensor) -> ActionDistribution:
        """The distribution the parameters describe; works as well on parameters stored by an older policy."""
        num_logits = self.action_spec.num_logits
        if not self.action_spec.continuous_dim:
            return ActionDistribution(self.action_spec, action_logits)
        log_std = action_logits[:, num_logits:].clamp(LOG_STD_MIN, LOG_STD_MAX)
        return ActionDistribution(self.action_spec, action_logits[:, :num_logits], log_std)

    def forward(
        self, obs_norm: dict[str, torch.Tensor], rnn_states: torch.Tensor | None, deterministic: bool = False
    ) -> PolicyOutput:
        core_out, new_rnn_states = self.forward_core(self.forward_head(obs_norm), rnn_states)
        action_logits, values = self.forward_tail(core_out)
        dist = self.action_distribution(action_logits)
        actions = dist.deterministic() if deterministic else dist.sample()
        if self.returns_normalizer is not None:
            values = self.returns_normalizer.denormalize(values)
        return PolicyOutput(actions, dist.log_prob(actions), values, action_logits, new_rnn_states)


def create_actor_critic(obs_spec: ObsSpec, action_spec: ActionSpec, cfg) -> ActorCritic:
    return ActorCritic(obs_spec, action_spec, cfg)
