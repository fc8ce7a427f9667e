"""Every MuJoCo task sf registers opens, resets and steps through the adapter with the spaces it declares."""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

from sf.envs import EnvAdapter, EnvConfig, EnvNotFoundError, create_env  # noqa: E402
from sf.envs.registry import registered_envs  # noqa: E402
from sf_examples.mujoco.mujoco_envs import (  # noqa: E402
    MUJOCO_ENVS,
    TRACKING_CAMERA,
    env_placement,
    make_mujoco_env,
    mujoco_defaults,
    register_mujoco_envs,
)


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_mujoco_envs()
    register_mujoco_envs()  # idempotent


def test_all_tasks_registered():
    assert set(MUJOCO_ENVS) <= set(registered_envs())


@pytest.mark.parametrize("name", list(MUJOCO_ENVS))
def test_task_steps_with_declared_spaces(name):
    raw = create_env(name, cfg=None, env_config=EnvConfig(env_id=3))
    env = EnvAdapter(raw)
    try:
        assert raw.spec.id == MUJOCO_ENVS[name]
        ((obs_shape, obs_dtype),) = env.obs_spec.values()
        assert obs_shape == raw.observation_space.shape and obs_dtype == np.float32
        assert env.action_spec.discrete_sizes == ()
        assert env.action_spec.continuous_dim == int(np.prod(raw.action_space.shape))
        assert env.reward_scale == 1.0 and env.frameskip == 1

        rng = np.random.default_rng(0)
        obs = env.reset(seed=3)
        np.testing.assert_array_equal(env.reset(seed=3)["obs"], obs["obs"])
        for _ in range(5):
            action = rng.uniform(-2, 2, env.action_spec.flat_dim).astype(np.float32)  # beyond the bounds: clipped
            obs, reward, terminated, truncated, _ = env.step(action)
            assert obs["obs"].shape == obs_shape and obs["obs"].dtype == obs_dtype
            assert np.isfinite(obs["obs"]).all() and np.isfinite(reward)
            if terminated or truncated:
                obs = env.reset()
    finally:
        env.close()


def test_defaults_are_continuous_control_ppo():
    defaults = mujoco_defaults("mujoco_hopper")
    assert defaults["use_rnn"] is False and defaults["nonlinearity"] == "tanh"
    assert defaults["encoder_mlp_layers"] == [64, 64]
    samples_per_iteration = defaults["batch_size"] * defaults["num_batches_per_epoch"]
    assert 2048 <= samples_per_iteration <= 4096 and 4 <= defaults["num_batches_per_epoch"] <= 32
    envs = defaults["num_workers"] * defaults["num_envs_per_worker"]
    assert (
        samples_per_iteration % (envs * defaults["rollout"]) == 0
        or (envs * defaults["rollout"]) % samples_per_iteration == 0
    )
    assert defaults["num_envs_per_worker"] % defaults["worker_num_splits"] == 0


@pytest.mark.parametrize("total", [16, 64])
@pytest.mark.parametrize("cpus", [1, 2, 3, 6, 8, 12, 16, 64])
def test_placement_keeps_total_envs_on_any_machine(total, cpus):
    placement = env_placement(total, cpus)
    workers, per_worker = placement["num_workers"], placement["num_envs_per_worker"]
    assert workers * per_worker == total
    assert 1 <= workers <= cpus and per_worker % 2 == 0  # two splits per worker


def _per_iteration(d: dict) -> int:
    return d["batch_size"] * d["num_batches_per_epoch"]


def _total_envs(d: dict) -> int:
    return d["num_workers"] * d["num_envs_per_worker"]


def test_pendulums_train_on_smaller_iterations_than_locomotion():
    locomotion, pendulum = mujoco_defaults("mujoco_halfcheetah"), mujoco_defaults("mujoco_pendulum")
    assert _per_iteration(pendulum) < _per_iteration(locomotion)
    assert _total_envs(pendulum) < _total_envs(locomotion)
    for d in (locomotion, pendulum):  # one round of rollouts fills exactly one iteration
        assert _total_envs(d) * d["rollout"] == _per_iteration(d)
    assert mujoco_defaults("mujoco_hopper")["initial_stddev"] > locomotion["initial_stddev"]


def test_recording_follows_the_body_with_the_tracking_camera():
    for name in MUJOCO_ENVS:
        env = make_mujoco_env(name, cfg=None, env_config=None, render_mode="rgb_array")
        try:
            model = env.unwrapped.model
            track = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "track")
            expected = track if name in TRACKING_CAMERA else -1  # -1: gymnasium's free camera
            assert env.unwrapped.mujoco_renderer.camera_id == expected
            assert name not in TRACKING_CAMERA or track >= 0
        finally:
            env.close()


def test_defaults_reject_unknown_task():
    with pytest.raises(EnvNotFoundError, match="mujoco_hoper"):
        mujoco_defaults("mujoco_hoper")
