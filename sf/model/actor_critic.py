"""The actor-critic network: encoder -> core -> decoder -> action and value heads.

With `--actor_critic_share_weights=False` the critic gets its own encoder, core and decoder; the two branches
still travel as one tensor between the stages (features and RNN states concatenated, actor first), so callers
see the same interface either way.

The encoder, core and decoder come from the model factory's functions (`sf.model.factory`): the built-in ones unless
a user registered their own. A part a user registered is a row of the timing tree of the component that runs it
(`parts_timed_by`), named after its class, under the scope that calls the stage (the learner's `forward_head`, say).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from sf.algo.running_mean_std import RunningMeanStd
from sf.envs.spaces import action_spec_from_space, obs_spec_of_space
from sf.model.action_distributions import ActionDistribution
from sf.model.cores import default_make_core_func, recurrent_state_size, step_through
from sf.model.decoders import default_make_decoder_func
from sf.model.encoders import ConvEncoder, default_make_encoder_func
from sf.model.obs_normalizer import ObsNormalizer
from sf.utils.timing import Timing

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


@dataclass(frozen=True)
class BuiltInParts:
    """The parts an `ActorCritic` built without a model factory gets: the factory's first entries."""

    make_model_encoder_func: Any = default_make_encoder_func
    make_model_core_func: Any = default_make_core_func
    make_model_decoder_func: Any = default_make_decoder_func


class ActorCritic(nn.Module):
    """`action_logits` are the full distribution parameters, `num_action_params` columns: the categorical logits,
    the Gaussian means, then one log stddev per continuous dimension. Stored with each step, they let the learner
    rebuild the behaviour policy exactly (for its KL to the current policy).

    The log stddevs are a network output (state-dependent) with `--adaptive_stddev` and for any action space that
    mixes categorical and continuous parts (as in Sample Factory, where a Tuple always uses the default
    parameterization); otherwise they are one learned parameter started at `--initial_stddev`, and
    `--continuous_tanh_scale` squashes the means.
    """

    def __init__(self, obs_space, action_space, cfg, model_factory=None):
        """`obs_space`: a gymnasium Dict of the observations as sf lays them out (`sf.envs.spaces.obs_space_from_spec`),
        `action_space`: any space with the policy's flat action layout; `model_factory`: where the encoder, core and
        decoder functions come from (`sf.model.factory.ModelFactory`), the built-in ones when None."""
        super().__init__()
        obs_spec = obs_spec_of_space(obs_space)
        self.action_spec = action_spec = action_spec_from_space(action_space)
        self.obs_normalizer = ObsNormalizer(obs_spec, cfg)
        self.returns_normalizer = RunningMeanStd(()) if cfg.normalize_returns else None

        parts = model_factory if model_factory is not None else BuiltInParts()
        num_branches = 1 if cfg.actor_critic_share_weights else 2
        make_encoder, make_core, make_decoder = (
            parts.make_model_encoder_func,
            parts.make_model_core_func,
            parts.make_model_decoder_func,
        )
        self.encoders = nn.ModuleList(_part(make_encoder, "encoder", cfg, obs_space) for _ in range(num_branches))
        self._head_sizes = [enc.get_out_size() for enc in self.encoders]
        self.cores = nn.ModuleList(_part(make_core, "core", cfg, size) for size in self._head_sizes)
        self._core_sizes = [core.get_out_size() for core in self.cores]
        self.decoders = nn.ModuleList(_part(make_decoder, "decoder", cfg, size) for size in self._core_sizes)
        self._state_sizes = [_state_size(core, cfg) for core in self.cores]
        self.rnn_state_size = sum(self._state_sizes)
        builtin = BuiltInParts()
        self.custom_parts = {  # stage -> class name of the part a user registered for it
            stage: type(modules[0]).__name__
            for stage, modules, fn, default in (
                ("encoder", self.encoders, make_encoder, builtin.make_model_encoder_func),
                ("core", self.cores, make_core, builtin.make_model_core_func),
                ("decoder", self.decoders, make_decoder, builtin.make_model_decoder_func),
            )
            if fn is not default
        }
        self._rows = {stage: self.custom_parts.get(stage) for stage in ("encoder", "core", "decoder")}
        self._timing: Timing | None = None

        continuous_dim = action_spec.continuous_dim
        mixed = continuous_dim > 0 and len(action_spec.discrete_sizes) > 0
        self.adaptive_stddev = continuous_dim > 0 and (bool(cfg.adaptive_stddev) or mixed)
        self.num_action_params = action_spec.num_logits + continuous_dim
        head_size = self.num_action_params if self.adaptive_stddev else action_spec.num_logits
        self.action_head = nn.Linear(self.decoders[0].get_out_size(), head_size)
        self.value_head = nn.Linear(self.decoders[-1].get_out_size(), 1)
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
        TorchScript, which its initializer passes over), as do the RNN cores. A part a user registered gets `scheme` on
        its Linear and Conv2d weights, as Sample Factory's initializer gives every module it does not compile.
        `all_layers` applies `scheme` to every Linear and Conv2d weight instead."""
        if scheme not in INITIALIZATIONS:
            raise ValueError(f"--policy_initialization={scheme!r} is not one of {', '.join(INITIALIZATIONS)}")
        if scheme == "torch_default":
            return
        init = nn.init.orthogonal_ if scheme == "orthogonal" else nn.init.xavier_uniform_
        schemed = [self] if all_layers else [self.action_head, self.value_head, *self._resnet_trunks(), *self._users()]
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

    def _users(self) -> list[nn.Module]:
        """The parts users registered."""
        stages = {"encoder": self.encoders, "core": self.cores, "decoder": self.decoders}
        return [module for stage in self.custom_parts for module in stages[stage]]

    # timing ----------------------------------------------------------------------------------------------
    @contextmanager
    def parts_timed_by(self, timing: Timing) -> Iterator[None]:
        """Inside the block, each part a user registered is timed as a row of `timing` (named after its class) under
        whatever scope of `timing` calls it. Learner and inference worker share one model in a serial run: each
        names its own tree for the calls it makes."""
        previous, self._timing = self._timing, timing
        try:
            yield
        finally:
            self._timing = previous

    def _run(self, stage: str, part: nn.Module, *args):
        row = self._rows[stage]
        if row is None or self._timing is None:
            return part(*args)
        with self._timing.add_time(row):
            return part(*args)

    # stages --------------------------------------------------------------------------------------------
    def normalize_obs(self, obs: dict[str, torch.Tensor], update: bool = False) -> dict[str, torch.Tensor]:
        return self.obs_normalizer(obs, update=update)

    def forward_head(self, obs_norm: dict[str, torch.Tensor]) -> torch.Tensor:
        if len(self.encoders) == 1:
            return self._run("encoder", self.encoders[0], obs_norm)
        return torch.cat([self._run("encoder", enc, obs_norm) for enc in self.encoders], dim=1)

    def forward_core(self, x: torch.Tensor, rnn_states: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: x [B, F], rnn_states [B, rnn_state_size] (or None: zeros) -> (core out, new states)."""
        if rnn_states is None and self._rows["core"] is not None:  # the built-in cores take None; a user's a tensor
            rnn_states = x.new_zeros(x.shape[0], self.rnn_state_size)
        if len(self.cores) == 1:
            return self._run("core", self.cores[0], x, rnn_states)
        xs = x.split(self._head_sizes, dim=1)
        hs = rnn_states.split(self._state_sizes, dim=1) if rnn_states is not None else (None, None)
        outs, states = zip(*(self._run("core", core, xi, hi) for core, xi, hi in zip(self.cores, xs, hs)))
        return torch.cat(outs, dim=1), torch.cat(states, dim=1)

    def forward_core_seq(self, x: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """x [N, T, F] from h0 [N, rnn_state_size]; dones [N, T] resets the state after a step. Returns [N, T, F2]."""
        if len(self.cores) == 1:
            return self._run("core", _sequence_of(self.cores[0]), x, h0, dones)
        xs = x.split(self._head_sizes, dim=2)
        hs = h0.split(self._state_sizes, dim=1)
        return torch.cat(
            [self._run("core", _sequence_of(core), xi, hi, dones) for core, xi, hi in zip(self.cores, xs, hs)], dim=2
        )

    def forward_tail(self, core_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """core out [B, F2] -> (action_logits [B, num_action_params], values [B] in normalized-return space)."""
        branches = core_out.split(self._core_sizes, dim=1) if len(self.cores) > 1 else (core_out,)
        features = [self._run("decoder", dec, b) for dec, b in zip(self.decoders, branches)]
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


def _part(make, stage: str, cfg, arg) -> nn.Module:
    """What a factory function made, checked: a module that reports a positive output size."""
    part = make(cfg, arg)
    name = getattr(make, "__qualname__", repr(make))
    if not isinstance(part, nn.Module):
        raise TypeError(f"the {stage} factory {name} returned {type(part).__name__}, not a torch.nn.Module")
    size = getattr(part, "get_out_size", None)
    if size is None or not isinstance(size(), int) or size() <= 0:
        raise TypeError(
            f"the {stage} {type(part).__name__} made by {name} must report the size of its output as a positive int "
            f"(get_out_size() returned {size() if size is not None else 'nothing: there is no get_out_size'})"
        )
    return part


def _state_size(core: nn.Module, cfg) -> int:
    """The floats of state `core` keeps: its `state_size`, else what the config asks for (`recurrent_state_size`)."""
    size = getattr(core, "state_size", None)
    if size is None:
        return recurrent_state_size(cfg)
    if not isinstance(size, int) or size < 0:
        raise TypeError(f"the core {type(core).__name__} has state_size={size!r}; it must be an int >= 0")
    return size


def _sequence_of(core: nn.Module):
    """The callable that runs `core` over [N, T] sequences: its own `forward_seq`, else one step at a time."""
    return core.forward_seq if hasattr(core, "forward_seq") else partial(step_through, core)
