"""A recurrent core of one's own gets whole sequences in the learner, as in Sample Factory: one call over a
PackedSequence of the window's episode pieces (`sf.model.sequences`), whose results and gradients match stepping
through the window one step at a time; a core written for one step only is stepped through, said once in the log."""

from __future__ import annotations

import importlib
import logging
import sys

import numpy as np
import pytest
import torch
from sample_factory_imports import write_rewritten_scripts
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from sf.envs.spaces import ActionSpec
from sf.model.cores import ModelCore
from sf.model.factory import ModelFactory, create_actor_critic, global_model_factory, restore_model_factory
from sf.model.sequences import cut_pieces

OBS = {"obs": ((4,), np.dtype(np.float32))}


@pytest.fixture
def script(tmp_path, monkeypatch):
    """tests/sample_factory_scripts/train_lstm_core.py rewritten and imported; the factory restored afterwards."""
    monkeypatch.syspath_prepend(str(write_rewritten_scripts(tmp_path)))
    module = importlib.import_module("train_lstm_core")
    yield module
    restore_model_factory(ModelFactory())
    sys.modules.pop("train_lstm_core", None)


def recording(core_class):
    """`core_class` that notes the longest sequence of each PackedSequence it is given."""

    class Recording(core_class):
        longest: list[int] = []

        def forward(self, head_output, rnn_states):
            if isinstance(head_output, PackedSequence):
                Recording.longest.append(len(head_output.batch_sizes))
            return super().forward(head_output, rnn_states)

    return Recording


def step_by_step(model, x, h0, dones):
    """The window one step at a time through `forward_core`, the state zeroed after a reset."""
    h, outs = h0, []
    for t in range(x.shape[1]):
        out, h = model.forward_core(x[:, t], h)
        outs.append(out)
        h = h * (1.0 - dones[:, t]).unsqueeze(1)
    return torch.stack(outs, dim=1)


def test_pieces_are_cut_after_each_reset_and_packed_longest_first():
    resets = torch.tensor([[0, 0, 1, 0], [0, 0, 0, 0], [1, 0, 0, 1]])
    pieces = cut_pieces(resets)
    # pieces (flat steps): row 1 [4..7] (4 long), row 2 [9, 10, 11] (3), row 0 [0, 1, 2] (3), [3] (1), [8] (1)
    assert pieces.batch_sizes.tolist() == [5, 3, 3, 1]
    assert pieces.order.tolist() == [4, 0, 9, 3, 8, 5, 1, 10, 6, 2, 11, 7]
    assert pieces.starts_row.tolist() == [True, True, False, False, True]


@pytest.mark.parametrize("share_weights", [True, False])
def test_a_sequence_core_gets_whole_pieces_and_matches_the_steps(script, share_weights):
    core_class = recording(script.LstmCore)
    core_class.longest.clear()
    global_model_factory().register_model_core_factory(core_class)
    cfg = script.parse_custom_args(
        ["--env=my_cartpole", "--rnn_size=8", "--rnn_num_layers=2", f"--actor_critic_share_weights={share_weights}"]
    )
    torch.manual_seed(0)
    model = create_actor_critic(OBS, ActionSpec((2,), 0), cfg)
    n, t = 5, 7
    head = model.forward_head(model.normalize_obs({"obs": torch.randn(n * t, 4)})).view(n, t, -1)
    x = head.detach().requires_grad_(True)
    h0 = torch.randn(n, model.rnn_state_size)
    dones = torch.zeros(n, t)
    dones[0, 2] = dones[3, 5] = dones[4, 0] = 1.0
    got = model.forward_core_seq(x, h0, dones)
    assert core_class.longest and max(core_class.longest) == t  # whole rows in one call, not one step at a time
    assert len(core_class.longest) == len(model.cores)  # one call per core for the window
    (grad_got,) = torch.autograd.grad(got.square().sum(), x)
    core_class.longest.clear()
    expected = step_by_step(model, x, h0, dones)
    assert core_class.longest == []
    (grad_expected,) = torch.autograd.grad(expected.square().sum(), x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad_got, grad_expected, rtol=1e-5, atol=1e-6)


class CellCore(ModelCore):
    """A GRU cell written for one step at a time: it fails on a PackedSequence."""

    def __init__(self, cfg, input_size):
        super().__init__(cfg)
        self.cell = nn.GRUCell(input_size, 8)
        self.core_output_size = 8
        self.state_size = 8

    def forward(self, x, h):
        h = self.cell(x, h)
        return h, h


def test_a_core_written_for_one_step_is_stepped_through_said_once(script, caplog):
    global_model_factory().register_model_core_factory(CellCore)
    model = create_actor_critic(OBS, ActionSpec((2,), 0), script.parse_custom_args(["--env=my_cartpole"]))
    x, h0, dones = torch.randn(3, 4, model.cores[0].cell.input_size), torch.randn(3, 8), torch.zeros(3, 4)
    dones[1, 1] = 1.0
    with caplog.at_level(logging.INFO, logger="sf"):
        logging.getLogger("sf").propagate = True
        first = model.forward_core_seq(x, h0, dones)
        second = model.forward_core_seq(x, h0, dones)
    notes = [r.getMessage() for r in caplog.records if "PackedSequence" in r.getMessage()]
    assert len(notes) == 1 and notes[0].startswith("CellCore does not take a PackedSequence"), notes
    torch.testing.assert_close(first, step_by_step(model, x, h0, dones))
    torch.testing.assert_close(second, first)


def test_the_learner_of_a_run_gives_the_core_whole_sequences(script, tmp_path):
    """A serial run (every component in this process): the learner's calls reach the core as sequences."""
    core_class = recording(script.LstmCore)
    core_class.longest.clear()
    script.register_custom_components()
    global_model_factory().register_model_core_factory(core_class)
    cfg = script.parse_custom_args(
        ["--env=my_cartpole", "--serial_mode=True", "--train_for_env_steps=2048", "--rollout=16", "--batch_size=256"]
        + ["--rnn_size=16", f"--train_dir={tmp_path}", "--experiment=seq"]
    )
    from sf.train import run_rl

    assert run_rl(cfg) == 0
    assert len(core_class.longest) >= 2 and max(core_class.longest) > 1, core_class.longest


def test_a_whole_actor_critic_gets_whole_pieces_through_its_forward_core(tmp_path, monkeypatch):
    """tests/sample_factory_scripts/train_custom_actor_critic.py with `--use_rnn`: its `forward_core` passes the
    PackedSequence to the core the factory made (sf's GRU), which takes it as Sample Factory's does."""
    monkeypatch.syspath_prepend(str(write_rewritten_scripts(tmp_path)))
    module = importlib.import_module("train_custom_actor_critic")
    try:
        module.register_custom_components()
        cfg = module.parse_custom_args(["--env=my_cartpole", "--use_rnn=True", "--rnn_type=gru", "--rnn_size=8"])
        torch.manual_seed(0)
        model = create_actor_critic(OBS, ActionSpec((2,), 0), cfg)
        x, h0, dones = torch.randn(4, 6, cfg.hidden_width), torch.randn(4, model.rnn_state_size), torch.zeros(4, 6)
        dones[1, 3] = dones[2, 0] = 1.0
        got = model.forward_core_seq(x, h0, dones)
        assert not getattr(model, "_steps_only", False)  # one call, not the fallback
        torch.testing.assert_close(got, step_by_step(model, x, h0, dones), rtol=1e-5, atol=1e-6)
    finally:
        restore_model_factory(ModelFactory())
        sys.modules.pop("train_custom_actor_critic", None)
