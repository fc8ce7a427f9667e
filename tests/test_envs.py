"""The env layer: registry, gymnasium family, space conversion and the adapter the rollout loop steps."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from sf.envs import EnvAdapter, EnvConfig, EnvNotFoundError, UnsupportedSpaceError, create_env, register_env
from sf.envs.gym_family import make_gym_env, register_gym_env
from sf.envs.registry import registered_envs, registry_snapshot, restore_registry
from sf.envs.spaces import ActionConverter, ObsConverter, action_spec_from_space, obs_spec_from_space


class SpaceEnv(gym.Env):
    """Emits samples of `observation_space` and remembers the last action it was given."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, episode_len: int = 3):
        self.observation_space, self.action_space = observation_space, action_space
        self.episode_len, self.t = episode_len, 0
        self.last_obs = self.last_action = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        self.last_obs = self.observation_space.sample()
        return self.last_obs, {}

    def step(self, action):
        self.t += 1
        self.last_action = action
        self.last_obs = self.observation_space.sample()
        return self.last_obs, 0.5, self.t >= self.episode_len, False, {"t": self.t}


def encode_action(space: spaces.Space, action) -> np.ndarray:
    """Test-side inverse of ActionConverter: discrete parts first in order, then continuous parts."""
    parts = list(zip(space.spaces, action)) if isinstance(space, spaces.Tuple) else [(space, action)]
    discrete, continuous = [], []
    for sub, value in parts:
        if isinstance(sub, spaces.Discrete):
            discrete.append([int(value) - int(sub.start)])
        elif isinstance(sub, spaces.MultiDiscrete):
            discrete.append((np.asarray(value) - sub.start).ravel())
        else:
            continuous.append(np.asarray(value).ravel())
    return np.concatenate([np.asarray(p, dtype=np.float32) for p in discrete + continuous])


def assert_matches_spec(obs: dict, spec: dict) -> None:
    assert obs.keys() == spec.keys()
    for key, (shape, dtype) in spec.items():
        assert obs[key].shape == shape, key
        assert obs[key].dtype == dtype, key


# registry -------------------------------------------------------------------------------------------
def test_registry_passes_arguments_to_factory():
    calls = []

    def factory(name, cfg, env_config, render_mode):
        calls.append((name, cfg, env_config, render_mode))
        return SpaceEnv(spaces.Box(-1, 1, (2,)), spaces.Discrete(2))

    cfg, env_config = SimpleNamespace(seed=1), EnvConfig(worker_index=2, vector_index=1, env_id=9)
    register_env("test_registry_env", factory)
    env = create_env("test_registry_env", cfg, env_config, render_mode="rgb_array")
    assert isinstance(env, SpaceEnv)
    assert calls == [("test_registry_env", cfg, env_config, "rgb_array")]
    assert "test_registry_env" in registered_envs()


def test_unknown_env_suggests_close_names():
    register_env("test_doom_battle", lambda *args: None)
    with pytest.raises(EnvNotFoundError, match="test_doom_battle") as info:
        create_env("test_doom_batle", cfg=None)
    assert isinstance(info.value, ValueError)
    assert "did you mean" in str(info.value)


def test_unknown_env_without_close_name_lists_registered():
    register_env("test_listed_env", lambda *args: None)
    with pytest.raises(EnvNotFoundError, match="registered: .*test_listed_env"):
        create_env("zzzzzzzzzzzzzzzzzzzzzzzzzz", cfg=None)


def test_gym_family_unknown_id_names_it():
    with pytest.raises(EnvNotFoundError, match="CartPol-v1") as info:
        make_gym_env("CartPol-v1", None, None)
    assert "CartPole" in str(info.value)  # gymnasium's own suggestion is kept


def test_register_gym_env_creates_that_id():
    register_gym_env("CartPole-v1")
    env = create_env("CartPole-v1", cfg=None)
    assert env.spec.id == "CartPole-v1"
    env.close()


# the adapter ----------------------------------------------------------------------------------------
def test_cartpole_through_adapter():
    env = EnvAdapter(gym.make("CartPole-v1"))
    assert env.obs_spec == {"obs": ((4,), np.dtype(np.float32))}
    assert env.action_spec.discrete_sizes == (2,) and env.action_spec.continuous_dim == 0
    first = env.reset(seed=3)
    assert_matches_spec(first, env.obs_spec)
    np.testing.assert_array_equal(env.reset(seed=3)["obs"], first["obs"])
    for step in range(500):
        obs, reward, terminated, truncated, info = env.step(np.array([step % 2], dtype=np.float32))
        assert_matches_spec(obs, env.obs_spec)
        assert type(reward) is float and type(terminated) is bool and type(truncated) is bool
        if terminated or truncated:
            break
    assert terminated or truncated
    env.close()


def test_image_env_is_declared_and_delivered_chw():
    raw = SpaceEnv(spaces.Box(0, 255, (12, 10, 3), dtype=np.uint8), spaces.Discrete(4))
    env = EnvAdapter(raw)
    assert env.obs_spec == {"obs": ((3, 12, 10), np.dtype(np.uint8))}
    obs = env.reset(seed=0)
    assert_matches_spec(obs, env.obs_spec)
    np.testing.assert_array_equal(obs["obs"], raw.last_obs.transpose(2, 0, 1))
    obs, *_ = env.step(np.array([3], dtype=np.float32))
    np.testing.assert_array_equal(obs["obs"][1], raw.last_obs[:, :, 1])
    assert raw.last_action == 3


def test_channel_first_uint8_box_is_left_as_is():
    assert obs_spec_from_space(spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)) == {
        "obs": ((4, 84, 84), np.dtype(np.uint8))
    }


def test_nested_dict_observation():
    space = spaces.Dict(
        {
            "pos": spaces.Box(-1, 1, (3,), dtype=np.float64),
            "inner": spaces.Dict(
                {"img": spaces.Box(0, 255, (8, 6, 1), dtype=np.uint8), "mode": spaces.Discrete(3, start=1)}
            ),
            "bits": spaces.MultiBinary(4),
            "pair": spaces.Tuple((spaces.Discrete(2), spaces.Box(0, 1, ()))),
        }
    )
    converter = ObsConverter(space)
    assert converter.spec == {
        "pos": ((3,), np.dtype(np.float32)),
        "inner.img": ((1, 8, 6), np.dtype(np.uint8)),
        "inner.mode": ((3,), np.dtype(np.float32)),
        "bits": ((4,), np.dtype(np.float32)),
        "pair.0": ((2,), np.dtype(np.float32)),
        "pair.1": ((1,), np.dtype(np.float32)),
    }
    space.seed(5)
    for _ in range(5):
        raw = space.sample()
        obs = converter(raw)
        assert_matches_spec(obs, converter.spec)
        np.testing.assert_allclose(obs["pos"], raw["pos"], rtol=1e-6)
        np.testing.assert_array_equal(obs["inner.img"][0], raw["inner"]["img"][:, :, 0])
        assert obs["inner.mode"].argmax() == raw["inner"]["mode"] - 1 and obs["inner.mode"].sum() == 1.0
        np.testing.assert_array_equal(obs["bits"], raw["bits"])
        assert obs["pair.1"][0] == np.float32(raw["pair"][1])


def test_tuple_observation_keys():
    spec = obs_spec_from_space(spaces.Tuple((spaces.Box(-1, 1, (2,)), spaces.MultiBinary((2, 3)))))
    assert spec == {"0": ((2,), np.dtype(np.float32)), "1": ((2, 3), np.dtype(np.float32))}


@pytest.mark.parametrize("start", [0, -2])
def test_discrete_observation_is_one_hot(start):
    converter = ObsConverter(spaces.Discrete(5, start=start))
    assert converter.spec == {"obs": ((5,), np.dtype(np.float32))}
    for value in range(start, start + 5):
        one_hot = converter(np.int64(value))["obs"]
        np.testing.assert_array_equal(one_hot, np.eye(5, dtype=np.float32)[value - start])
    converter(np.int64(start))["obs"][:] = 7.0  # callers may write into what they get...
    np.testing.assert_array_equal(converter(np.int64(start))["obs"], np.eye(5, dtype=np.float32)[0])  # ...safely


# actions --------------------------------------------------------------------------------------------
ROUND_TRIP_SPACES = {
    "discrete_offset": spaces.Discrete(4, start=3),
    "multidiscrete_2d": spaces.MultiDiscrete(np.array([[3, 4], [5, 2]])),
    "box_2d": spaces.Box(-2.0, 3.0, (2, 3), dtype=np.float32),
    "tuple": spaces.Tuple(
        (spaces.Box(-1, 1, (2,)), spaces.Discrete(3), spaces.MultiDiscrete([2, 6]), spaces.Box(0, 1, (1,)))
    ),
}


@pytest.mark.parametrize("name", list(ROUND_TRIP_SPACES))
def test_actions_round_trip(name):
    space = ROUND_TRIP_SPACES[name]
    converter = ActionConverter(space)
    space.seed(1)
    for _ in range(10):
        action = space.sample()
        flat = encode_action(space, action)
        assert flat.shape == (converter.spec.flat_dim,)
        back = converter(flat)
        assert space.contains(back), (action, back)
        for original, converted in zip(action, back) if isinstance(space, spaces.Tuple) else [(action, back)]:
            np.testing.assert_array_equal(np.asarray(converted), np.asarray(original))


def test_action_specs():
    assert action_spec_from_space(spaces.MultiDiscrete(np.array([[3, 4], [5, 2]]))).discrete_sizes == (3, 4, 5, 2)
    box = action_spec_from_space(spaces.Box(-1, 1, (2, 3)))
    assert box.discrete_sizes == () and box.continuous_dim == 6
    mixed = action_spec_from_space(ROUND_TRIP_SPACES["tuple"])
    assert mixed.discrete_sizes == (3, 2, 6) and mixed.continuous_dim == 3 and mixed.flat_dim == 6


def test_tuple_action_layout_is_discrete_first():
    converter = ActionConverter(spaces.Tuple((spaces.Box(-5, 5, (2,)), spaces.Discrete(3))))
    box_part, discrete_part = converter(np.array([2, 0.25, -0.5], dtype=np.float32))
    assert discrete_part == 2
    np.testing.assert_array_equal(box_part, np.array([0.25, -0.5], dtype=np.float32))


def test_box_action_is_clipped_into_bounds_and_copied():
    raw = SpaceEnv(
        spaces.Box(-1, 1, (3,)), spaces.Box(np.array([-0.4, -1, 0]), np.array([0.4, 1, np.inf]), dtype=np.float64)
    )
    env = EnvAdapter(raw)
    env.reset(seed=0)
    flat = np.array([-3.0, 0.5, 1e6], dtype=np.float32)
    env.step(flat)
    assert raw.action_space.contains(raw.last_action)  # float32 rounding of -0.4 must not step outside
    np.testing.assert_allclose(raw.last_action, [-0.4, 0.5, 1e6], rtol=1e-6)
    assert not np.shares_memory(raw.last_action, flat)


def test_unbounded_box_action_is_a_copy():
    converter = ActionConverter(spaces.Box(-np.inf, np.inf, (2,)))
    flat = np.array([1e9, -1e9], dtype=np.float32)
    out = converter(flat)
    np.testing.assert_array_equal(out, flat)
    assert not np.shares_memory(out, flat)


@pytest.mark.parametrize(
    "space, role",
    [
        (spaces.Text(5), "observation"),
        (spaces.Dict({"ok": spaces.Box(0, 1, (2,)), "name": spaces.Text(5)}), "observation"),
        (spaces.Text(5), "action"),
        (spaces.Tuple((spaces.Discrete(2), spaces.Text(5))), "action"),
        (spaces.Box(0, 5, (2,), dtype=np.int64), "action"),
    ],
)
def test_unsupported_space_names_it(space, role):
    convert = ObsConverter if role == "observation" else ActionConverter
    with pytest.raises(UnsupportedSpaceError) as info:
        convert(space)
    message = str(info.value)
    assert ("Text" in message or "Box" in message) and "supported:" in message
    assert isinstance(info.value, ValueError)
    if isinstance(space, spaces.Dict):
        assert "'name'" in message


# adapter attributes ---------------------------------------------------------------------------------
class ScaledEnv(SpaceEnv):
    reward_scale = 0.01
    frameskip = 4


def test_adapter_reads_reward_scale_and_frameskip_through_wrappers():
    inner = ScaledEnv(spaces.Box(-1, 1, (2,)), spaces.Discrete(2))
    env = EnvAdapter(gym.wrappers.RecordEpisodeStatistics(inner))
    assert env.reward_scale == 0.01 and env.frameskip == 4


def test_adapter_attribute_defaults():
    env = EnvAdapter(SpaceEnv(spaces.Box(-1, 1, (2,)), spaces.Discrete(2)))
    assert env.reward_scale == 1.0 and env.frameskip == 1


def test_adapter_generic_path_steps_dict_obs_and_tuple_action():
    obs_space = spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3)})
    raw = SpaceEnv(obs_space, spaces.Tuple((spaces.Discrete(2), spaces.Box(-1, 1, (1,)))), episode_len=2)
    env = EnvAdapter(raw)
    assert_matches_spec(env.reset(seed=1), env.obs_spec)
    obs, reward, terminated, truncated, info = env.step(np.array([1, 0.5], dtype=np.float32))
    assert_matches_spec(obs, env.obs_spec)
    assert obs["b"].argmax() == raw.last_obs["b"]
    assert raw.last_action[0] == 1 and raw.last_action[1][0] == np.float32(0.5)
    assert (reward, terminated, truncated, info) == (0.5, False, False, {"t": 1})
    assert env.step(np.array([0, 0.0], dtype=np.float32))[2] is True


def test_a_gymnasium_id_nothing_registered_is_made_by_gymnasium():
    assert "MountainCar-v0" not in registered_envs()  # an id no test registers
    env = create_env("MountainCar-v0", cfg=None)
    assert env.spec.id == "MountainCar-v0"


def test_a_registered_name_comes_before_the_gymnasium_id():
    made = SpaceEnv(spaces.Box(-1, 1, (2,)), spaces.Discrete(2))
    before = registry_snapshot()
    try:
        register_env("CartPole-v1", lambda *args: made)
        assert create_env("CartPole-v1", cfg=None) is made
    finally:  # other tests of this process make CartPole-v1 through the gym family
        restore_registry(before)


def test_an_unknown_name_says_which_call_to_add_and_a_gymnasium_typo_its_id():
    with pytest.raises(EnvNotFoundError, match=r"register_env\('zzzzzzzzzzzzzz', make_env\)"):
        create_env("zzzzzzzzzzzzzz", cfg=None)
    with pytest.raises(EnvNotFoundError, match="did you mean: CartPole-v1"):
        create_env("CartPol-v1", cfg=None)
