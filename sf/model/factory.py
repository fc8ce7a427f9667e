"""The model factory: where the functions that build a policy's encoder, core, decoder or the whole actor-critic are
registered, by Sample Factory's names (`global_model_factory()` with `register_encoder_factory`,
`register_model_core_factory`, `register_decoder_factory` and `register_actor_critic_factory`).

Its first entries are sf's own parts (`default_make_encoder_func`, `default_make_core_func`,
`default_make_decoder_func`, `default_make_actor_critic_func`); a registration replaces one for every model this
process builds afterwards. A parallel run builds its models in other processes, which start with the factory as it
was when the run started (`model_factory_snapshot` travels with the run's other shared state and `restore_model_factory`
installs it; the Ray backend sends functions a training script defines by value).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from torch import nn

from sf.envs.spaces import ActionSpec, ObsSpec, action_space_from_spec, obs_space_from_spec
from sf.model.actor_critic import (
    ActorCritic,
    ActorCriticSeparateWeights,
    ActorCriticSharedWeights,
    builtin_actor_critic,
)
from sf.model.cores import default_make_core_func
from sf.model.decoders import default_make_decoder_func
from sf.model.encoders import default_make_encoder_func
from sf.utils.typing import ActionSpace, Config, ObsSpace

MakeActorCriticFunc = Callable[[Config, ObsSpace, ActionSpace], ActorCritic]
MakeEncoderFunc = Callable[[Config, ObsSpace], nn.Module]
MakeCoreFunc = Callable[[Config, int], nn.Module]
MakeDecoderFunc = Callable[[Config, int], nn.Module]


def default_make_actor_critic_func(cfg: Config, obs_space: ObsSpace, action_space: ActionSpace) -> ActorCritic:
    """sf's actor-critic (`ActorCriticSharedWeights` or `ActorCriticSeparateWeights`, as
    `--actor_critic_share_weights` says), its encoder, core and decoder made by the functions registered in the
    global factory."""
    return builtin_actor_critic(obs_space, action_space, cfg, global_model_factory())


@dataclass
class ModelFactory:
    """The four functions a policy is built with. `register_*` replaces one; the dataclass pickles as its functions,
    which is how it reaches a run's other processes."""

    make_actor_critic_func: MakeActorCriticFunc = default_make_actor_critic_func
    make_model_encoder_func: MakeEncoderFunc = default_make_encoder_func
    make_model_core_func: MakeCoreFunc = default_make_core_func
    make_model_decoder_func: MakeDecoderFunc = default_make_decoder_func

    def register_actor_critic_factory(self, make_actor_critic_func: MakeActorCriticFunc) -> None:
        """`make_actor_critic_func(cfg, obs_space, action_space)` returns the whole model: an `ActorCritic`
        (`sf.model.actor_critic`) or a subclass of it."""
        self.make_actor_critic_func = make_actor_critic_func

    def register_encoder_factory(self, make_model_encoder_func: MakeEncoderFunc) -> None:
        """`make_model_encoder_func(cfg, obs_space)` returns the encoder (`sf.model.encoders.Encoder`)."""
        self.make_model_encoder_func = make_model_encoder_func

    def register_model_core_factory(self, make_model_core_func: MakeCoreFunc) -> None:
        """`make_model_core_func(cfg, input_size)` returns the core (`sf.model.cores.ModelCore`)."""
        self.make_model_core_func = make_model_core_func

    def register_decoder_factory(self, make_model_decoder_func: MakeDecoderFunc) -> None:
        """`make_model_decoder_func(cfg, input_size)` returns the decoder (`sf.model.decoders.Decoder`)."""
        self.make_model_decoder_func = make_model_decoder_func


_GLOBAL = ModelFactory()


def global_model_factory() -> ModelFactory:
    """The factory every model of this process is built from."""
    return _GLOBAL


def model_factory_snapshot() -> ModelFactory:
    """A copy of this process's factory, to hand to the processes a run starts."""
    return replace(_GLOBAL)


def restore_model_factory(snapshot: ModelFactory) -> None:
    """Install the functions of a snapshot in this process's factory."""
    for f in fields(ModelFactory):
        setattr(_GLOBAL, f.name, getattr(snapshot, f.name))


def create_actor_critic(obs_spec: ObsSpec, action_spec: ActionSpec, cfg: Config) -> ActorCritic:
    """The policy for an env's observation and action layout, by the registered actor-critic function."""
    make = _GLOBAL.make_actor_critic_func
    model = make(cfg, obs_space_from_spec(obs_spec), action_space_from_spec(action_spec))
    if not isinstance(model, ActorCritic):
        raise TypeError(
            f"the actor-critic factory {_qualified(make)} returned {type(model).__name__}; it must return an "
            "sf.model.actor_critic.ActorCritic or a subclass of it"
        )
    return model


def custom_model_parts(model: ActorCritic) -> list[str]:
    """What in `model` a user registered, for the log: ["actor-critic MyModel"], ["encoder CustomEncoder"], []."""
    builtin = type(model) in (ActorCriticSharedWeights, ActorCriticSeparateWeights)
    whole = [] if builtin else [f"actor-critic {type(model).__name__}"]
    return whole + [f"{stage} {name}" for stage, name in getattr(model, "custom_parts", {}).items()]


def _qualified(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
