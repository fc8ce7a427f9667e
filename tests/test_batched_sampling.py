"""`--batched_sampling=True`: tensor envs in the IsaacGym style, gymnasium's vector API and EnvPool stepped as whole
batches; observations into the buffers in one copy; learning in serial and parallel mode."""

from __future__ import annotations

import json
import os
import re

import gymnasium
import numpy as np
import pytest
import torch
from conftest import ROOT, run_sf, shm_leaked

from sf.cfg.arguments import parse_full_cfg
from sf.envs.batched import BatchedEnvs, EnvPoolSource, GymVectorSource, batched_source
from sf.envs.registry import register_env
from sf.utils.errors import ConfigError
from sf_examples.tensor_envs.tensor_envs import register_tensor_envs, tensor_env_defaults
from sf_examples.tensor_envs.torch_classic import TensorCartPole, TensorPendulum

TRAIN = "sf_examples.tensor_envs.train_tensor_env"
SOLVED = 400.0  # docs/environments.md: tensor_cartpole's threshold (gymnasium's CartPole-v1 ends at 500)


def cfg_for(env: str, *flags: str):
    register_tensor_envs()
    return parse_full_cfg([f"--env={env}", "--device=cpu", *flags], defaults=tensor_env_defaults)


# the env --------------------------------------------------------------------------------------------------------
def test_tensor_cartpole_matches_gymnasium_step_for_step():
    """The torch copies follow gymnasium's CartPole-v1 from the same state (the env's dynamics, not a lookalike)."""
    env = TensorCartPole(3, seed=0)
    env.reset()
    reference = gymnasium.make("CartPole-v1").unwrapped
    reference.reset(seed=0)
    reference.state = env.state[1].double().numpy().copy()
    for action in [1, 1, 0, 1, 0, 0, 1]:
        actions = np.array([0, action, 1], np.int32)
        obs, rewards, terminated, *_ = env.step(actions)
        expected, reward, done, *_ = reference.step(action)
        np.testing.assert_allclose(obs[1].numpy(), expected, rtol=1e-4, atol=1e-5)
        assert rewards[1].item() == reward and bool(terminated[1]) == done


def test_tensor_pendulum_matches_gymnasium_reward():
    env = TensorPendulum(2, seed=0)
    env.reset()
    reference = gymnasium.make("Pendulum-v1").unwrapped
    reference.reset(seed=0)
    reference.state = env.state[0].double().numpy().copy()
    obs, rewards, *_ = env.step(np.array([[1.5], [0.0]], np.float32))
    expected, reward, *_ = reference.step(np.array([1.5], np.float32))
    np.testing.assert_allclose(obs[0].numpy(), expected, rtol=1e-4, atol=1e-5)
    assert rewards[0].item() == pytest.approx(reward, rel=1e-4, abs=1e-5)


def test_copies_reset_inside_the_step_that_ends_them():
    env = TensorCartPole(4, seed=1)
    env.reset()
    ended_at = None
    for step in range(200):
        obs, _, terminated, truncated, _ = env.step(np.ones(4, np.int32))  # always push right: the pole falls
        if bool(terminated[0]):
            ended_at = step
            break
    assert ended_at is not None
    assert obs[0].abs().max().item() <= 0.05  # already the next episode's first state
    assert env.steps[0].item() == 0


# the batched sources --------------------------------------------------------------------------------------------
def play(env: BatchedEnvs, steps: int, seed: int = 3) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    ids = np.arange(env.num_envs, dtype=np.int32)
    obs = [np.asarray(env.reset()["obs"]).copy()]
    rewards, ends = [], []
    for _ in range(steps):
        step = env.step(ids, rng.integers(0, 2, (env.num_envs * env.agents, 1)).astype(np.float32))
        obs.append(np.asarray(step.obs["obs"]).copy())
        rewards.append(step.rewards.copy())
        ends.append(step.terminated | step.truncated)
    return obs, rewards, ends


@pytest.mark.parametrize("mode", ["next_step", "disabled"])
def test_gymnasium_vector_env_in_any_autoreset_mode_steps_as_in_same_step_mode(mode):
    """A vector env in NEXT_STEP or DISABLED mode gives every step the rows SAME_STEP mode gives: ended copies hold
    the next episode's first observation at once, and no step is lost to a reset."""
    cfg = cfg_for("tensor_cartpole")

    def envs(autoreset: str) -> BatchedEnvs:
        vec = gymnasium.make_vec(
            "CartPole-v1", num_envs=4, vectorization_mode="sync", vector_kwargs={"autoreset_mode": autoreset}
        )
        return BatchedEnvs([batched_source(vec)], cfg, seeds=[11])

    reference, other = envs("SameStep"), envs({"next_step": "NextStep", "disabled": "Disabled"}[mode])
    try:
        obs_a, rewards_a, ends_a = play(reference, 120)
        obs_b, rewards_b, ends_b = play(other, 120)
    finally:
        reference.close()
        other.close()
    assert sum(int(e.sum()) for e in ends_a) >= 4  # episodes did end on the way
    for a, b in zip(obs_a, obs_b):
        np.testing.assert_array_equal(a, b)
    assert all((a == b).all() for a, b in zip(rewards_a, rewards_b))
    assert all((a == b).all() for a, b in zip(ends_a, ends_b))


def test_async_vector_env_and_a_plain_env_are_taken_as_they_are():
    async_env = batched_source(gymnasium.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async"))
    plain = batched_source(gymnasium.make("CartPole-v1"))
    try:
        assert isinstance(async_env, GymVectorSource) and async_env.num_agents == 2
        assert isinstance(plain, GymVectorSource) and plain.num_agents == 1 and plain.same_step
        env = BatchedEnvs([async_env], cfg_for("tensor_cartpole"), seeds=[5])
        _, rewards, ends = play(env, 60)
        assert sum(int(e.sum()) for e in ends) >= 2 and all(r.shape == (2,) for r in rewards)
    finally:
        async_env.close()
        plain.close()


def test_envpool_steps_as_gymnasium_does():
    """An EnvPool (gymnasium API) through the same path: a random CartPole episode lasts as long as gymnasium's
    on average, which would not hold if a reset step were counted as a step of the next episode."""
    envpool = pytest.importorskip("envpool")
    pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=16, seed=3)
    env = BatchedEnvs([batched_source(pool)], cfg_for("tensor_cartpole"))
    assert isinstance(env.sources[0], EnvPoolSource)
    try:
        obs, rewards, ends = play(env, 300)
    finally:
        env.close()
    lengths, running = [], np.zeros(16, np.int64)
    for end in ends:
        running += 1
        lengths += running[end].tolist()
        running[end] = 0
    assert 17 <= np.mean(lengths) <= 27  # random CartPole: about 22 steps
    assert all(float(np.abs(o[end]).max()) <= 0.05 for o, end in zip(obs[1:], ends) if end.any())  # fresh states


def test_infos_of_ended_copies_carry_their_extra_stats():
    cfg = cfg_for("tensor_cartpole")
    env = BatchedEnvs([batched_source(TensorCartPole(8, seed=2))], cfg)
    env.reset()
    ids = np.zeros(1, np.int32)
    for _ in range(100):
        step = env.step(ids, np.ones((8, 1), np.float32))
        if step.infos:
            break
    ended = np.flatnonzero(step.terminated | step.truncated)
    assert sorted(step.infos) == ended.tolist()
    for row in ended.tolist():
        assert step.infos[row]["episode_extra_stats"]["final_abs_x"] >= 0.0


def test_batched_flags_are_checked_before_anything_starts():
    with pytest.raises(ConfigError, match="--envpool"):
        cfg_for("tensor_cartpole", "--envpool=True")
    with pytest.raises(ConfigError, match="one policy"):
        cfg_for("tensor_cartpole", "--num_policies=2", "--serial_mode=True")
    assert cfg_for("tensor_cartpole", "--env_agents=32").env_agents == 32


# observations move as one copy ----------------------------------------------------------------------------------
COPYING = {"copy_", "clone", "cat", "stack", "cpu", "numpy", "to", "contiguous", "index_select", "tolist", "__array__"}


class CountedObs(torch.Tensor):
    """Observation rows that log every function that reads their data into a new place."""

    log: list[str] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in COPYING:
            CountedObs.log.append(name)
        return super().__torch_function__(func, types, args, kwargs)  # views of the rows stay counted


class CountedCartPole(TensorCartPole):
    steps_taken = 0

    def step(self, actions):
        CountedCartPole.steps_taken += 1
        return super().step(actions)

    def _obs(self) -> torch.Tensor:
        return self.state.clone().as_subclass(CountedObs)


def test_observations_enter_the_buffers_in_one_copy_per_step(tmp_path):
    """Every step's observation tensor is read exactly once, by the `copy_` into the shared trajectory buffers: no
    host round trip through numpy, no concatenation, no clone on the way."""
    from sf.train import run_rl

    register_env("counted_cartpole", lambda name, cfg, env_config=None, render_mode=None: CountedCartPole(16, seed=0))
    CountedObs.log = []
    CountedCartPole.steps_taken = 0
    cfg = parse_full_cfg(
        [
            "--env=counted_cartpole",
            "--device=cpu",
            "--serial_mode=True",
            "--train_for_env_steps=4096",
            "--batch_size=512",
            f"--train_dir={tmp_path}",
            "--experiment=counted",
        ],
        defaults=tensor_env_defaults,
    )
    assert run_rl(cfg) == 0
    training_steps = CountedCartPole.steps_taken
    assert training_steps >= 4096 // 16
    # the probe's env only resets; the worker's reset and each of its steps: one copy_ each
    assert CountedObs.log.count("copy_") == training_steps + 1
    assert set(CountedObs.log) == {"copy_"}, CountedObs.log[:10]


# learning ---------------------------------------------------------------------------------------------------------
def learned(tmp_path, name: str, *flags: str, timeout: float = 240) -> dict:
    result = run_sf(
        ["--env=tensor_cartpole", "--device=cpu", f"--train_dir={tmp_path}", f"--experiment={name}", *flags],
        module=TRAIN,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    assert "batch_step" in out and "copy_in" in out and "copy_out" in out  # the timing tree names the batched steps
    return json.loads((tmp_path / name / "summary.json").read_text())


@pytest.mark.slow  # the parallel one is the default test; both learn the same way
def test_tensor_cartpole_learns_in_serial_batched_mode(tmp_path, shm_before):
    summary = learned(tmp_path, "serial", "--serial_mode=True", "--train_for_env_steps=300000", "--seed=1")
    assert summary["status"] == "ok" and summary["avg_episode_reward"]["0"] >= SOLVED
    assert "final_abs_x" in summary["episode_extra_stats"]["0"]
    played = run_sf(
        ["--env=tensor_cartpole", "--device=cpu", f"--train_dir={tmp_path}", "--experiment=serial"],
        module="sf_examples.tensor_envs.enjoy_tensor_env",
        timeout=120,
    )
    assert played.returncode == 0, played.stderr[-2000:]
    average = re.search(r"Avg episode reward: ([\d.]+) over (\d+) episodes", played.stdout + played.stderr)
    assert average and float(average.group(1)) >= SOLVED and int(average.group(2)) >= 5
    assert not shm_leaked(shm_before)


def test_tensor_cartpole_learns_in_parallel_batched_mode(tmp_path, shm_before):
    summary = learned(tmp_path, "parallel", "--num_workers=2", "--train_for_env_steps=300000", "--seed=2")
    assert summary["status"] == "ok" and summary["avg_episode_reward"]["0"] >= SOLVED
    assert not shm_leaked(shm_before)


@pytest.mark.slow
def test_tensor_pendulum_learns_to_swing_up_and_hold(tmp_path):
    """1,024 copies, the family's defaults: a random policy scores about -1,200; measured -224 at 2M frames."""
    result = run_sf(
        ["--env=tensor_pendulum", "--device=cpu", "--serial_mode=True", "--train_for_env_steps=2000000", "--seed=1"]
        + [f"--train_dir={tmp_path}", "--experiment=pendulum"],
        module=TRAIN,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "pendulum" / "summary.json").read_text())
    assert summary["avg_episode_reward"]["0"] >= -400.0


def test_env_gpu_actions_on_the_cpu_hand_over_tensors_and_say_so_once(caplog):
    """Without a GPU, `--env_gpu_actions=True` gives the env CPU torch tensors, and the log says so once per
    process; `False` gives numpy arrays, as in Sample Factory."""
    import sf.envs.batched as batched

    class Recording(TensorCartPole):
        def step(self, actions):
            self.seen = actions
            return super().step(actions)

    batched._said_no_gpu.clear()
    with caplog.at_level("INFO", logger="sf"):
        envs = [
            BatchedEnvs([batched_source(Recording(4, seed=0))], cfg_for("tensor_cartpole", "--env_gpu_actions=True"))
        ]
        envs.append(
            BatchedEnvs([batched_source(Recording(4, seed=0))], cfg_for("tensor_cartpole", "--env_gpu_actions=True"))
        )
    said = [r for r in caplog.records if "--env_gpu_actions=True" in r.getMessage()]
    assert len(said) == 1 and "CPU" in said[0].getMessage()
    envs[0].reset()
    envs[0].step(np.zeros(1, np.int32), np.ones((4, 1), np.float32))
    seen = envs[0].sources[0].env.seen
    assert isinstance(seen, torch.Tensor) and seen.device.type == "cpu" and seen.tolist() == [1, 1, 1, 1]
    plain = BatchedEnvs([batched_source(Recording(4, seed=0))], cfg_for("tensor_cartpole"))
    plain.reset()
    plain.step(np.zeros(1, np.int32), np.zeros((4, 1), np.float32))
    assert isinstance(plain.sources[0].env.seen, np.ndarray) and plain.sources[0].env.seen.dtype == np.int32


SAMPLE_FACTORY_PYTHON = os.environ.get("SAMPLE_FACTORY_PYTHON")


@pytest.mark.skipif(not SAMPLE_FACTORY_PYTHON, reason="set SAMPLE_FACTORY_PYTHON to Sample Factory 2.1.1's python")
def test_sample_factory_trains_the_same_env_class_through_the_suite_launcher(tmp_path):
    """The `tensor_pendulum` suite's other side: Sample Factory's batched sampler steps the class sf trains."""
    from sf.bench.suites import SUITES, run_training

    suite = SUITES["tensor_pendulum"]
    script = str(ROOT / suite.sample_factory_script)
    env = {"OMP_NUM_THREADS": "1"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        patch.delenv("PYTHONPATH", raising=False)  # Sample Factory's own sf_examples, not ours
        fps, _ = run_training(SAMPLE_FACTORY_PYTHON, suite, ["--train_for_env_steps=65536"], tmp_path, script)
    assert fps > 0


def _gym_vector(name, cfg, env_config=None, render_mode=None):
    return gymnasium.make_vec("CartPole-v1", num_envs=16, vectorization_mode="sync")  # NEXT_STEP, gymnasium's default


def _envpool_vector(name, cfg, env_config=None, render_mode=None):
    import envpool

    return envpool.make("CartPole-v1", env_type="gymnasium", num_envs=16, seed=env_config.env_id + 1)


@pytest.mark.parametrize("factory", [_gym_vector, _envpool_vector], ids=["gymnasium_make_vec", "envpool"])
def test_a_vector_env_of_the_user_trains_as_it_is(tmp_path, factory):
    """A factory returning gymnasium's or EnvPool's vector env, unwrapped: a serial batched run trains on it, and the
    episodes it reports are whole CartPole episodes (a random start lasts about 22 steps, a reset step counted as a
    step would shorten them)."""
    from sf.train import run_rl

    if factory is _envpool_vector:
        pytest.importorskip("envpool")
    register_env("user_vector_cartpole", factory)
    flags = ["--env=user_vector_cartpole", "--device=cpu", "--serial_mode=True", "--train_for_env_steps=16384"]
    cfg = parse_full_cfg(
        [*flags, "--batch_size=512", f"--train_dir={tmp_path}", "--experiment=vec"], defaults=tensor_env_defaults
    )
    assert run_rl(cfg) == 0
    summary = json.loads((tmp_path / "vec" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 16384
    assert summary["num_episodes"] >= 100 and 15.0 <= summary["avg_episode_reward"]["0"] <= 200.0
