"""A training script written for Sample Factory 2.1.1's public API: a custom encoder over a Dict observation,
registered with the global model factory, flags added to Sample Factory's parser.

It runs under Sample Factory as it is (`python -m train_collect --env=collect ...` from this folder, the repository
root on PYTHONPATH for the env), and under sf with its `sample_factory` imports changed by the table of
docs/customizing.md and nothing else (tests/test_sample_factory_scripts.py does exactly that).
"""

import sys

import torch
from sample_factory.algo.utils.context import global_model_factory
from sample_factory.algo.utils.torch_utils import calc_num_elements
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.envs.env_utils import register_env
from sample_factory.model.encoder import Encoder
from sample_factory.model.model_utils import create_mlp, nonlinearity
from sample_factory.train import run_rl
from sample_factory.utils.typing import Config, ObsSpace

from sf_examples.custom_model.collect_env import CollectEnv


class PoolingEncoder(Encoder):
    """An MLP over each entity, max-pooled, beside an MLP over the agent's own position."""

    def __init__(self, cfg: Config, obs_space: ObsSpace):
        super().__init__(cfg)
        entities = obs_space["entities"].shape
        self.entity_mlp = create_mlp([cfg.entity_width, cfg.entity_width], entities[1], nonlinearity(cfg))
        self.agent_mlp = create_mlp([cfg.entity_width], obs_space["agent"].shape[0], nonlinearity(cfg))
        self.entity_out = calc_num_elements(self.entity_mlp, (entities[1],))
        self.out_size = self.entity_out + calc_num_elements(self.agent_mlp, obs_space["agent"].shape)

    def forward(self, obs_dict):
        pooled = self.entity_mlp(obs_dict["entities"]).max(dim=1).values
        return torch.cat([self.agent_mlp(obs_dict["agent"]), pooled], dim=1)

    def get_out_size(self) -> int:
        return self.out_size


def make_pooling_encoder(cfg: Config, obs_space: ObsSpace) -> Encoder:
    return PoolingEncoder(cfg, obs_space)


def make_collect(full_env_name, cfg=None, env_config=None, render_mode=None):
    return CollectEnv(render_mode=render_mode)


def register_custom_components():
    register_env("collect", make_collect)
    global_model_factory().register_encoder_factory(make_pooling_encoder)


def add_extra_params(parser):
    parser.add_argument("--entity_width", default=32, type=int, help="Features per entity in the encoder")


def override_default_params(parser):
    parser.set_defaults(
        use_rnn=False,
        nonlinearity="relu",
        num_envs_per_worker=8,
        rollout=32,
        batch_size=512,
        num_epochs=4,
        learning_rate=1e-3,
        exploration_loss_coeff=0.01,
        value_bootstrap=True,
    )


def parse_custom_args(argv=None, evaluation=False):
    parser, cfg = parse_sf_args(argv, evaluation=evaluation)
    add_extra_params(parser)
    override_default_params(parser)
    return parse_full_cfg(parser, argv)


def main():
    register_custom_components()
    cfg = parse_custom_args()
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
