"""The model factory: sf's parts as its first entries, each registration honoured by the model sf builds (a custom
encoder, core, decoder or whole actor-critic), checkpoints of a custom model round-tripped, the MLP kernel stepping
aside, registered parts timed as rows of the caller's tree, and the factory surviving the trip to another process."""

from __future__ import annotations

import argparse
import pickle

import numpy as np
import pytest
import torch
from torch import nn

from sf.cfg.arguments import default_cfg
from sf.envs.spaces import ActionSpec, action_space_from_spec, action_spec_from_space, obs_space_from_spec
from sf.experiment.checkpoint import CheckpointManager
from sf.model.actor_critic import ActorCritic
from sf.model.cores import ModelCore, RnnCore, default_make_core_func, recurrent_state_size
from sf.model.decoders import Decoder, default_make_decoder_func
from sf.model.encoders import Encoder, ObsEncoder, default_make_encoder_func
from sf.model.factory import (
    ModelFactory,
    create_actor_critic,
    custom_model_parts,
    default_make_actor_critic_func,
    global_model_factory,
    model_factory_snapshot,
    restore_model_factory,
)
from sf.model.mlp_kernel import MlpPolicyKernel
from sf.model.model_utils import calc_num_elements, create_mlp, nonlinearity
from sf.utils.timing import Timing

torch.set_num_threads(1)

SMALL = dict(use_rnn=False, encoder_mlp_layers=[16], nonlinearity="tanh", rnn_size=8, decoder_mlp_layers=[])
SPEC = {"agent": ((2,), np.dtype(np.float32)), "entities": ((5, 3), np.dtype(np.float32))}
ACTIONS = ActionSpec((4,), 0)


def cfg(**overrides) -> argparse.Namespace:
    return default_cfg(**{**SMALL, "normalize_input": True, "normalize_returns": True, **overrides})


def obs(batch: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"agent": torch.randn(batch, 2, generator=g), "entities": torch.randn(batch, 5, 3, generator=g)}


class MaxPoolEncoder(Encoder):
    def __init__(self, cfg, obs_space):
        super().__init__(cfg)
        self.mlp = create_mlp([12], obs_space["entities"].shape[1], nonlinearity(cfg))
        self.out_size = calc_num_elements(self.mlp, (obs_space["entities"].shape[1],)) + obs_space["agent"].shape[0]

    def forward(self, obs_dict):
        return torch.cat([obs_dict["agent"], self.mlp(obs_dict["entities"]).max(dim=1).values], dim=1)

    def get_out_size(self) -> int:
        return self.out_size


class CellCore(ModelCore):
    """A GRU cell, one step at a time: the learner runs it over sequences through ModelCore.forward_seq."""

    def __init__(self, cfg, input_size):
        super().__init__(cfg)
        self.cell = nn.GRUCell(input_size, cfg.rnn_size)
        self.core_output_size = cfg.rnn_size

    def forward(self, x, rnn_states):
        h = self.cell(x, rnn_states)
        return h, h


class DoublingDecoder(Decoder):
    def __init__(self, cfg, input_size):
        super().__init__(cfg)
        self.linear = nn.Linear(input_size, 2 * input_size)
        self.out_size = 2 * input_size

    def forward(self, x):
        return torch.relu(self.linear(x))

    def get_out_size(self) -> int:
        return self.out_size


def test_sf_parts_are_the_first_entries_and_build_the_model_sf_always_built():
    factory = ModelFactory()
    assert factory.make_model_encoder_func is default_make_encoder_func
    assert factory.make_model_core_func is default_make_core_func
    assert factory.make_model_decoder_func is default_make_decoder_func
    assert factory.make_actor_critic_func is default_make_actor_critic_func
    model = create_actor_critic({"obs": ((4,), np.dtype(np.float32))}, ACTIONS, cfg())
    assert type(model) is ActorCritic and isinstance(model.encoders[0], ObsEncoder)
    assert model.custom_parts == {} and custom_model_parts(model) == []
    assert MlpPolicyKernel.of(model) is not None


@pytest.mark.parametrize("spec", [ActionSpec((4,), 0), ActionSpec((3, 2), 0), ActionSpec((), 2), ActionSpec((3, 2), 2)])
def test_spaces_given_to_factories_give_the_same_layout_back(spec):
    assert action_spec_from_space(action_space_from_spec(spec)) == spec
    space = obs_space_from_spec({"z": ((2,), np.dtype(np.float32)), "a": ((3, 8, 8), np.dtype(np.uint8))})
    assert list(space.spaces) == ["z", "a"]  # sf's key order, not sorted
    assert space["a"].dtype == np.uint8 and space["a"].shape == (3, 8, 8) and space["z"].shape == (2,)


def test_a_registered_encoder_is_the_model_encoder_and_its_checkpoint_round_trips(tmp_path):
    global_model_factory().register_encoder_factory(MaxPoolEncoder)
    assert global_model_factory().make_model_encoder_func is MaxPoolEncoder
    torch.manual_seed(0)
    model = create_actor_critic(SPEC, ACTIONS, cfg())
    assert isinstance(model.encoders[0], MaxPoolEncoder)
    assert custom_model_parts(model) == ["encoder MaxPoolEncoder"]
    assert model.action_head.in_features == 12 + 2
    batch = obs(6)
    model.normalize_obs(batch, update=True)  # statistics that must travel with the checkpoint too
    path = CheckpointManager(tmp_path, 0, keep=2).save({"model": model.state_dict()}, version=3, env_steps=100)
    torch.manual_seed(1)
    loaded = create_actor_critic(SPEC, ACTIONS, cfg())
    with torch.no_grad():
        assert not torch.equal(
            loaded.forward_tail(loaded.forward_head(batch))[0], model.forward_tail(model.forward_head(batch))[0]
        )
        loaded.load_state_dict(torch.load(path, weights_only=True)["model"])
        expected = model.forward_tail(model.forward_head(model.normalize_obs(batch)))
        got = loaded.forward_tail(loaded.forward_head(loaded.normalize_obs(batch)))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_the_mlp_kernel_steps_aside_for_a_custom_model():
    spec = {"obs": ((4,), np.dtype(np.float32))}
    assert MlpPolicyKernel.of(create_actor_critic(spec, ACTIONS, cfg())) is not None
    global_model_factory().register_decoder_factory(DoublingDecoder)
    model = create_actor_critic(spec, ACTIONS, cfg())
    assert MlpPolicyKernel.of(model) is None
    assert custom_model_parts(model) == ["decoder DoublingDecoder"]
    assert model.action_head.in_features == 2 * 16


def test_a_registered_core_runs_over_sequences_step_by_step_with_resets():
    global_model_factory().register_model_core_factory(CellCore)
    config = cfg(use_rnn=True, rnn_size=8)
    model = create_actor_critic(SPEC, ACTIONS, config)
    assert model.rnn_state_size == recurrent_state_size(config) == 8
    n, t = 3, 5
    x = torch.randn(n, t, model.encoders[0].get_out_size())
    h0 = torch.randn(n, 8)
    dones = torch.zeros(n, t)
    dones[0, 1] = dones[2, 3] = 1.0
    expected, h = [], h0
    for step in range(t):  # the recurrence by hand: the state after a done step starts from zeros
        h = model.cores[0].cell(x[:, step], h)
        expected.append(h)
        h = h * (1 - dones[:, step : step + 1])
    torch.testing.assert_close(model.forward_core_seq(x, h0, dones), torch.stack(expected, 1))
    out, new_h = model.forward_core(x[:, 0], None)  # the inference path of a fresh episode: zeros
    torch.testing.assert_close(out, model.cores[0].cell(x[:, 0], torch.zeros(n, 8)))
    assert new_h.shape == (n, 8)


def test_two_branches_of_a_registered_core_keep_their_own_state():
    global_model_factory().register_model_core_factory(CellCore)
    model = create_actor_critic(SPEC, ACTIONS, cfg(use_rnn=True, rnn_size=8, actor_critic_share_weights=False))
    assert model.rnn_state_size == 16
    features = model.forward_head(obs(4))
    h0 = torch.randn(4, 16)
    out, h = model.forward_core(features, h0)
    head = model.encoders[0].get_out_size()
    torch.testing.assert_close(h[:, 8:], model.cores[1].cell(features[:, head:], h0[:, 8:]))
    assert out.shape == (4, 16)


class TwoHeads(ActorCritic):
    """A whole actor-critic of one's own: sf's, with the value read from the actor's features scaled by two."""

    def __init__(self, cfg, obs_space, action_space):
        super().__init__(obs_space, action_space, cfg)

    def forward_tail(self, core_out):
        logits, values = super().forward_tail(core_out)
        return logits, 2.0 * values


def test_a_registered_actor_critic_replaces_the_model():
    global_model_factory().register_actor_critic_factory(TwoHeads)
    model = create_actor_critic(SPEC, ACTIONS, cfg())
    assert type(model) is TwoHeads and custom_model_parts(model) == ["actor-critic TwoHeads"]
    core = model.forward_head(obs(3))
    assert torch.equal(model.forward_tail(core)[1], 2.0 * ActorCritic.forward_tail(model, core)[1])
    global_model_factory().register_actor_critic_factory(lambda cfg, obs_space, action_space: nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"returned Linear; it must return an sf.model.actor_critic.ActorCritic"):
        create_actor_critic(SPEC, ACTIONS, cfg())


def test_a_part_that_cannot_say_its_size_is_named():
    global_model_factory().register_encoder_factory(lambda cfg, obs_space: nn.Linear(2, 3))
    with pytest.raises(TypeError, match=r"the encoder Linear made by .*<lambda> must report the size of its output"):
        create_actor_critic(SPEC, ACTIONS, cfg())


def test_registered_parts_get_the_initialization_sample_factory_gives_them():
    global_model_factory().register_encoder_factory(MaxPoolEncoder)
    torch.manual_seed(0)
    weight = create_actor_critic(SPEC, ACTIONS, cfg(policy_init_gain=1.5)).encoders[0].mlp[0].weight  # [12, 3]
    torch.testing.assert_close(weight.T @ weight, 1.5**2 * torch.eye(3), atol=1e-5, rtol=0)
    torch.manual_seed(0)
    default = create_actor_critic(SPEC, ACTIONS, cfg(policy_initialization="torch_default")).encoders[0].mlp[0].weight
    assert not torch.allclose(default.T @ default, 1.5**2 * torch.eye(3), atol=0.1)


def test_registered_parts_are_rows_of_the_tree_that_runs_them():
    global_model_factory().register_encoder_factory(MaxPoolEncoder)
    global_model_factory().register_decoder_factory(DoublingDecoder)
    model = create_actor_critic(SPEC, ACTIONS, cfg())
    timing = Timing("Learner 0")
    model(model.normalize_obs(obs(2)), None)  # outside the block: nothing recorded anywhere
    with model.parts_timed_by(timing), timing.add_time("forward_head"):
        model.forward_head(obs(2))
    with timing.add_time("tail"), model.parts_timed_by(timing):
        model.forward_tail(torch.randn(2, 14))
    assert set(timing.to_dict()) == {"forward_head", "tail"}
    assert set(timing.to_dict()["forward_head"]["children"]) == {"MaxPoolEncoder"}
    assert set(timing.to_dict()["tail"]["children"]) == {"DoublingDecoder"}
    assert model._timing is None


def test_the_factory_travels_to_another_process_as_its_functions():
    global_model_factory().register_encoder_factory(MaxPoolEncoder)
    data = pickle.dumps(model_factory_snapshot())
    restore_model_factory(ModelFactory())
    assert global_model_factory().make_model_encoder_func is default_make_encoder_func
    restore_model_factory(pickle.loads(data))
    assert isinstance(create_actor_critic(SPEC, ACTIONS, cfg()).encoders[0], MaxPoolEncoder)


def test_ray_sends_functions_of_a_script_by_value():
    transfer = pytest.importorskip("sf.distributed.transfer")
    import ray.cloudpickle

    def make(cfg, obs_space):
        return MaxPoolEncoder(cfg, obs_space)

    make.__module__ = "__main__"  # as a training script run as a program defines it
    payload = transfer.portable_model_factory(ModelFactory(make_model_encoder_func=make))
    on_the_node = ray.cloudpickle.loads(payload)
    assert isinstance(on_the_node.make_model_encoder_func, transfer.ByValue)
    assert on_the_node.make_model_core_func is default_make_core_func  # importable by name: sent as it is
    in_its_processes = pickle.loads(pickle.dumps(on_the_node))  # what the agent hands its component processes
    assert isinstance(in_its_processes.make_model_encoder_func(cfg(), obs_space_from_spec(SPEC)), MaxPoolEncoder)


def test_an_observation_key_named_like_a_module_dict_method_is_normalized():
    spec = {"items": ((3,), np.dtype(np.float32)), "keys": ((2,), np.dtype(np.float32))}
    model = create_actor_critic(spec, ACTIONS, cfg())
    batch = {"items": torch.randn(8, 3) * 4 + 2, "keys": torch.randn(8, 2)}
    normalized = model.normalize_obs(batch, update=True)["items"]
    assert "obs_normalizer.stats.items_.mean" in model.state_dict()
    assert abs(float(normalized.mean())) < 0.2


def test_builtin_cores_report_their_sizes_as_registered_ones_do():
    core = RnnCore(6, "lstm", 8, 2)
    assert core.get_out_size() == 8 and core.state_size == recurrent_state_size(
        cfg(use_rnn=True, rnn_type="lstm", rnn_num_layers=2)
    )


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", ["elu", "tanh"])
def test_a_part_built_from_sf_activations_can_be_scripted(name):
    """Sample Factory compiles its MLPs with TorchScript, and scripts written for it may do the same: the scripted
    module computes with torch's function what the eager one computes with the numba kernel (within its accuracy)."""
    mlp = create_mlp([64], 8, nonlinearity(cfg(nonlinearity=name)))
    scripted = torch.jit.script(mlp)
    x = torch.randn(1024, 8)  # 64k activations: the eager module takes the kernel
    torch.testing.assert_close(scripted(x), mlp(x), atol=1e-6, rtol=1e-6)
