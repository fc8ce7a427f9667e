"""Sampling without a learner: trajectories of the right shapes and count, whose actions come from the weights given."""

from __future__ import annotations

import pytest
import torch

from sf.cfg.arguments import parse_full_cfg, parse_sf_args
from sf.runner.build import build_model
from sf.runner.sampling_api import SyncSamplingAPI, obtain_env_info_in_a_separate_process, samples_per_trajectory

T = 16


def _cfg(*flags: str):
    argv = ["--env=CartPole-v1", "--use_rnn=False", f"--rollout={T}", "--seed=3", "--device=cpu", *flags]
    parser, _ = parse_sf_args(argv)
    return parse_full_cfg(parser, argv)


@pytest.fixture
def sampler_of():
    made: list[SyncSamplingAPI] = []

    def make(cfg) -> SyncSamplingAPI:
        made.append(SyncSamplingAPI(cfg, obtain_env_info_in_a_separate_process(cfg)))
        return made[-1]

    yield make
    for sampler in made:
        sampler.stop()


def test_trajectories_have_the_buffers_shapes_and_follow_each_other(sampler_of):
    """One env: each trajectory starts where the one before ended (none lost, none twice), `rollout` steps each."""
    sampler = sampler_of(_cfg("--num_workers=1", "--num_envs_per_worker=1", "--worker_num_splits=1"))
    sampler.start()
    trajectories = [sampler.get_trajectories_sync() for _ in range(40)]
    for traj in trajectories:
        assert traj["obs"]["obs"].shape == (1, T + 1, 4) and traj["values"].shape == (1, T + 1)
        assert traj["actions"].shape == (1, T, 1) and traj["action_logits"].shape == (1, T, 2)
        assert traj["rewards"].shape == traj["dones"].shape == (1, T) and samples_per_trajectory(traj) == T
    for before, after in zip(trajectories, trajectories[1:]):
        assert torch.equal(before["obs"]["obs"][0, T], after["obs"]["obs"][0, 0])
    episodes_ended = sum(int(traj["dones"].sum()) for traj in trajectories)
    assert sampler.stop() == 0
    assert sampler.get_trajectories_sync() is None and not sampler.thread.is_alive()
    assert len(sampler.episodes()) >= episodes_ended > 0  # the workers may have run ahead into the queue
    assert all(length >= 8 for _, length, _, _ in sampler.episodes())


def test_the_actions_come_from_the_weights_given(sampler_of):
    cfg = _cfg("--num_workers=2", "--num_envs_per_worker=4")
    sampler = sampler_of(cfg)
    model = build_model(cfg, sampler.env_info, "cpu", seed_offset=11)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # weights unlike the sampler's own initialization
    sampler.start({0: (0, model.state_dict(), torch.device("cpu"), 7)})
    steps = 0
    while steps < 2000:
        traj = sampler.get_trajectories_sync()
        steps += samples_per_trajectory(traj)
        assert bool((traj["policy_version"] == 7).all())
        obs = {"obs": traj["obs"]["obs"][:, :T].reshape(-1, 4)}
        with torch.no_grad():
            out = model.policy_step(model.normalize_obs(obs), None)
        logits = traj["action_logits"].reshape(-1, 2)
        assert torch.allclose(logits, out.action_logits, atol=1e-4), (logits - out.action_logits).abs().max()
        assert torch.allclose(traj["values"][:, :T].reshape(-1), out.values, atol=1e-4)
    assert sampler.stop() == 0


def test_the_example_samples_with_an_experiments_checkpoint(tmp_path, sf_log):
    """A checkpoint whose policy always pushes right: CartPole falls within about 10 steps (random play lasts
    about 22), which the example's average episode reward shows."""
    from conftest import write_experiment

    from sf_examples.sampler.use_simplified_sampling_api import main

    cfg = _cfg("--num_workers=1", f"--train_dir={tmp_path}", "--experiment=right")
    model = build_model(cfg, obtain_env_info_in_a_separate_process(cfg), "cpu")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("action_head"):
                p.zero_()
                if name.endswith("bias"):
                    p[1] = 20.0
    write_experiment(tmp_path / "right", cfg, model)
    argv = ["--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=right", "--use_checkpoint=True"]
    assert main([*argv, "--sample_env_steps=3000"]) == 0
    assert "loaded policy version 5 (640 env frames)" in sf_log
    last = next(line for line in reversed(sf_log) if "avg episode reward" in line)
    assert 8.0 <= float(last.split("avg episode reward ")[1].split()[0]) <= 11.0, last
