"""A whole actor-critic written for Sample Factory 2.1.1 (tests/sample_factory_scripts/train_custom_actor_critic.py:
an `ActorCritic` subclass with Sample Factory's `forward_head` / `forward_core` / `forward_tail` / `forward`,
`get_action_parameterization`, `_maybe_sample_actions` and `TensorDict` results), its imports rewritten by the table
of docs/customizing.md: what the inference worker and the learner get from it, checked against the same numbers
computed by hand, and (slow) CartPole learnt with it in a serial and a parallel run."""

from __future__ import annotations

import importlib
import json
import sys

import numpy as np
import pytest
import torch
from sample_factory_imports import run_script, write_rewritten_scripts

from sf.envs.spaces import ActionSpec
from sf.model.actor_critic import ActorCriticSharedWeights
from sf.model.factory import (
    ModelFactory,
    create_actor_critic,
    custom_model_parts,
    default_make_actor_critic_func,
    global_model_factory,
    restore_model_factory,
)
from sf.model.tensor_dict import TensorDict

OBS = {"obs": ((4,), np.dtype(np.float32))}


@pytest.fixture
def script(tmp_path, monkeypatch):
    """The rewritten script imported as a module, its components registered; the factory restored afterwards."""
    monkeypatch.syspath_prepend(str(write_rewritten_scripts(tmp_path)))
    module = importlib.import_module("train_custom_actor_critic")
    module.register_custom_components()
    yield module
    restore_model_factory(ModelFactory())
    sys.modules.pop("train_custom_actor_critic", None)


def cfg(script):
    return script.parse_custom_args(["--env=my_cartpole", "--hidden_width=16", "--normalize_returns=True"])


def test_tensor_dict_reads_keys_as_a_dict_and_indexes_every_tensor_otherwise():
    td = TensorDict(values=torch.arange(4.0), nested={"x": torch.arange(8.0).view(4, 2)})
    assert torch.equal(td["values"], torch.arange(4.0))
    rows = td[torch.tensor([1, 3])]
    assert isinstance(rows, TensorDict) and torch.equal(rows["values"], torch.tensor([1.0, 3.0]))
    assert torch.equal(rows["nested"]["x"], torch.tensor([[2.0, 3.0], [6.0, 7.0]]))
    td[1:3] = {"values": np.array([9.0, 8.0]), "nested": {"x": torch.zeros(2, 2)}}
    assert td["values"].tolist() == [0.0, 9.0, 8.0, 3.0] and td["nested"]["x"][1:3].abs().sum() == 0


def test_the_inference_step_of_a_sample_factory_model_is_its_forward(script):
    torch.manual_seed(0)
    model = create_actor_critic(OBS, ActionSpec((2,), 0), cfg(script))
    assert type(model).__name__ == "ValueScaledActorCritic"
    assert custom_model_parts(model) == ["actor-critic ValueScaledActorCritic"] and model.rnn_state_size == 0
    model.returns_normalizer.update(torch.randn(100) * 3 + 5)
    with torch.no_grad():
        model.value_scale.fill_(1.5)
        obs = model.normalize_obs({"obs": torch.randn(6, 4)})
        out = model.policy_step(obs, None)
        features = model.encoder.mlp(obs["obs"])  # the same numbers by hand
        logits = model.action_parameterization.distribution_linear(features)
        values = 1.5 * model.critic_linear(features).squeeze(1)
    assert out.actions.shape == (6, 1) and set(out.actions.flatten().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(out.action_logits, logits)
    expected_log_prob = torch.distributions.Categorical(logits=logits).log_prob(out.actions[:, 0].long())
    torch.testing.assert_close(out.log_prob, expected_log_prob)
    torch.testing.assert_close(out.values, model.returns_normalizer.denormalize(values))
    best = model.policy_step(obs, None, deterministic=True).actions[:, 0]
    assert torch.equal(best, logits.argmax(1).float())


def test_the_learner_reads_the_tail_and_the_distribution_sample_factory_s_way(script):
    torch.manual_seed(1)
    model = create_actor_critic(OBS, ActionSpec((2,), 0), cfg(script))
    obs = model.normalize_obs({"obs": torch.randn(5, 4)})
    core, _ = model.forward_core(model.forward_head(obs), torch.zeros(5, 0))
    result = model.forward_tail(core, values_only=False, sample_actions=False)
    assert set(result) == {"values", "action_logits"}
    dist = model.action_distribution()
    reference = torch.distributions.Categorical(logits=result["action_logits"])
    torch.testing.assert_close(dist.entropy(), reference.entropy())
    older = model.action_distribution(torch.zeros(5, 2))  # parameters an older policy stored
    torch.testing.assert_close(dist.kl_divergence(older), torch.distributions.kl_divergence(reference, older_ref()))
    assert set(model.forward_tail(core, values_only=True, sample_actions=False)) == {"values"}
    sampled = model(obs, torch.zeros(5, 0))
    assert set(sampled) == {"values", "action_logits", "actions", "log_prob_actions", "new_rnn_states"}
    assert sampled["actions"].shape == (5,)  # one categorical action squeezed, as Sample Factory gives it


def older_ref():
    return torch.distributions.Categorical(logits=torch.zeros(5, 2))


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["serial", "parallel"])
def test_a_sample_factory_actor_critic_learns_cartpole(tmp_path, placement):
    """Random play scores about 22; both runs of the script reached 135 and more at 100k frames."""
    scripts = write_rewritten_scripts(tmp_path)
    mode = ["--serial_mode=True"] if placement == "serial" else ["--num_workers=2"]
    args = ["--env=my_cartpole", *mode, "--train_for_env_steps=100000", "--seed=1", f"--train_dir={tmp_path}"]
    result = run_script(scripts / "train_custom_actor_critic.py", [*args, "--experiment=cp"], tmp_path, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    summary = json.loads((tmp_path / "cp" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["avg_episode_reward"]["0"] >= 100.0, summary
    trees = json.loads((tmp_path / "cp" / "profile.json").read_text())
    assert "forward_head" in json.dumps(trees["Learner 0"]["tree"])


class DoubledAdvantageModel(ActorCriticSharedWeights):
    """A subclass of Sample Factory's default model overriding its tail, written against Sample Factory's attribute
    names (`decoder`, `critic_linear`, `action_parameterization`), its values doubled."""

    def forward_tail(self, core_output, values_only: bool, sample_actions: bool) -> TensorDict:
        decoder_output = self.decoder(core_output)
        values = 2.0 * self.critic_linear(decoder_output).squeeze()
        result = TensorDict(values=values)
        if values_only:
            return result
        action_distribution_params, self.last_action_distribution = self.action_parameterization(decoder_output)
        result["action_logits"] = action_distribution_params
        self._maybe_sample_actions(sample_actions, result)
        return result


@pytest.mark.parametrize("actions", [ActionSpec((3,), 0), ActionSpec((), 2)])
def test_a_subclass_of_the_default_model_reads_sample_factory_s_attribute_names(script, actions):
    config = cfg(script)
    global_model_factory().register_actor_critic_factory(
        lambda cfg, obs_space, action_space: DoubledAdvantageModel(global_model_factory(), obs_space, action_space, cfg)
    )
    torch.manual_seed(2)
    model = create_actor_critic(OBS, actions, config)
    global_model_factory().register_actor_critic_factory(default_make_actor_critic_func)
    torch.manual_seed(2)
    default = create_actor_critic(OBS, actions, config)
    default.load_state_dict(model.state_dict())
    obs = default.normalize_obs({"obs": torch.randn(4, 4)})
    core, _ = default.forward_core(default.forward_head(obs), torch.zeros(4, 0))
    mine = model.forward_tail(core, values_only=False, sample_actions=False)
    theirs = default.forward_tail(core, values_only=False, sample_actions=False)
    torch.testing.assert_close(mine["action_logits"], theirs["action_logits"])
    torch.testing.assert_close(mine["values"], 2.0 * theirs["values"])
    torch.testing.assert_close(model.action_distribution().entropy(), default.action_distribution().entropy())
    assert model.encoder is model.encoders[0] and model.critic_linear is model.value_head
