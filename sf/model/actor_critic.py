"""The actor-critic, by Sample Factory's names: `ActorCritic`, the base class a user's whole model subclasses, and
`ActorCriticSharedWeights` / `ActorCriticSeparateWeights`, sf's model built from the model factory's encoder, core
and decoder (`sf.model.factory`): encoder -> core -> decoder -> action and value heads.

The base class has Sample Factory's interface: `forward_head(obs)`, `forward_core(head, rnn_states)`,
`forward_tail(core, values_only, sample_actions)` and `forward(obs, rnn_states, values_only)`, the last two returning
a `TensorDict` (`values`, `action_logits`, and with sampling `actions` and `log_prob_actions`; `forward` adds
`new_rnn_states`), `get_action_parameterization`, `_maybe_sample_actions` and `action_distribution()`. The runtime
drives every model through it, plus two entry points of its own with a generic body: `policy_step` (the inference
worker's call, in sf's flat action layout, values in return space) and `forward_core_seq` (the learner's recurrent
pass: one `forward_core` call over a PackedSequence of episode pieces, as in Sample Factory).

With separate weights the critic gets its own encoder, core and decoder; the two branches still travel as one tensor
between the stages (features and RNN states concatenated, actor first), so callers see the same interface either
way. A part a user registered is a row of the timing tree of the component that runs it (`parts_timed_by`), named
after its class, under the scope that calls the stage (the learner's `forward_head`, say).
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
from sf.model.action_distributions import LOG_STD_MAX, LOG_STD_MIN, ActionDistribution
from sf.model.action_parameterization import (
    ActionParameterizationContinuousNonAdaptiveStddev,
    ActionParameterizationDefault,
    learned_stddev_params,
)
from sf.model.cores import default_make_core_func, recurrent_state_size, sequences_or_steps
from sf.model.decoders import default_make_decoder_func
from sf.model.encoders import ConvEncoder, default_make_encoder_func
from sf.model.obs_normalizer import ObsNormalizer
from sf.model.tensor_dict import TensorDict
from sf.utils.timing import Timing

__all__ = ["LOG_STD_MAX", "LOG_STD_MIN", "ActorCritic", "ActorCriticSeparateWeights", "ActorCriticSharedWeights"]
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
    """The parts an actor-critic built without a model factory gets: the factory's first entries."""

    make_model_encoder_func: Any = default_make_encoder_func
    make_model_core_func: Any = default_make_core_func
    make_model_decoder_func: Any = default_make_decoder_func


class ActorCritic(nn.Module):
    """Sample Factory's base class: the observation and return normalizers, the action space, and the interface a
    subclass fills in (`forward_head`, `forward_core`, `forward_tail`, `forward`).

    `action_logits` are the full distribution parameters in sf's layout, `num_action_params` columns: the categorical
    logits, the Gaussian means, then one log stddev per continuous dimension (`get_action_parameterization` gives
    them so). Stored with each step, they let the learner rebuild the behaviour policy exactly (for its KL to the
    current policy). `rnn_state_size`: the floats of state per env, what `--use_rnn`, `--rnn_type`, `--rnn_size`,
    `--rnn_num_layers` and `--actor_critic_share_weights` ask for unless a subclass sets it.
    """

    def __init__(self, obs_space, action_space, cfg):
        """`obs_space`: a gymnasium Dict of the observations as sf lays them out (`sf.envs.spaces.obs_space_from_spec`),
        `action_space`: any space with the policy's flat action layout."""
        super().__init__()
        self.cfg = cfg
        self.action_space = action_space
        self.action_spec = action_spec = action_spec_from_space(action_space)
        self.num_action_params = action_spec.num_logits + action_spec.continuous_dim
        self.encoders: Any = []  # Sample Factory's list of the model's encoders
        self.obs_normalizer = ObsNormalizer(obs_spec_of_space(obs_space), cfg)
        self.returns_normalizer = RunningMeanStd(()) if cfg.normalize_returns else None
        self.rnn_state_size = recurrent_state_size(cfg) * (1 if cfg.actor_critic_share_weights else 2)
        self.custom_parts: dict[str, str] = {}  # stage -> class name of a part a user registered for it
        self.last_action_distribution: ActionDistribution | None = None  # set by each forward_tail
        self._timing: Timing | None = None

    # Sample Factory's helpers ------------------------------------------------------------------------------
    def get_action_parameterization(self, decoder_output_size: int) -> nn.Module:
        """The actor's last layer: a learned stddev for a purely continuous action space without
        `--adaptive_stddev`, else one linear layer for every parameter."""
        spec = self.action_spec
        if not self.cfg.adaptive_stddev and spec.continuous_dim and not spec.discrete_sizes:
            return ActionParameterizationContinuousNonAdaptiveStddev(self.cfg, decoder_output_size, self.action_space)
        return ActionParameterizationDefault(self.cfg, decoder_output_size, self.action_space)

    def initialize_weights(self, layer: nn.Module) -> None:
        """For `self.apply`: zero biases, `--policy_initialization` with `--policy_init_gain` on Linear and Conv2d
        weights."""
        scheme = self.cfg.policy_initialization
        if getattr(layer, "bias", None) is not None and isinstance(layer.bias, nn.Parameter):
            layer.bias.data.fill_(0)
        if isinstance(layer, (nn.Linear, nn.Conv2d)) and scheme in ("orthogonal", "xavier_uniform"):
            init = nn.init.orthogonal_ if scheme == "orthogonal" else nn.init.xavier_uniform_
            init(layer.weight.data, gain=self.cfg.policy_init_gain)

    def model_to_device(self, device: torch.device) -> None:
        self.to(device)

    def normalize_obs(self, obs: dict[str, torch.Tensor], update: bool = False) -> dict[str, torch.Tensor]:
        return self.obs_normalizer(obs, update=update)

    def summaries(self) -> dict[str, float]:
        """The normalizers' statistics under Sample Factory's TensorBoard names (`obs_running_mean`,
        `returns_running_std`, ...), for the learner's statistics."""
        stats = self.obs_normalizer.summaries()
        if self.returns_normalizer is not None:
            stats.update(self.returns_normalizer.summary("returns"))
        return stats

    def action_distribution(self, action_logits: torch.Tensor | None = None) -> ActionDistribution:
        """The distribution of the last `forward_tail` (Sample Factory's call), or of the given parameters, which may
        have been stored by an older policy."""
        if action_logits is None:
            return self.last_action_distribution
        return ActionDistribution.from_params(self.action_spec, action_logits)

    def _maybe_sample_actions(self, sample_actions: bool, result: TensorDict) -> None:
        """With `sample_actions`, `result` gets `actions` drawn from the last distribution (one categorical action
        as [B], else [B, actions] in sf's flat layout) and their `log_prob_actions`."""
        if sample_actions:
            actions = self.last_action_distribution.sample()
            result["log_prob_actions"] = self.last_action_distribution.log_prob(actions)
            result["actions"] = actions.squeeze(dim=1)

    # the interface a subclass fills in --------------------------------------------------------------------
    def forward_head(self, normalized_obs_dict: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must define forward_head(normalized_obs_dict)")

    def forward_core(self, head_output, rnn_states):
        raise NotImplementedError(f"{type(self).__name__} must define forward_core(head_output, rnn_states)")

    def forward_tail(self, core_output, values_only: bool, sample_actions: bool) -> TensorDict:
        raise NotImplementedError(f"{type(self).__name__} must define forward_tail(core_output, values_only, ...)")

    def forward(self, normalized_obs_dict, rnn_states, values_only: bool = False) -> TensorDict:
        raise NotImplementedError(f"{type(self).__name__} must define forward(normalized_obs_dict, rnn_states, ...)")

    # what the runtime calls -------------------------------------------------------------------------------
    def policy_step(
        self, obs_norm: dict[str, torch.Tensor], rnn_states: torch.Tensor | None, deterministic: bool = False
    ) -> PolicyOutput:
        """One inference step through `forward`: actions in sf's flat layout [B, flat_dim] (the most likely ones with
        `deterministic`), their log-probabilities, values in return space and the new RNN states."""
        batch = next(iter(obs_norm.values())).shape[0]
        if rnn_states is None:
            rnn_states = torch.zeros(batch, self.rnn_state_size, device=next(iter(obs_norm.values())).device)
        result = self.forward(obs_norm, rnn_states)
        if deterministic:
            dist = self.action_distribution()
            actions = dist.deterministic()
            log_prob = dist.log_prob(actions)
        else:
            actions, log_prob = result["actions"].reshape(batch, -1).float(), result["log_prob_actions"]
        values = result["values"].reshape(batch)
        if self.returns_normalizer is not None:
            values = self.returns_normalizer.denormalize(values)
        new_rnn_states = result.get("new_rnn_states", rnn_states)
        return PolicyOutput(actions, log_prob.reshape(batch), values, result["action_logits"], new_rnn_states)

    def forward_core_seq(self, x: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """x [N, T, F] from h0 [N, rnn_state_size]; dones [N, T] resets the state after a step. Returns [N, T, F2]:
        one `forward_core` call over a PackedSequence of the window's episode pieces, as Sample Factory's learner
        makes it (one step at a time for a `forward_core` that fails on one)."""
        return sequences_or_steps(self, self.forward_core, x, h0, dones)

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


class _ActorCriticOfParts(ActorCritic):
    """sf's model: the encoder, core and decoder from a model factory (`sf.model.factory.ModelFactory`; the
    built-in ones when None), once or, with `share_weights=False`, for the actor and the critic each.

    The log stddevs are a network output (state-dependent) with `--adaptive_stddev` and for any action space that
    mixes categorical and continuous parts (as in Sample Factory, where a Tuple always uses the default
    parameterization); otherwise they are one learned parameter started at `--initial_stddev`, and
    `--continuous_tanh_scale` squashes the means.
    """

    def __init__(self, obs_space, action_space, cfg, model_factory, share_weights: bool):
        super().__init__(obs_space, action_space, cfg)
        action_spec = self.action_spec
        parts = model_factory if model_factory is not None else BuiltInParts()
        num_branches = 1 if share_weights else 2
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
        self.custom_parts = {
            stage: type(modules[0]).__name__
            for stage, modules, fn, default in (
                ("encoder", self.encoders, make_encoder, builtin.make_model_encoder_func),
                ("core", self.cores, make_core, builtin.make_model_core_func),
                ("decoder", self.decoders, make_decoder, builtin.make_model_decoder_func),
            )
            if fn is not default
        }
        self._rows = {stage: self.custom_parts.get(stage) for stage in ("encoder", "core", "decoder")}

        continuous_dim = action_spec.continuous_dim
        mixed = continuous_dim > 0 and len(action_spec.discrete_sizes) > 0
        self.adaptive_stddev = continuous_dim > 0 and (bool(cfg.adaptive_stddev) or mixed)
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

    def _users(self) -> list[nn.Module]:
        """The parts users registered."""
        stages = {"encoder": self.encoders, "core": self.cores, "decoder": self.decoders}
        return [module for stage in self.custom_parts for module in stages[stage]]

    def _run(self, stage: str, part: nn.Module, *args):
        row = self._rows[stage]
        if row is None or self._timing is None:
            return part(*args)
        with self._timing.add_time(row):
            return part(*args)

    # stages --------------------------------------------------------------------------------------------
    def forward_head(self, normalized_obs_dict: dict[str, torch.Tensor]) -> torch.Tensor:
        if len(self.encoders) == 1:
            return self._run("encoder", self.encoders[0], normalized_obs_dict)
        return torch.cat([self._run("encoder", enc, normalized_obs_dict) for enc in self.encoders], dim=1)

    def forward_core(self, head_output: torch.Tensor, rnn_states: torch.Tensor | None):
        """One step: head_output [B, F], rnn_states [B, rnn_state_size] (or None: zeros) -> (core out, new states)."""
        x = head_output
        if rnn_states is None and self._rows["core"] is not None:  # the built-in cores take None; a user's a tensor
            rnn_states = x.new_zeros(x.shape[0], self.rnn_state_size)
        if len(self.cores) == 1:
            return self._run("core", self.cores[0], x, rnn_states)
        xs = x.split(self._head_sizes, dim=1)
        hs = rnn_states.split(self._state_sizes, dim=1) if rnn_states is not None else (None, None)
        outs, states = zip(*(self._run("core", core, xi, hi) for core, xi, hi in zip(self.cores, xs, hs)))
        return torch.cat(outs, dim=1), torch.cat(states, dim=1)

    def forward_core_seq(self, x: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """x [N, T, F] from h0 [N, rnn_state_size]; dones [N, T] resets the state after a step. Returns [N, T, F2]:
        each core's own `forward_seq` (sf's RNN core cuts the window at resets), else the core's `forward` once over
        a PackedSequence of episode pieces (`sequences_or_steps`)."""
        if len(self.cores) == 1:
            return self._run("core", _sequence_of(self.cores[0]), x, h0, dones)
        xs = x.split(self._head_sizes, dim=2)
        hs = h0.split(self._state_sizes, dim=1)
        return torch.cat(
            [self._run("core", _sequence_of(core), xi, hi, dones) for core, xi, hi in zip(self.cores, xs, hs)], dim=2
        )

    def forward_tail(self, core_output: torch.Tensor, values_only: bool = False, sample_actions: bool = False):
        """core out [B, F2] -> TensorDict: `values` [B] in normalized-return space and, unless `values_only`,
        `action_logits` [B, num_action_params] (and sampled `actions`, `log_prob_actions` with `sample_actions`)."""
        branches = core_output.split(self._core_sizes, dim=1) if len(self.cores) > 1 else (core_output,)
        critic = self._run("decoder", self.decoders[-1], branches[-1])
        result = TensorDict(values=self.value_head(critic).squeeze(1))
        if values_only:
            return result
        actor = critic if len(self.decoders) == 1 else self._run("decoder", self.decoders[0], branches[0])
        result["action_logits"], self.last_action_distribution = self.action_parameterization(actor)
        self._maybe_sample_actions(sample_actions, result)
        return result

    def action_parameterization(self, actor_decoder_output: torch.Tensor) -> tuple[torch.Tensor, ActionDistribution]:
        """Sample Factory's `self.action_parameterization(features)`: the distribution's parameters and the
        distribution (here from `action_head`, and `log_std` when the stddev is one learned parameter)."""
        params = self.action_head(actor_decoder_output)
        if self.log_std is not None:
            params = learned_stddev_params(self.action_spec, params, self.log_std, self.tanh_scale)
        return params, ActionDistribution.from_params(self.action_spec, params)

    @property
    def critic_linear(self) -> nn.Linear:
        """Sample Factory's name of the value head."""
        return self.value_head

    def forward(self, normalized_obs_dict, rnn_states, values_only: bool = False) -> TensorDict:
        core_output, new_rnn_states = self.forward_core(self.forward_head(normalized_obs_dict), rnn_states)
        result = self.forward_tail(core_output, values_only, sample_actions=True)
        result["new_rnn_states"] = new_rnn_states
        return result

    def policy_step(
        self, obs_norm: dict[str, torch.Tensor], rnn_states: torch.Tensor | None, deterministic: bool = False
    ) -> PolicyOutput:
        if type(self).forward is not _ActorCriticOfParts.forward:  # a subclass's own forward
            return super().policy_step(obs_norm, rnn_states, deterministic)
        core_output, new_rnn_states = self.forward_core(self.forward_head(obs_norm), rnn_states)
        result = self.forward_tail(core_output)
        dist = self.last_action_distribution
        actions = dist.deterministic() if deterministic else dist.sample()
        values = result["values"]
        if self.returns_normalizer is not None:
            values = self.returns_normalizer.denormalize(values)
        return PolicyOutput(actions, dist.log_prob(actions), values, result["action_logits"], new_rnn_states)


class ActorCriticSharedWeights(_ActorCriticOfParts):
    """One encoder, core and decoder for the actor and the critic (`--actor_critic_share_weights=True`)."""

    def __init__(self, model_factory, obs_space, action_space, cfg):
        super().__init__(obs_space, action_space, cfg, model_factory, share_weights=True)

    # Sample Factory's names of the parts, for a subclass written against them
    encoder = property(lambda self: self.encoders[0])
    core = property(lambda self: self.cores[0])
    decoder = property(lambda self: self.decoders[0])


class ActorCriticSeparateWeights(_ActorCriticOfParts):
    """An encoder, core and decoder each for the actor and the critic (`--actor_critic_share_weights=False`)."""

    def __init__(self, model_factory, obs_space, action_space, cfg):
        super().__init__(obs_space, action_space, cfg, model_factory, share_weights=False)

    # Sample Factory's names of the parts, for a subclass written against them
    actor_encoder = property(lambda self: self.encoders[0])
    critic_encoder = property(lambda self: self.encoders[1])
    actor_core = property(lambda self: self.cores[0])
    critic_core = property(lambda self: self.cores[1])
    actor_decoder = property(lambda self: self.decoders[0])
    critic_decoder = property(lambda self: self.decoders[1])


def builtin_actor_critic(obs_space, action_space, cfg, model_factory=None) -> _ActorCriticOfParts:
    """sf's model for `cfg` (shared or separate weights as `--actor_critic_share_weights` says), its parts from
    `model_factory` (the built-in ones when None)."""
    cls = ActorCriticSharedWeights if cfg.actor_critic_share_weights else ActorCriticSeparateWeights
    return cls(model_factory, obs_space, action_space, cfg)


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
    """The callable that runs `core` over [N, T] sequences: its own `forward_seq`, else its `forward` over a
    PackedSequence (one step at a time when it fails on one)."""
    return core.forward_seq if hasattr(core, "forward_seq") else partial(sequences_or_steps, core, core)
