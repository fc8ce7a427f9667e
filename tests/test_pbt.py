"""Population-based training's mechanics against hand-computed cases: who replaces whom, how a value mutates, the
per-policy files, what a learner does with hyperparameters and with another policy's weights, the order in which the
runner's policy control and the observer act, and the self-play mapping of agents to policies."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_learner import N, T, hand_built_batch, make_cfg, make_learner

from sf.analysis.population import PolicyLine
from sf.cfg.arguments import default_cfg
from sf.experiment.checkpoint import load_state
from sf.pbt import policy_files
from sf.pbt.mutation import Change, Perturbation, tuned
from sf.pbt.population import PopulationBasedTraining
from sf.pbt.selection import Gaps, ranked, step
from sf.runner.policy_control import PolicyControl
from sf.runtime.learner import PER_POLICY_HYPERPARAMETERS
from sf.runtime.messages import (
    AdoptWeights,
    Hyperparameters,
    LearnerStats,
    LearnerVersion,
    ShareWeights,
    Staleness,
    Train,
    WeightsAdopted,
    WeightsSaved,
)
from sf.runtime.policy_mapping import PolicyMapping
from sf.utils.errors import ConfigError
from sf.utils.roles import learner_name


class Scripted(random.Random):
    """A generator that returns the given values: `random()` and `uniform()` in order, `choice` by index."""

    def __init__(self, randoms=(), uniforms=(), choices=()):
        super().__init__(0)
        self.randoms, self.uniforms, self.choices = list(randoms), list(uniforms), list(choices)

    def random(self):
        return self.randoms.pop(0)

    def uniform(self, a, b):
        value = self.uniforms.pop(0)
        assert a <= value <= b
        return value

    def choice(self, seq):
        return seq[self.choices.pop(0)]


# who replaces whom ----------------------------------------------------------------------------------------------
def test_ranking_puts_the_best_first_and_breaks_ties_by_the_higher_id():
    assert ranked([10.0, 40.0, 20.0, 30.0]) == [1, 3, 2, 0]
    assert ranked([5.0, 5.0, 5.0]) == [2, 1, 0]


def test_a_worst_policy_takes_a_best_ones_weights_when_the_gaps_are_exceeded():
    objectives = [10.0, 40.0, 20.0, 30.0]  # ceil(0.3 * 4) = 2: best 1 and 3, worst 2 and 0
    gaps = Gaps(relative=0.1, absolute=1e-6)
    assert step(1, objectives, 0.3, gaps, Scripted()) is None  # a best one is left alone
    replaced = step(0, objectives, 0.3, gaps, Scripted(choices=[1]))  # draws policy 3: 20 / 30 = 0.67 > 0.1
    assert (replaced.source, replaced.replaced, replaced.mutate) == (3, True, False)  # policy 0 never mutates
    assert (replaced.best, replaced.worst) == ((1, 3), (2, 0))
    kept = step(0, objectives, 0.3, Gaps(relative=0.7, absolute=1e-6), Scripted(choices=[1]))  # 0.67 < 0.7
    assert (kept.source, kept.replaced) == (0, False)
    not_far = step(2, objectives, 0.3, Gaps(relative=0.1, absolute=25.0), Scripted(choices=[0]))  # |40 - 20| < 25
    assert (not_far.source, not_far.mutate) == (2, True)


def test_a_middle_policy_only_mutates_and_negative_objectives_use_sample_factorys_formula():
    objectives = [1.0, 2.0, 3.0, 4.0, 5.0]  # ceil(0.2 * 5) = 1: best 4, worst 0; 1, 2, 3 in the middle
    middle = step(2, objectives, 0.2, Gaps(0.1, 1e-6), Scripted())
    assert (middle.source, middle.mutate) == (2, True)
    # best -10, worst -40: |(-10 - -40) / (-10 + 1e-8)| = 3 > 0.1
    assert step(1, [-10.0, -40.0], 0.3, Gaps(0.1, 1e-6), Scripted(choices=[0])).source == 0


# how a value mutates --------------------------------------------------------------------------------------------
def test_mutation_multiplies_or_divides_by_a_factor_in_the_flags_range():
    rule = Perturbation(rate=0.15, factor_min=1.1, factor_max=1.5)
    assert rule.value("learning_rate", 1e-4, 1e-4, Scripted([0.2])) == 1e-4  # 0.2 > 0.15: unchanged
    assert rule.value("learning_rate", 1e-4, 1e-4, Scripted([0.1, 0.7], [1.3])) == pytest.approx(1.3e-4)
    assert rule.value("learning_rate", 1e-4, 1e-4, Scripted([0.1, 0.3], [1.25])) == pytest.approx(0.8e-4)
    # a value away from its default goes back to it 1 % of the time
    assert rule.value("value_loss_coeff", 0.7, 0.5, Scripted([0.1, 0.005])) == 0.5
    assert rule.value("value_loss_coeff", 0.7, 0.5, Scripted([0.1, 0.5, 0.9], [1.5])) == pytest.approx(1.05)


def test_values_near_one_mutate_through_their_distance_to_one():
    rule = Perturbation(rate=1.0, factor_min=1.1, factor_max=1.5)
    assert rule.value("gamma", 0.99, 0.99, Scripted([0.0, 0.2], [1.1])) == pytest.approx(1 - 0.01 / 1.1)
    assert rule.value("adam_beta2", 0.999, 0.999, Scripted([0.0, 0.9], [1.2])) == pytest.approx(1 - 0.001 * 1.2)
    with pytest.raises(AssertionError):  # their factor is drawn from [1.01, 1.2], not the flags' range
        rule.value("adam_beta1", 0.9, 0.9, Scripted([0.0, 0.9], [1.3]))
    assert rule.value("adam_beta1", 0.5, 0.5, Scripted([0.0, 0.9], [1.2])) == pytest.approx(0.4)


def test_a_nested_reward_shaping_scheme_mutates_leaf_by_leaf_and_says_what_changed():
    rule = Perturbation(rate=0.5, factor_min=2.0, factor_max=2.0)
    scheme = {"kill": 1.0, "delta": {"health": (0.5, -0.5)}, "name": "x"}
    # kill: mutates (x2); health_0: unchanged; health_1: mutates (/2)
    rng = Scripted([0.1, 0.9, 0.6, 0.1, 0.4], [2.0, 2.0])
    mutated, changes = rule.values(scheme, scheme, rng, "reward_shaping/")
    assert mutated == {"kill": 2.0, "delta": {"health": (0.5, -0.25)}, "name": "x"}
    assert changes == [Change("reward_shaping/kill", 1.0, 2.0), Change("reward_shaping/delta/health_1", -0.5, -0.25)]


def test_the_tuned_set_is_sample_factorys_with_adams_and_gamma_on_request():
    assert tuned(default_cfg(env="CartPole-v1")) == tuple(p for p in PER_POLICY_HYPERPARAMETERS if p != "gamma")
    assert "gamma" in tuned(default_cfg(env="CartPole-v1", pbt_optimize_gamma=True))


# the files ------------------------------------------------------------------------------------------------------
def pbt_cfg(tmp_path, **flags):
    settings = dict(env="CartPole-v1", train_dir=str(tmp_path), experiment="pop", with_pbt=True, num_policies=3, seed=4)
    return default_cfg(**{**settings, **flags})


def test_files_round_trip_and_a_new_population_starts_from_the_flags(tmp_path):
    cfg = pbt_cfg(tmp_path, learning_rate=3e-4, pbt_mutation_rate=1.0)
    population = PopulationBasedTraining.load(cfg, tmp_path, {"kill": 1.0})
    assert population.hyperparameters[0] == {name: getattr(cfg, name) for name in tuned(cfg)}  # the reference
    assert population.shaping[0] == {"kill": 1.0}
    for p in (1, 2):  # every other policy starts mutated (rate 1: every value)
        assert all(population.hyperparameters[p][k] != population.hyperparameters[0][k] for k in tuned(cfg))
        assert population.shaping[p] != {"kill": 1.0}
    for p in range(3):
        policy_files.write(tmp_path, p, population.hyperparameters[p], population.shaping[p])
    assert json.loads((tmp_path / "policy_02_cfg.json").read_text()) == population.hyperparameters[2]
    again = PopulationBasedTraining.load(cfg, tmp_path, {"kill": 1.0})
    assert again.hyperparameters == population.hyperparameters and again.shaping == population.shaping
    restarted = PopulationBasedTraining.load(pbt_cfg(tmp_path, restart_behavior="restart"), tmp_path, {"kill": 1.0})
    assert restarted.hyperparameters[1] != population.hyperparameters[1]  # --restart_behavior=restart starts over


def test_a_file_put_there_before_the_start_seeds_its_policy_and_a_bad_one_is_named(tmp_path):
    (tmp_path / "policy_01_cfg.json").write_text(json.dumps({"learning_rate": 1e-7}))  # a Sample Factory file
    population = PopulationBasedTraining.load(pbt_cfg(tmp_path, pbt_mutation_rate=0.0), tmp_path, None)
    assert population.hyperparameters[1]["learning_rate"] == 1e-7
    assert population.hyperparameters[1]["ppo_clip_ratio"] == population.hyperparameters[0]["ppo_clip_ratio"]
    assert population.shaping == [None, None, None]
    (tmp_path / "policy_02_cfg.json").write_text(json.dumps({"learning_rate": 1e-4, "batch_size": 64}))
    with pytest.raises(ConfigError, match=r"policy_02_cfg.json: batch_size is not a per-policy hyperparameter"):
        PopulationBasedTraining.load(pbt_cfg(tmp_path), tmp_path, None)
    (tmp_path / "policy_02_cfg.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"policy_02_cfg.json: cannot be read as JSON"):
        PopulationBasedTraining.load(pbt_cfg(tmp_path), tmp_path, None)


def test_pbt_flags_out_of_range_fail_naming_the_flag():
    with pytest.raises(ConfigError, match=r"--pbt_replace_fraction: must be in \(0, 0.5\]"):
        default_cfg(env="CartPole-v1", pbt_replace_fraction=0.6)
    with pytest.raises(ConfigError, match=r"--pbt_perturb_max: must be >= --pbt_perturb_min \(1.3\)"):
        default_cfg(env="CartPole-v1", pbt_perturb_min=1.3, pbt_perturb_max=1.2)
    with pytest.raises(ConfigError, match=r"--num_policies=3: a synchronous run .* \(4\) must be a multiple of it"):
        default_cfg(env="CartPole-v1", serial_mode=True, num_policies=3, num_workers=2, num_envs_per_worker=2)


# the learner ----------------------------------------------------------------------------------------------------
def sent(learner, kind) -> list:
    return [msg for _, _, msg in learner.loop.outbox if type(msg) is kind]


def test_a_learner_trains_with_its_own_hyperparameters(tmp_path):
    shared = make_cfg(tmp_path, "--use_rnn=False", "--learning_rate=1e-3")
    learner = make_learner(shared, tmp_path)
    learner._on_hyperparameters(Hyperparameters({"learning_rate": 2e-3, "adam_beta1": 0.8, "ppo_clip_ratio": 0.3}))
    assert (learner.cfg.learning_rate, learner.cfg.ppo_clip_ratio, learner.lr) == (2e-3, 0.3, 2e-3)
    assert shared.learning_rate == 1e-3 and shared.ppo_clip_ratio != 0.3  # the config it was given is untouched
    group = learner.optimizer.param_groups[0]
    assert (group["betas"], group["lr"]) == ((0.8, shared.adam_beta2), 2e-3)
    with pytest.raises(ValueError, match="not a per-policy hyperparameter: rollout"):
        learner.set_hyperparameters({"rollout": 8})


def test_adopting_weights_copies_them_with_the_optimizer_and_masks_the_old_experience(tmp_path):
    source = make_learner(make_cfg(tmp_path / "a", "--use_rnn=False", "--max_policy_lag=10"), tmp_path / "a")
    source._on_train(Train(hand_built_batch(source.model), N * T, 0))  # Adam has moments to copy
    source._on_share_weights(ShareWeights())
    (saved,) = sent(source, WeightsSaved)
    assert (saved.policy_id, saved.version) == (0, 1)
    state = load_state(Path(saved.path))
    for key, value in source.model.state_dict().items():
        torch.testing.assert_close(state["model"][key], value)

    target = make_learner(make_cfg(tmp_path / "b", "--use_rnn=False", "--max_policy_lag=10"), tmp_path / "b")
    target.version = 7
    target.loop.outbox.clear()
    target._on_adopt_weights(AdoptWeights(0, saved.path, {"learning_rate": 5e-4}))
    assert target.version == 7 + 10 + 1 and target.own_since == 18  # Sample Factory's jump past --max_policy_lag
    assert (target.lr, target.env_steps) == (5e-4, 0)  # its hyperparameters and frames stay its own
    for (name, a), b in zip(target.model.named_parameters(), source.model.parameters()):
        torch.testing.assert_close(a, b, msg=name)
    theirs, ours = source.optimizer.state_dict()["state"], target.optimizer.state_dict()["state"]
    torch.testing.assert_close(ours[0]["exp_avg"], theirs[0]["exp_avg"])
    assert sent(target, LearnerVersion) == [LearnerVersion(18)]
    assert sent(target, WeightsAdopted) == [WeightsAdopted(0, 0, 18, None)]
    own = target.checkpoints.newest()
    assert own.state["version"] == 18  # the adopted weights are this policy's newest checkpoint at once

    target.loop.outbox.clear()  # experience collected before (version 7 and older): masked, no lag of these weights
    before = [p.detach().clone() for p in target.model.parameters()]
    target._on_train(Train(hand_built_batch(target.model, versions=(7, 7, 6, 7)), N * T, 0))
    assert all(torch.equal(a, b) for a, b in zip(before, target.model.parameters()))
    (stats,) = sent(target, LearnerStats)
    assert stats.stats["policy_lag"] != stats.stats["policy_lag"] and sent(target, Staleness)[0].lags == {}
    target.loop.outbox.clear()  # one trajectory of its own (version 18; the skipped batch made it 19): its lag alone
    target._on_train(Train(hand_built_batch(target.model, versions=(18, 7, 7, 7)), N * T, 0))
    (stats,) = sent(target, LearnerStats)
    assert (stats.stats["policy_lag"], sent(target, Staleness)[0].lags) == (1.0, {1: T})


def test_a_checkpoint_that_does_not_load_leaves_the_target_as_it_was(tmp_path):
    target = make_learner(make_cfg(tmp_path, "--use_rnn=False"), tmp_path)
    before = [p.detach().clone() for p in target.model.parameters()]
    target._on_adopt_weights(AdoptWeights(1, str(tmp_path / "missing.pth"), {"learning_rate": 1.0}))
    (answer,) = sent(target, WeightsAdopted)
    assert (answer.version, target.lr) == (0, target.cfg.learning_rate) and "missing.pth" in answer.error
    assert all(torch.equal(a, b) for a, b in zip(before, target.model.parameters()))


# the runner's policy control and the observer ------------------------------------------------------------------
def test_a_copy_saves_the_source_first_and_reports_once_the_target_holds_the_weights():
    messages, done = [], []
    control = PolicyControl(lambda dest, msg: messages.append((dest, msg)))
    control.copy_weights(2, 0, {"learning_rate": 1e-3}, done.append)
    control.copy_weights(2, 1, {"learning_rate": 2e-3}, done.append)
    assert messages == [(learner_name(2), ShareWeights()), (learner_name(2), ShareWeights())]
    assert control.busy(0) and control.busy(1) and not control.busy(2)
    with pytest.raises(RuntimeError, match="policy 0 is already taking policy 2's weights"):
        control.copy_weights(1, 0, {}, done.append)
    messages.clear()
    control.on_saved(WeightsSaved(2, "/c/p2.pth", 40))
    control.on_saved(WeightsSaved(2, "/c/p2b.pth", 41))  # the second save finds no copy waiting
    assert messages == [
        (learner_name(0), AdoptWeights(2, "/c/p2.pth", {"learning_rate": 1e-3})),
        (learner_name(1), AdoptWeights(2, "/c/p2.pth", {"learning_rate": 2e-3})),
    ]
    assert done == []
    control.on_adopted(WeightsAdopted(1, 2, 1050, None))
    assert done == [WeightsAdopted(1, 2, 1050, None)] and not control.busy(1) and control.busy(0)


class FakeRunner:
    """What the observer reads and calls on the runner: frames, episode statistics, the policy control, scalars."""

    def __init__(self, cfg, tmp_path):
        self.messages = []
        self.control = PolicyControl(lambda dest, msg: self.messages.append((dest, msg)))
        self.env_steps = {p: 0 for p in range(cfg.num_policies)}
        self.progress = SimpleNamespace(learners_ready=set(range(cfg.num_policies)))
        self.policy_avg_stats = {"true_objective": [[] for _ in range(cfg.num_policies)]}
        self.summary_sections = {}
        self.scalars = []
        self.experiment = SimpleNamespace(write_scalars=lambda p, frames, values: self.scalars.append((p, frames)))


def test_the_observer_sends_every_policys_values_first_and_steps_each_policy_every_period(tmp_path, caplog):
    cfg = pbt_cfg(
        tmp_path,
        num_policies=4,
        pbt_start_mutation=2000,
        pbt_period_env_steps=1000,
        pbt_mutation_rate=0.0,
        pbt_replace_fraction=0.25,
    )
    population = PopulationBasedTraining.load(cfg, tmp_path, None)
    runner = FakeRunner(cfg, tmp_path)
    population.on_init(runner)
    assert [dest for dest, _ in runner.messages] == [learner_name(p) for p in range(4)]
    assert all(type(msg) is Hyperparameters for _, msg in runner.messages)
    assert sorted(path.name for path in tmp_path.glob("policy_*.json"))[:2] == [
        "policy_00_cfg.json",
        "policy_00_reward_shaping.json",
    ]
    runner.messages.clear()
    runner.env_steps = {0: 1500, 1: 1500, 2: 1500, 3: 1500}
    population.on_training_step(runner, 1)  # before --pbt_start_mutation: nothing
    runner.env_steps = {0: 2100, 1: 2100, 2: 2100, 3: 2100}
    with caplog.at_level(logging.WARNING, "sf"):
        population.on_training_step(runner, 2)  # no episodes yet: nothing, and no step for another period
    assert runner.messages == [] and population.last_step == [2100] * 4
    runner.policy_avg_stats["true_objective"] = [[10.0], [50.0], [30.0], [20.0]]  # best 1, worst 0
    runner.env_steps = {0: 3101, 1: 3000, 2: 3000, 3: 3000}
    with caplog.at_level(logging.INFO, "sf"):
        population.on_training_step(runner, 3)
    assert "PBT: policy 0 (true_objective 10.000) takes policy 1's weights" in caplog.text
    # policy 0 is due: the worst, 40 from the best: it takes policy 1's weights; nobody else is due
    assert runner.messages == [(learner_name(1), ShareWeights())]
    assert population.replacements == [0, 0, 0, 0]
    before = json.loads((tmp_path / "policy_00_cfg.json").read_text())
    runner.control.on_saved(WeightsSaved(1, "/c.pth", 9))
    assert json.loads((tmp_path / "policy_00_cfg.json").read_text()) == before  # not until it holds the weights
    runner.control.on_adopted(WeightsAdopted(0, 1, 1010, None))
    assert population.replacements == [1, 0, 0, 0] and population.sources[0][0]["source"] == 1
    assert json.loads((tmp_path / "policy_00_cfg.json").read_text()) == population.hyperparameters[1]
    runner.messages.clear()
    runner.env_steps = {0: 3101, 1: 3000, 2: 4200, 3: 3000}
    population.on_training_step(runner, 4)  # policy 2, in the middle: keeps its weights, gets its values again
    assert runner.messages == [(learner_name(2), Hyperparameters(population.hyperparameters[2]))]
    summary = runner.summary_sections["population"]()
    assert summary["target_objective"] == "true_objective"
    assert [summary["policies"][p]["rank"] for p in range(4)] == [4, 1, 2, 3]


def test_an_objective_no_episode_reports_is_said_once(tmp_path, caplog):
    cfg = pbt_cfg(tmp_path, num_policies=2, pbt_start_mutation=0, pbt_period_env_steps=10, pbt_target_objective="kills")
    population = PopulationBasedTraining.load(cfg, tmp_path, None)
    runner = FakeRunner(cfg, tmp_path)
    population.on_init(runner)
    runner.messages.clear()
    with caplog.at_level(logging.WARNING, "sf"):
        for frames in (100, 200, 300):
            runner.env_steps = {0: frames, 1: frames}
            population.on_training_step(runner, frames)
    assert caplog.text.count("--pbt_target_objective=kills: no episode reports it") == 1
    assert runner.messages == []


# self-play: which policy each agent acts for -------------------------------------------------------------------
class CountedDraws(PolicyMapping):
    """Draw number k gives every agent policy k: which draw an agent's policy comes from shows in the policy."""

    def _draw(self, env: int) -> None:
        self.made = getattr(self, "made", 0) + 1
        self.draws[env] = [self.made] * self.num_agents


def test_agents_draw_their_policies_on_early_episode_ends_and_then_every_ten_episodes_each():
    mapping = CountedDraws(num_policies=3, num_agents=2, rng=random.Random(0))
    assert mapping.start(0) == [1, 1]
    # the first draw counts 2 (its agents'); episode ends then count 2, 3, 4 (early: draw again), 5 ... 19 (keep),
    # 20 (2 agents x 10 episodes: draw again), 21 ... 39, 40
    policies = [mapping.on_episode_end(0, agent=count % 2) for count in range(2, 42)]
    assert mapping.made == 1 + 3 + 2
    assert policies[:3] == [2, 3, 4] and set(policies[3:18]) == {4} and policies[18] == 5 and policies[-2] == 6


def test_a_mapping_draws_each_agent_uniformly_over_the_population():
    mapping = PolicyMapping(num_policies=4, num_agents=2, rng=random.Random(1))
    counts = [0] * 4
    for env in range(2000):
        for policy in mapping.start(env):
            counts[policy] += 1
    assert all(abs(c / 4000 - 0.25) < 0.03 for c in counts)


def test_a_learner_trains_its_first_iteration_with_the_values_sent_before_the_components_start(tmp_path):
    """The observer sends every policy's values in `on_init`, before any component starts; the learner's loop
    delivers them before the first batch, which then trains at the file's learning rate."""
    cfg = make_cfg(tmp_path, "--use_rnn=False", "--learning_rate=1e-3", "--with_pbt=True")
    (tmp_path / "policy_00_cfg.json").write_text(json.dumps({"learning_rate": 3e-5}))
    population = PopulationBasedTraining.load(cfg, tmp_path, None)
    learner = make_learner(cfg, tmp_path)
    runner = FakeRunner(cfg, tmp_path)
    runner.control.send = learner.loop.send  # the runner's sends, on the learner's loop as in a serial run
    population.on_init(runner)
    learner.loop.send(learner.name, Train(hand_built_batch(learner.model), N * T, 0))  # the first batch, after
    learner.loop.flushing = []
    learner.loop._drain_local()
    stats = sent(learner, LearnerStats)[-1]  # after the one the learner sends as it starts
    assert stats.stats["lr"] == 3e-5 and learner.optimizer.param_groups[0]["lr"] == 3e-5


def test_a_policys_line_counts_its_replacements_and_mutated_values():
    line = PolicyLine(3, "Learner 3", 303872, "true_objective", 71.29, 4, replacements=2, mutations=1)
    assert line.text() == (
        "policy 3: Learner 3, 303,872 frames, true_objective 71.29 (rank 4); took another policy's weights 2x, "
        "1 value mutated"
    )
    assert PolicyLine(1, "Learner 1", 10, "reward", None, None, mutations=4).text() == (
        "policy 1: Learner 1, 10 frames, no episode yet; 4 values mutated"
    )
