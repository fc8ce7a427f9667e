"""Policy networks: observation normalization, encoders, recurrent cores, decoders, action distributions, and the
model factory users register their own parts in."""

from sf.model.action_distributions import ActionDistribution
from sf.model.actor_critic import ActorCritic, PolicyOutput
from sf.model.factory import ModelFactory, create_actor_critic, global_model_factory

__all__ = [
    "ActionDistribution",
    "ActorCritic",
    "ModelFactory",
    "PolicyOutput",
    "create_actor_critic",
    "global_model_factory",
]
