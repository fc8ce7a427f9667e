"""A training script written for Sample Factory 2.1.1's public API: a whole actor-critic of one's own, subclassing
`ActorCritic` in the shape of Sample Factory's `ActorCriticSharedWeights` (an encoder, an optional core, a critic
head and the action parameterization `get_action_parameterization` gives, results as a `TensorDict`), registered
with `register_actor_critic_factory`, on CartPole registered with `register_env`.

It runs under Sample Factory as it is (`python -m train_custom_actor_critic --env=my_cartpole ...` from this
folder), and under sf with its `sample_factory` imports changed by the table of docs/customizing.md and nothing else
(tests/test_sample_factory_scripts.py does exactly that).
"""

import sys

import gymnasium as gym
import torch
from sample_factory.algo.utils.context import global_model_factory
from sample_factory.algo.utils.tensor_dict import TensorDict
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.envs.env_utils import register_env
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.model.encoder import Encoder
from sample_factory.model.model_utils import create_mlp, nonlinearity
from sample_factory.train import run_rl
from sample_factory.utils.typing import ActionSpace, Config, ObsSpace
from torch import nn


class VectorEncoder(Encoder):
    """An MLP over the observation vector."""

    def __init__(self, cfg: Config, obs_space: ObsSpace):
        super().__init__(cfg)
        self.mlp = create_mlp([cfg.hidden_width, cfg.hidden_width], obs_space["obs"].shape[0], nonlinearity(cfg))

    def forward(self, obs_dict):
        return self.mlp(obs_dict["obs"])

    def get_out_size(self) -> int:
        return self.cfg.hidden_width


class ValueScaledActorCritic(ActorCritic):
    """Sample Factory's shared-weights actor-critic written out, with the critic's output scaled by a learned
    scalar: everything the learner and the inference worker call is this class's own code."""

    def __init__(self, model_factory, obs_space: ObsSpace, action_space: ActionSpace, cfg: Config):
        super().__init__(obs_space, action_space, cfg)
        self.encoder = VectorEncoder(cfg, obs_space)
        self.encoders = [self.encoder]
        self.core = model_factory.make_model_core_func(cfg, self.encoder.get_out_size())
        self.critic_linear = nn.Linear(self.core.get_out_size(), 1)
        self.value_scale = nn.Parameter(torch.ones(1))
        self.action_parameterization = self.get_action_parameterization(self.core.get_out_size())
        self.apply(self.initialize_weights)

    def forward_head(self, normalized_obs_dict):
        return self.encoder(normalized_obs_dict)

    def forward_core(self, head_output, rnn_states):
        return self.core(head_output, rnn_states)

    def forward_tail(self, core_output, values_only: bool, sample_actions: bool) -> TensorDict:
        values = (self.critic_linear(core_output) * self.value_scale).squeeze()
        result = TensorDict(values=values)
        if values_only:
            return result
        action_distribution_params, self.last_action_distribution = self.action_parameterization(core_output)
        result["action_logits"] = action_distribution_params
        self._maybe_sample_actions(sample_actions, result)
        return result

    def forward(self, normalized_obs_dict, rnn_states, values_only=False) -> TensorDict:
        x = self.forward_head(normalized_obs_dict)
        x, new_rnn_states = self.forward_core(x, rnn_states)
        result = self.forward_tail(x, values_only, sample_actions=True)
        result["new_rnn_states"] = new_rnn_states
        return result


def make_actor_critic(cfg: Config, obs_space: ObsSpace, action_space: ActionSpace) -> ActorCritic:
    return ValueScaledActorCritic(global_model_factory(), obs_space, action_space, cfg)


def make_cartpole(full_env_name, cfg=None, env_config=None, render_mode=None):
    return gym.make("CartPole-v1", render_mode=render_mode)


def register_custom_components():
    register_env("my_cartpole", make_cartpole)
    global_model_factory().register_actor_critic_factory(make_actor_critic)


def parse_custom_args(argv=None, evaluation=False):
    parser, cfg = parse_sf_args(argv, evaluation=evaluation)
    parser.add_argument("--hidden_width", default=64, type=int, help="Units of each layer of the encoder")
    parser.set_defaults(use_rnn=False, reward_scale=0.1, learning_rate=1e-3, exploration_loss_coeff=0.001)
    return parse_full_cfg(parser, argv)


def main():
    register_custom_components()
    cfg = parse_custom_args()
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
