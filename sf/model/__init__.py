"""Policy networks: observation normalization, encoders, recurrent cores, action distributions."""

from sf.model.action_distributions import ActionDistribution
from sf.model.actor_critic import ActorCritic, PolicyOutput, create_actor_critic

__all__ = ["ActionDistribution", "ActorCritic", "PolicyOutput", "create_actor_critic"]
