"""Train a custom encoder: register it with the model factory, then train as usual.

    python -m sf_examples.custom_model.train_custom_model --env=collect --train_for_env_steps=500000

The `collect` env's `entities` observation is a set of items (`collect_env.py`); `SetEncoder` reads it as a set: the
same small network over each item, pooled by max and mean, so the order of the items changes nothing. The encoder
is registered with Sample Factory's call (`global_model_factory().register_encoder_factory`), and sf builds, trains,
checkpoints, evaluates and exports the policy with it as with its own encoders; in a parallel run every process
builds it from the same registration.
"""

from __future__ import annotations

import sys

import torch

from sf.envs.families import family_named
from sf.envs.registry import EnvConfig, register_env
from sf.model.encoders import Encoder
from sf.model.factory import global_model_factory
from sf.model.model_utils import create_mlp, nonlinearity
from sf.train import run_rl
from sf.utils.typing import Config, ObsSpace
from sf_examples.custom_model.collect_env import CollectEnv


class SetEncoder(Encoder):
    """`agent` through an MLP; each row of `entities` through a shared MLP, then max- and mean-pooled over the rows."""

    def __init__(self, cfg: Config, obs_space: ObsSpace):
        super().__init__(cfg)
        item_features = obs_space["entities"].shape[1]
        width = cfg.set_encoder_width
        self.item_mlp = create_mlp([width, width], item_features, nonlinearity(cfg))
        self.agent_mlp = create_mlp([width], obs_space["agent"].shape[0], nonlinearity(cfg))
        self.out_size = 3 * width

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        items = self.item_mlp(obs["entities"])  # [B, N, width]: the MLP's Linear layers act on the last dimension
        pooled = [items.max(dim=1).values, items.mean(dim=1)]
        return torch.cat([self.agent_mlp(obs["agent"]), *pooled], dim=1)

    def get_out_size(self) -> int:
        return self.out_size


def make_set_encoder(cfg: Config, obs_space: ObsSpace) -> Encoder:
    return SetEncoder(cfg, obs_space)


def make_collect(env_name: str, cfg, env_config: EnvConfig | None, render_mode: str | None = None) -> CollectEnv:
    return CollectEnv(render_mode=render_mode)


def register_custom_components() -> None:
    register_env("collect", make_collect)
    global_model_factory().register_encoder_factory(make_set_encoder)


def add_custom_model_args(parser) -> None:
    parser.add_argument("--set_encoder_width", type=int, default=32, help="features per item in SetEncoder")


def custom_model_defaults(env_name: str) -> dict:
    """Flags that suit a small, cheap, fully observed env; any of them can be given on the command line."""
    return {
        "use_rnn": False,
        "nonlinearity": "relu",
        "num_envs_per_worker": 8,
        "rollout": 32,
        "batch_size": 512,
        "num_epochs": 4,
        "learning_rate": 1e-3,
        "exploration_loss_coeff": 0.01,
        "value_bootstrap": True,  # the 100-step limit is no failure
    }


def main(argv: list[str] | None = None) -> int:
    return run_rl(family_named("custom_model").cfg_or_exit(argv))


if __name__ == "__main__":
    sys.exit(main())
