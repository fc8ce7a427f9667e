"""Policy networks: observation normalization, encoders, recurrent cores (and the episode pieces the learner hands
them as one PackedSequence), decoders, action parameterizations and distributions, the actor-critic with Sample
Factory's interface and `TensorDict` results, and the model factory users register their own parts in."""

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
