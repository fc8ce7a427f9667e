"""A training script written for Sample Factory 2.1.1's public API: a recurrent core of one's own, written as
Sample Factory's cores are, for one step ([B, F] features) and for whole sequences (a `PackedSequence` of episode
pieces, which Sample Factory's learner gives it), registered with `register_model_core_factory`, on CartPole.

It runs under Sample Factory as it is (`python -m train_lstm_core --env=my_cartpole ...` from this folder), and under
sf with its `sample_factory` imports changed by the table of docs/customizing.md and nothing else.
"""

import sys

import gymnasium as gym
import torch
from sample_factory.algo.utils.context import global_model_factory
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.envs.env_utils import register_env
from sample_factory.model.core import ModelCore
from sample_factory.train import run_rl
from sample_factory.utils.typing import Config
from torch import nn


class LstmCore(ModelCore):
    """An LSTM; its state is h then c of each layer, [B, 2 * rnn_num_layers * rnn_size]."""

    def __init__(self, cfg: Config, input_size: int):
        super().__init__(cfg)
        self.lstm = nn.LSTM(input_size, cfg.rnn_size, cfg.rnn_num_layers)
        self.core_output_size = cfg.rnn_size

    def forward(self, head_output, rnn_states):
        is_seq = not torch.is_tensor(head_output)  # a PackedSequence in the learner
        if not is_seq:
            head_output = head_output.unsqueeze(0)
        layers = self.cfg.rnn_num_layers
        states = rnn_states.view(rnn_states.shape[0], layers, 2, self.cfg.rnn_size).permute(2, 1, 0, 3)
        x, (h, c) = self.lstm(head_output, (states[0].contiguous(), states[1].contiguous()))
        if not is_seq:
            x = x.squeeze(0)
        new_states = torch.stack([h, c]).permute(2, 1, 0, 3).reshape(rnn_states.shape[0], -1)
        return x, new_states


def make_lstm_core(cfg: Config, input_size: int) -> ModelCore:
    return LstmCore(cfg, input_size)


def make_cartpole(full_env_name, cfg=None, env_config=None, render_mode=None):
    return gym.make("CartPole-v1", render_mode=render_mode)


def register_custom_components():
    register_env("my_cartpole", make_cartpole)
    global_model_factory().register_model_core_factory(make_lstm_core)


def parse_custom_args(argv=None, evaluation=False):
    parser, cfg = parse_sf_args(argv, evaluation=evaluation)
    parser.set_defaults(use_rnn=True, rnn_type="lstm", rnn_size=64, reward_scale=0.1, learning_rate=1e-3)
    return parse_full_cfg(parser, argv)


def main():
    register_custom_components()
    cfg = parse_custom_args()
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
